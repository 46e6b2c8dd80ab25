"""A Spark Python worker's long-lived objects are frozen once jetspark connects in a task,
and nowhere else (jetspark._worker_heap): a reused worker's collection after each task then
walks only what tasks create."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest

from support.jet_dev import JetDev

from .helpers import create, produce, source_struct, unique

pytestmark = pytest.mark.spark

FRESH_TIMEOUT_S = 120.0
"""Bound on one fresh interpreter (imports on a loaded 2-core machine)."""

PROBE = """
import gc, sys
from pyspark.taskcontext import TaskContext
from jetspark._bridge import shared_bridge

servers = sys.argv[1].split(",")
in_task = sys.argv[2] == "task"
if in_task:
    TaskContext._getOrCreate()  # as pyspark.worker does before it runs a task
before = gc.get_freeze_count()
first = shared_bridge(servers)
frozen = gc.get_freeze_count()
again = shared_bridge(servers, request_timeout=7.0)  # a second bridge: no second freeze
print(before, frozen, gc.get_freeze_count(), len(gc.get_objects()))
"""


def _probe(dev: JetDev, where: str) -> list[int]:
    out = subprocess.check_output(
        [sys.executable, "-c", PROBE, ",".join(dev.servers), where], timeout=FRESH_TIMEOUT_S
    )
    return [int(n) for n in out.split()]


def test_a_task_freezes_its_heap_once_when_it_first_connects(spark_jet: JetDev) -> None:
    before, frozen, after, tracked = _probe(spark_jet, "task")
    assert before == 0
    assert frozen > 10_000  # pyspark's, pyarrow's, the SDK's, the bridge's objects
    assert after == frozen
    assert tracked < frozen // 10  # what a collection still walks


def test_a_driver_or_runner_heap_is_never_frozen(spark_jet: JetDev) -> None:
    before, frozen, after, tracked = _probe(spark_jet, "driver")
    assert (before, frozen, after) == (0, 0, 0)
    assert tracked > 10_000


def test_a_spark_task_that_reads_leaves_its_worker_frozen(spark: Any, spark_jet: JetDev) -> None:
    """In a real Python worker: a task reads the source (its executor-side ``read``), then
    reports what the worker's next collection would walk."""
    from jetspark.options import source_options
    from jetspark.source import JetBatchReader

    stream = unique("heap")
    create(spark_jet.servers, stream, partitions=2)
    produce(spark_jet.servers, stream, [(b"k%d" % i, b"v") for i in range(20)])
    raw = {"servers": ",".join(spark_jet.servers), "streams": stream}
    reader = JetBatchReader(source_options(raw, streaming=False), source_struct())
    partitions = reader.partitions()

    def read(_: Any) -> Any:
        import gc

        rows = sum(b.num_rows for p in partitions for b in reader.read(p))
        yield rows, gc.get_freeze_count(), len(gc.get_objects())

    [(rows, frozen, tracked)] = spark.sparkContext.parallelize([0], 1).mapPartitions(read).collect()
    assert rows == 20
    assert frozen > 10_000
    assert tracked < frozen
