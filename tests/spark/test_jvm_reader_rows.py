"""The JVM reader's per-row work (issue 39, 16 KiB values): a row whose key or value has
the previous row's length reuses its array (no new 16 KiB array a row for the collector),
and still carries its own bytes; the records' CRCs are checked where the answer is read (on
the read-ahead thread, or the task's without readAhead), and a corrupt record below the
range's end fails the read, one at or above it does not. A real Spark and a real server."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from jetspark.jvm import JVM_FORMAT
from support.jet_dev import JetDev

from .helpers import create, produce, unique
from .test_jvm_reader import _batch, _run

pytestmark = pytest.mark.spark

VALUE = 16 * 1024
ROWS = 2000
REUSE_SAVES = 20_000_000
"""Bytes a read of ROWS values of one length must allocate less than one of alternating
lengths: a new array a row is ROWS x 16 KiB, 33 MB (what Spark itself allocates for a job
varies by a few MB)."""


def _value(i: int, size: int) -> bytes:
    """``size`` bytes (a multiple of 8) that only record ``i`` has."""
    return (b"%08d" % i) * (size // 8)


def _allocated(spark: Any) -> int:
    """Bytes the session's JVM has allocated in its heap so far (every thread, ended ones
    too)."""
    bean = spark._jvm.java.lang.management.ManagementFactory.getThreadMXBean()
    return int(bean.getTotalThreadAllocatedBytes())


def _data_dir(dev: JetDev) -> Path:
    """The ``--data-dir`` of ``dev`` (its log file is ``<data dir>-jet-dev.log``)."""
    return dev.log_path.with_name(dev.log_path.name.removesuffix("-jet-dev.log"))


def test_rows_of_one_length_keep_their_own_bytes(
    spark: Any, spark_jet: JetDev, tmp_path: Path
) -> None:
    """200 records whose keys and values all have one length (16 KiB values), each its
    own bytes: every row of a batch read (with and without readAhead) and of a streaming
    query's batches has its record's key and value."""
    servers = spark_jet.servers
    name = unique("jvm-same-length")
    create(servers, name, partitions=2)
    expected = {b"k%04d" % i: _value(i, VALUE) for i in range(200)}
    produce(servers, name, list(expected.items()))
    for ahead in ("true", "false"):
        rows = _batch(spark, JVM_FORMAT, spark_jet, name, readAhead=ahead)
        assert {bytes(r["key"]): bytes(r["value"]) for r in rows} == expected, ahead
    rows = _run(spark, JVM_FORMAT, spark_jet, name, tmp_path / "cp")
    assert {bytes(r["key"]): bytes(r["value"]) for r in rows} == expected


def test_values_of_one_length_allocate_no_array_a_row(spark: Any, spark_jet: JetDev) -> None:
    """A batch count of ROWS values of 16 KiB allocates at least REUSE_SAVES bytes less in
    the JVM than one of ROWS values whose lengths alternate (16,384 and 16,392 bytes: a new
    array every row), each read once before it is measured."""
    servers = spark_jet.servers
    same, alternating = unique("jvm-alloc-same"), unique("jvm-alloc-alt")
    for name, extra in ((same, 0), (alternating, 8)):
        create(servers, name, partitions=2)
        produce(servers, name, [(b"k", _value(i, VALUE + extra * (i % 2))) for i in range(ROWS)])

    def allocated(name: str) -> int:
        reader = spark.read.format(JVM_FORMAT).option("servers", ",".join(servers))
        df = reader.option("streams", name).load()
        before = _allocated(spark)
        assert df.count() == ROWS
        return _allocated(spark) - before

    allocated(same)
    allocated(alternating)
    spent = {name: min(allocated(name) for _ in range(2)) for name in (same, alternating)}
    assert spent[alternating] - spent[same] >= REUSE_SAVES, spent


@pytest.mark.parametrize("ahead", ["true", "false"])
def test_a_corrupt_record_fails_the_read_below_the_end_only(
    spark: Any, spark_jet: JetDev, ahead: str
) -> None:
    """One byte of record 30's value overwritten in the segment file (one partition): a read
    of the whole partition fails with a CRC mismatch at offset 30; a read ending at offset
    30 (endingOffsets) gets records 0-29, whether the answer was read ahead or not."""
    servers = spark_jet.servers
    name = unique(f"jvm-crc-{ahead}")
    create(servers, name, partitions=1)
    produce(servers, name, [(b"k%d" % i, _value(i, 1024)) for i in range(50)])
    (segment,) = _data_dir(spark_jet).glob(f"*/streams/{name}-*/0/*.log")
    at = segment.read_bytes().index(_value(30, 1024)) + 100
    with open(segment, "r+b") as f:  # in place: the server keeps the file open
        f.seek(at)
        f.write(b"\xff")

    with pytest.raises(Exception, match="CRC mismatch at offset 30 "):
        _batch(spark, JVM_FORMAT, spark_jet, name, readAhead=ahead)
    end = orjson.dumps({name: {"0": 30}}).decode()
    rows = _batch(spark, JVM_FORMAT, spark_jet, name, readAhead=ahead, endingOffsets=end)
    assert [(r["offset"], bytes(r["value"])) for r in rows] == [
        (i, _value(i, 1024)) for i in range(30)
    ]
