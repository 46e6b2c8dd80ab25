"""A Spark Python worker's long-lived objects are frozen once jetspark connects in a task,
and nowhere else (jetspark._worker_heap): a reused worker's collection after each task then
walks only what tasks create."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from support.jet_dev import JetDev

from .helpers import create, produce, source_struct, unique

pytestmark = pytest.mark.spark

FRESH_TIMEOUT_S = 120.0
"""Bound on one fresh interpreter (imports on a loaded 2-core machine)."""

PROBE = """
import gc, sys
import pyarrow as pa
from pyspark.taskcontext import TaskContext
from jetspark._write import write_batches
from jetspark.options import sink_options, source_options
from jetspark.source import JetBatchReader
from spark.helpers import source_struct

servers, stream, target, where = sys.argv[1:]
if where == "task":
    TaskContext._getOrCreate()  # as pyspark.worker does before it runs a task
raw = {"servers": servers, "streams": stream, "startingOffsets": "earliest"}
reader = JetBatchReader(source_options(raw, streaming=False), source_struct())

freeze, freezes = gc.freeze, []

def counted_freeze():
    freezes.append(1)
    freeze()

gc.freeze = counted_freeze

def read():
    return sum(b.num_rows for p in reader.partitions() for b in reader.read(p))

counts, calls = [gc.get_freeze_count()], [0]
rows = read()
counts.append(gc.get_freeze_count())
calls.append(len(freezes))
rows += read()  # the read path froze already: no second freeze
counts.append(gc.get_freeze_count())
calls.append(len(freezes))
batch = pa.record_batch({"value": pa.array([b"v"] * 5, pa.binary())})
sink = sink_options({"servers": servers, "stream": target})
written = write_batches(sink, 77, 0, [batch]).written
counts.append(gc.get_freeze_count())  # the write path's own freeze
calls.append(len(freezes))
print(rows, written, *counts, len(gc.get_objects()), *calls)
"""


def _probe(dev: JetDev, where: str) -> list[int]:
    stream, target = unique("heap"), unique("heap-out")
    create(dev.servers, stream, partitions=2)
    create(dev.servers, target, partitions=1)
    produce(dev.servers, stream, [(b"k%d" % i, b"v") for i in range(20)])
    args = [",".join(dev.servers), stream, target, where]
    tests = str(Path(__file__).parent.parent)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([tests, os.environ.get("PYTHONPATH", "")])}
    out = subprocess.check_output(
        [sys.executable, "-c", PROBE, *args], timeout=FRESH_TIMEOUT_S, env=env
    )
    return [int(n) for n in out.split()]


def test_a_task_freezes_its_heap_once_per_path(spark_jet: JetDev) -> None:
    rows, written, before, read, again, write, tracked, *freezes = _probe(spark_jet, "task")
    assert (rows, written) == (40, 5)
    assert before == 0
    assert read > 10_000  # pyspark's, pyarrow's (pyarrow.compute's), the SDK's, the bridge's
    assert again <= read  # frozen objects still die by reference counting
    # One freeze by the first read, none by the second, one by the write path. (Not the
    # frozen counts: the writer's modules were imported and frozen with the reader's, and
    # a run's frozen objects dying meanwhile outnumbered what the write added: 89,070 ->
    # 88,955 in a CI run.)
    assert freezes == [0, 1, 1, 2]
    assert write > 10_000
    assert tracked < read // 10  # what a collection still walks


def test_a_driver_or_runner_heap_is_never_frozen(spark_jet: JetDev) -> None:
    rows, written, *frozen, tracked, _0, _1, _2, freezes = _probe(spark_jet, "driver")
    assert (rows, written) == (40, 5)
    assert frozen == [0, 0, 0, 0]
    assert freezes == 0
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
