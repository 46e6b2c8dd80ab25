"""The JVM reader, format ``jetstream-jvm``: the source's batch and micro-batch reads in
Spark's JVM, with no Python worker between the server and Spark's rows.

Its Java sources ship in this package (``jetspark/java``); :func:`jar_path` compiles them
with ``javac`` against the running pyspark's jars at first use, into a cache directory keyed
by a hash of the sources and the Spark version, and the session gets the jar at build time::

    builder = jetspark.jvm.with_jvm_reader(SparkSession.builder)   # spark.jars += the jar
    spark = builder.getOrCreate()
    jetspark.register(spark)                        # "jetstream" (Python) stays
    fmt = jetspark.jvm.source_format(spark, options)  # "jetstream-jvm" where it can
    df = spark.readStream.format(fmt).options(**options).load()

The JVM reader has the Python source's rows and offsets (spec/spark.md, "The JVM reader"):
its checkpoints and the Python source's carry over either way. It takes a subset of the
options (:data:`JVM_OPTIONS`): plaintext or TLS connections (with a token or user + password),
streams by name, start and end offsets, maxRecordsPerTrigger, includeHeaders.
:func:`source_format` picks ``jetstream`` (and logs why) for any other option, or when the
session does not have the jar.
"""

from __future__ import annotations

import fcntl
import hashlib
import logging
import os
import shutil
import subprocess
import tempfile
import zipfile
from collections.abc import Mapping
from importlib import resources
from pathlib import Path
from typing import Any

from jetspark.errors import JetSparkError

__all__ = [
    "JVM_FORMAT",
    "JVM_OPTIONS",
    "JavacNotFoundError",
    "jar_path",
    "source_format",
    "with_jvm_reader",
]

log = logging.getLogger("jetspark")

JVM_FORMAT = "jetstream-jvm"
"""The JVM reader's format name (a ``DataSourceRegister`` in the jar)."""

JVM_OPTIONS = frozenset(
    {
        "servers",
        "streams",
        "startingoffsets",
        "endingoffsets",
        "failondataloss",
        "fetchmaxbytes",
        "requesttimeout",
        "maxrecordspertrigger",
        "maxoffsetspertrigger",
        "minpartitions",
        "fetchstream",
        "grouppartitions",
        "readahead",
        "includeheaders",
        "token",
        "user",
        "password",
        "tls",
        "tlsca",
        "tlscert",
        "tlskey",
        "tlsserverhostname",
    }
)
"""The source options (lower case) the JVM reader takes; the jar refuses the Python source's
others."""

_JAR = "jetspark-jvm.jar"
_BUILD_TIMEOUT_S = 600


class JavacNotFoundError(JetSparkError):
    """The JVM reader's jar must be built and no ``javac`` was found (``JAVA_HOME/bin`` or
    ``PATH``)."""


def _sources() -> list[tuple[str, bytes]]:
    """(path inside ``jetspark/java``, bytes) of every shipped file, sorted."""
    root = resources.files("jetspark") / "java"
    out: list[tuple[str, bytes]] = []

    def walk(node: Any, prefix: str) -> None:
        for child in node.iterdir():
            name = f"{prefix}{child.name}"
            if child.is_dir():
                walk(child, f"{name}/")
            elif child.name.endswith(".java") or prefix.startswith("META-INF/"):
                out.append((name, child.read_bytes()))

    walk(root, "")
    return sorted(out)


def _javac() -> str:
    home = os.environ.get("JAVA_HOME")
    if home and os.access(os.path.join(home, "bin", "javac"), os.X_OK):
        return os.path.join(home, "bin", "javac")
    found = shutil.which("javac")
    if found is None:
        raise JavacNotFoundError(
            "the jetstream-jvm reader's jar is built at first use and needs javac (a JDK 17+):"
            " set JAVA_HOME or put javac on PATH, or use format 'jetstream'"
        )
    return found


def _spark_jars() -> tuple[str, str]:
    """(pyspark's version, its jars directory)."""
    import pyspark

    return pyspark.__version__, os.path.join(os.path.dirname(pyspark.__file__), "jars")


def _cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(os.environ.get("JETSPARK_JVM_CACHE") or Path(base) / "jetspark" / "jvm")


def jar_path() -> Path:
    """The JVM reader's jar for the running pyspark, built first if it is not in the cache.

    Raises:
        JavacNotFoundError: it must be built and there is no javac.
        JetSparkError: javac failed (its output in the message).
    """
    sources = _sources()
    version, jars = _spark_jars()
    digest = hashlib.sha256(version.encode())
    for name, data in sources:
        digest.update(name.encode() + b"\0" + hashlib.sha256(data).digest())
    folder = _cache_dir() / digest.hexdigest()[:16]
    jar = folder / _JAR
    if jar.is_file():
        return jar
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one build at a time (pytest-xdist workers)
        if not jar.is_file():
            _build(sources, jars, jar)
    return jar


def _build(sources: list[tuple[str, bytes]], jars: str, jar: Path) -> None:
    javac = _javac()
    with tempfile.TemporaryDirectory(prefix="jetspark-jvm-") as tmp:
        src, out = Path(tmp, "src"), Path(tmp, "classes")
        out.mkdir()
        java = []
        for name, data in sources:
            path = src / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
            if name.endswith(".java"):
                java.append(str(path))
        cmd = [javac, "-nowarn", "--release", "17", "-cp", f"{jars}/*", "-d", str(out), *java]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=_BUILD_TIMEOUT_S)
        if done.returncode != 0:
            raise JetSparkError(f"building the jetstream-jvm jar failed:\n{done.stderr}")
        partial = jar.with_suffix(".partial")
        with zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED) as zf:
            for path in sorted(out.rglob("*.class")):
                zf.write(path, path.relative_to(out).as_posix())
            for name, data in sources:
                if name.startswith("META-INF/"):
                    zf.writestr(name, data)
        os.replace(partial, jar)


def with_jvm_reader(builder: Any) -> Any:
    """``builder`` (a ``SparkSession.Builder``) with the JVM reader's jar added to
    ``spark.jars`` (built first if needed): the driver and the executors load it from there.
    Call it before ``getOrCreate()``; a running session cannot take the jar."""
    jar = str(jar_path())
    current = builder._options.get("spark.jars", "")
    jars = ",".join(j for j in (current, jar) if j)
    return builder.config("spark.jars", jars)


def has_jvm_reader(spark: Any) -> bool:
    """True if ``spark`` has the JVM reader (its session was built with the jar)."""
    jars = spark.sparkContext.getConf().get("spark.jars", "") or ""
    return any(j.endswith(_JAR) for j in jars.split(","))


def source_format(spark: Any, options: Mapping[str, str]) -> str:
    """``jetstream-jvm`` if ``spark`` has the JVM reader and it takes every one of
    ``options``, else ``jetstream`` (the Python source, which takes them all), logged."""
    if not has_jvm_reader(spark):
        log.info("jetstream: the session has no jetstream-jvm jar; the Python reader reads")
        return "jetstream"
    other = sorted(k for k in options if k.lower() not in JVM_OPTIONS)
    if other:
        log.warning(
            "jetstream: option(s) %s need the Python reader (format 'jetstream'), not "
            "jetstream-jvm",
            ", ".join(other),
        )
        return "jetstream"
    return JVM_FORMAT
