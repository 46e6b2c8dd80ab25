"""The JVM options and the worker Python of every Spark the tests start (a shared session,
a local-cluster driver, a doc example's own).

Tests are short and the CI box has 2 cores: the C1 compiler only (no C2 compiler threads)
and the serial GC. Measured on two test_pipeline tests under load 8-11: 141-165 s -> 77-90 s;
on the spark.md doc example at load 17-18: 156 s -> 85 s. And no bytecode verification of
the classes loaded from the class path (``-XX:-BytecodeVerificationRemote``, a diagnostic
option: the JDK's own classes are not verified anyway): a Spark JVM loads thousands of
classes from pyspark's jars, installed by pip, and verifying them is CPU spent at every
start of every driver and executor JVM.

Spark's Python workers (the daemons, a streaming query's source runner, the planner
workers) run this interpreter through tests/support/spark_python.sh, which imports pyspark
from site-packages (compiled) rather than from the source-only pyspark.zip Spark puts first
on their path: importing what a streaming source runner needs took 1.9-2.3 s of CPU from
the zip, 0.8-1.0 s from site-packages (2-core VM, load ~15), and the source runner must
connect back to the JVM within Spark's fixed 10 s.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

JVM_OPTIONS = (
    "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
    " -XX:+UnlockDiagnosticVMOptions -XX:-BytecodeVerificationRemote"
)
"""For ``spark.driver.extraJavaOptions`` (a session the test builds) or ``JDK_JAVA_OPTIONS``
(a Spark a program under test starts)."""
WORKER_PYTHON = Path(__file__).with_name("spark_python.sh")
"""PYSPARK_PYTHON of the tests' Sparks (see the module's docstring)."""


def worker_python_env() -> dict[str, str]:
    """The environment that makes Spark's Python workers this interpreter, run through
    :data:`WORKER_PYTHON`."""
    return {"PYSPARK_PYTHON": str(WORKER_PYTHON), "JET_SPARK_WORKER_PYTHON": sys.executable}


def use_worker_python() -> None:
    """Set :func:`worker_python_env` in this process's environment (before a Spark starts)."""
    os.environ.update(worker_python_env())
