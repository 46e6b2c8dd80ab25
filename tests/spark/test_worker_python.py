"""The tests' Spark worker Python (tests/support/spark_python.sh, support.spark_jvm): it is
this interpreter, with pyspark.zip and py4j's zip dropped from the PYTHONPATH Spark gives it
and every other entry kept, so that pyspark comes from site-packages, compiled."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pyspark

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
