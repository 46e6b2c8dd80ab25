"""The tests' Spark worker Python (tests/support/spark_python.sh, support.spark_jvm) and
jetspark's own (jetspark.worker_python, which jetspark.demo.local_spark uses): each is this
interpreter, with pyspark.zip and py4j's zip dropped from the PYTHONPATH Spark gives it and
every other entry kept, so that pyspark comes from site-packages, compiled."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pyspark
import pytest

from jetspark.worker_python import worker_python
from support.spark_jvm import WORKER_PYTHON, worker_python_env

PROBE = (
    "import os, sys, pyspark; "
    "print(sys.executable); print(os.environ.get('PYTHONPATH')); print(pyspark.__file__)"
)


def _probe(pythonpath: str) -> list[str]:
    env = {**worker_python_env(), "PYTHONPATH": pythonpath, "PATH": "/usr/bin:/bin"}
    done = subprocess.run(
        [env["PYSPARK_PYTHON"], "-c", PROBE], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def test_the_zips_leave_the_path_and_pyspark_comes_compiled_from_site_packages(
    tmp_path: Path,
) -> None:
    zips = Path(pyspark.__file__).parent / "python" / "lib"
    spark_path = f"{zips / 'pyspark.zip'}:{tmp_path}:{zips / 'py4j-0.10.9.9-src.zip'}:/other"
    executable, path, module = _probe(spark_path)
    assert executable == sys.executable
    assert path == f"{tmp_path}:/other"
    assert module == pyspark.__file__  # not .../pyspark.zip/pyspark/__init__.py
    assert _probe(str(zips / "pyspark.zip"))[1] == "None"  # nothing left: unset


def test_without_the_interpreter_it_fails_saying_so() -> None:
    done = subprocess.run(
        [str(WORKER_PYTHON), "-c", "pass"],
        env={"PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode != 0
    assert "spark_jvm.py" in done.stderr


def _probe_script(script: str, pythonpath: str) -> list[str]:
    env = {"PYTHONPATH": pythonpath, "PATH": "/usr/bin:/bin"}
    done = subprocess.run(
        [script, "-c", PROBE], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def test_jetspark_worker_python_drops_pysparks_own_zips_and_is_written_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    script = worker_python()
    assert Path(script).parent == tmp_path / "cache" / "jetspark"
    zips = Path(pyspark.__file__).parent / "python" / "lib"
    other_zip = tmp_path / "elsewhere" / "pyspark.zip"  # another Spark's: kept
    spark_path = f"{zips / 'pyspark.zip'}:{tmp_path}:{zips / 'py4j-0.10.9.9-src.zip'}:{other_zip}"
    executable, path, module = _probe_script(script, spark_path)
    assert executable == sys.executable
    assert path == f"{tmp_path}:{other_zip}"
    assert module == pyspark.__file__  # compiled from site-packages, not from the zip
    assert _probe_script(script, str(zips / "pyspark.zip"))[1] == "None"
    written = os.stat(script).st_mtime_ns
    assert worker_python() == script
    assert os.stat(script).st_mtime_ns == written  # not written again


def test_jetspark_worker_python_is_this_interpreter_without_a_cache_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocker))  # a file: no directory below it
    assert worker_python() == sys.executable
