"""A Python for Spark's Python workers that imports pyspark compiled (``PYSPARK_PYTHON``).

Spark starts its Python processes (the executors' worker daemon, a streaming query's source
runner, the data source planners) with ``$SPARK_HOME/python/lib/pyspark.zip`` and py4j's
zip first on their ``PYTHONPATH``. The zip holds sources only, so each process compiles
every pyspark module it imports again: a streaming query's source runner, which Spark starts
for every query and which must connect back to the JVM within Spark's fixed 10 s, spent
1.9-2.3 CPU-s on its imports from the zip against 0.8-1.0 from site-packages (2-core VM,
load ~15), and under load failed the query ("Python worker failed to connect back").

With pip's pyspark, ``SPARK_HOME`` is the installed package, and the same pyspark and py4j
are in site-packages, compiled. :func:`worker_python` writes (once, under the user's cache
directory) a small ``sh`` script that takes exactly those two zips off the ``PYTHONPATH``
Spark gives it, keeps every other entry, and runs this interpreter::

    os.environ.setdefault("PYSPARK_PYTHON", jetspark.worker_python.worker_python())
    # or, for spark-submit and a standalone cluster on this machine:
    export PYSPARK_PYTHON=$(python -m jetspark.worker_python)

A Spark distribution elsewhere (``SPARK_HOME`` not pip's pyspark) keeps its own zip: the
script drops only the zips of the pyspark this interpreter imports. Where the script cannot
be made (not POSIX, no zip, no writable cache directory) it is this interpreter itself.
:func:`jetspark.demo.local_spark` uses it for local masters.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import shlex
import sys
import tempfile
from pathlib import Path

__all__ = ["script_text", "worker_python"]


def _package_dir(name: str) -> Path | None:
    """The directory of the installed package ``name`` (from a plain directory, not a zip),
    without importing it."""
    spec = importlib.util.find_spec(name)
    if spec is None or spec.origin is None or not os.path.isfile(spec.origin):
        return None
    return Path(spec.origin).parent


def _zips() -> list[str]:
    """pyspark's own pyspark.zip and py4j zip, when pyspark and py4j are installed as
    plain packages beside them ([] otherwise)."""
    pyspark = _package_dir("pyspark")
    if pyspark is None or _package_dir("py4j") is None:
        return []
    lib = pyspark / "python" / "lib"
    zips = sorted(str(p) for p in lib.glob("py4j-*-src.zip"))
    if not (lib / "pyspark.zip").is_file():
        return []
    return [str(lib / "pyspark.zip"), *zips]


def script_text(python: str, zips: list[str]) -> str:
    """The ``sh`` script that runs ``python`` with the entries ``zips`` taken off
    ``PYTHONPATH`` (unset when nothing is left)."""
    quoted = " ".join(shlex.quote(z) for z in zips)
    return f"""#!/bin/sh
# Written by jetspark.worker_python: Spark's Python workers run {python}
# with pyspark's own zips off PYTHONPATH, so that pyspark is imported compiled.
path=":${{PYTHONPATH:-}}:"
for zip in {quoted}; do
    while :; do
        case $path in
            *":$zip:"*) path="${{path%%":$zip:"*}}:${{path#*":$zip:"}}" ;;
            *) break ;;
        esac
    done
done
path=${{path#:}}
path=${{path%:}}
if [ -n "$path" ]; then
    export PYTHONPATH="$path"
else
    unset PYTHONPATH
fi
exec {shlex.quote(python)} "$@"
"""


def _cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "jetspark"


def worker_python() -> str:
    """The path of the script (see the module's docstring) for this interpreter, written
    if it is not there yet; ``sys.executable`` where it cannot be made."""
    zips = _zips()
    if os.name != "posix" or not zips:
        return sys.executable
    text = script_text(sys.executable, zips)
    digest = hashlib.sha256(text.encode()).hexdigest()[:16]
    directory = _cache_dir()
    path = directory / f"worker-python-{digest}.sh"
    try:
        if path.is_file() and path.read_text() == text and os.access(path, os.X_OK):
            return str(path)
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=directory, prefix=".worker-python-")
        try:
            with os.fdopen(fd, "w") as f:
                f.write(text)
            os.chmod(tmp, 0o700)
            os.replace(tmp, path)
        except BaseException:
            os.unlink(tmp)
            raise
    except OSError:
        return sys.executable
    return str(path)


if __name__ == "__main__":
    print(worker_python())
