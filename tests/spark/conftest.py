"""Fixtures for the Spark tests: one local[2] SparkSession and one `jet dev` per session.

The jet server runs maintenance every half second so that retention and compaction
happen within a test. Spark's UI is off, shuffles use two partitions and the JVM runs with
the C1 compiler only and the serial GC, to keep the suite fast on two cores.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")

from support.jet_dev import JetDev
from support.spark_jvm import JVM_OPTIONS, use_worker_python

MAINTENANCE_INTERVAL_S = "0.5"
HW_CHECKPOINT_INTERVAL_S = "0.25"  # maintenance runs at most once per checkpoint tick


SESSION_START_TIMEOUT_S = 400
"""Timeout of a test that uses the shared session: whichever runs first bears its start,
which took over 120 s (the suite's default) at load ~10 on two cores. A timeout inside
getOrCreate() leaves py4j out of step, and every later test then fails."""


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Give tests that use the ``spark`` session SESSION_START_TIMEOUT_S unless they set
    their own timeout."""
    for item in items:
        uses_spark = "spark" in getattr(item, "fixturenames", ())
        if uses_spark and item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(SESSION_START_TIMEOUT_S))


@pytest.fixture(scope="session")
def spark_jet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[JetDev]:
    """`jet dev --servers 1` with fast maintenance, shared by every Spark test."""
    data_dir = tmp_path_factory.mktemp("spark-jet") / "data"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("JET_STORAGE_MAINTENANCE_INTERVAL_S", MAINTENANCE_INTERVAL_S)
        mp.setenv("JET_STORAGE_HW_CHECKPOINT_INTERVAL_S", HW_CHECKPOINT_INTERVAL_S)
        dev = JetDev.start(data_dir)
    with dev:
        yield dev


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """A local[2] SparkSession with the jetstream format registered and the jetstream-jvm
    reader's jar (:mod:`jetspark.jvm`)."""
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        pytest.skip("no Java for Spark")
    use_worker_python()
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    import jetspark
    from jetspark.jvm import with_jvm_reader

    builder = (
        SparkSession.builder.master("local[2]")
        .appName("jetspark-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.default.parallelism", "2")
        .config("spark.sql.streaming.stopTimeout", "30s")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.python.worker.reuse", "true")
        # The driver is the executor in local mode (support.spark_jvm).
        .config("spark.driver.extraJavaOptions", JVM_OPTIONS)
        # Python workers over Unix sockets: over TCP each Python task waits ~40 ms for
        # its input (jetspark.demo.UNIX_SOCKETS).
        .config("spark.python.unix.domain.socket.enabled", "true")
    )
    # The jetstream-jvm reader's jar (built at first use, then cached): test_jvm_reader.
    session = with_jvm_reader(builder).getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    jetspark.register(session)
    try:
        yield session
    finally:
        session.stop()


@pytest.fixture
def checkpoint(tmp_path: Path) -> Path:
    """A fresh checkpoint directory."""
    return tmp_path / "checkpoint"
