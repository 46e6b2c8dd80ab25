"""The stream reader's offset logic against a real server, called directly (no JVM).

Spark calls these methods from its source runner; here they are called in-process, which
tests the planning rules quickly: deterministic reads, admission control with partitions
that appear mid-query, the AvailableNow target, a stream deleted under a checkpoint, and
small ranges packed into few Spark partitions.
"""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from jetsdk import Client
from support.jet_dev import JetDev

from .helpers import create, produce, source_struct, unique

pytestmark = pytest.mark.spark


def _reader(dev: JetDev, **options: str) -> Any:
    from jetspark.options import source_options
    from jetspark.source import JetStreamReader

    raw = {"servers": ",".join(dev.servers), "startingOffsets": "earliest", **options}
    return JetStreamReader(source_options(raw, streaming=True), source_struct())


def _rows(reader: Any, start: dict[str, Any], end: dict[str, Any]) -> list[tuple[Any, ...]]:
    out: list[tuple[Any, ...]] = []
    for partition in reader.partitions(start, end):
        for batch in reader.read(partition):
            out.extend(zip(*(batch.column(i).to_pylist() for i in range(batch.num_columns))))
    return out


def _stored_bytes(dev: JetDev, stream: str) -> int:
    async def main() -> int:
        async with Client(list(dev.servers)) as client:
            info = await client.describe_stream(stream)
            return sum(p.size_bytes or 0 for p in info.partitions)

    return anyio.run(main)


def test_small_ranges_share_a_spark_partition_within_max_bytes(spark_jet: JetDev) -> None:
    """Eight small partitions' ranges are one Spark partition, read range after range; a
    bound of a quarter of the bytes gives 4 to 7 Spark partitions, 1 byte (or minPartitions
    8) one per stream partition; every plan reads the same rows."""
    name = unique("packed")
    create(spark_jet.servers, name, partitions=8)
    produce(spark_jet.servers, name, [(f"k{i}".encode(), b"v" * 100) for i in range(400)])
    reader = _reader(spark_jet, streams=name)
    start = reader.initialOffset()
    end = reader.latestOffset(start, None)
    (whole,) = reader.partitions(start, end)
    assert [(r.partition, r.start, r.end) for r in whole.ranges] == [
        (p, 0, end[name][str(p)]) for p in range(8) if end[name][str(p)]
    ]
    rows = _rows(reader, start, end)
    assert len(rows) == 400
    assert [row[4:6] for row in rows] == sorted(row[4:6] for row in rows)  # partition, offset
    quarter = _stored_bytes(spark_jet, name) // 4
    for options, fewest, most in (
        ({"maxBytesPerPartition": str(quarter)}, 4, 7),
        ({"maxBytesPerPartition": "1"}, 8, 8),
        ({"minPartitions": "8"}, 8, 8),
    ):
        other = _reader(spark_jet, streams=name, **options)
        assert fewest <= len(other.partitions(start, end)) <= most, options
        assert sorted(_rows(other, start, end)) == sorted(rows)


def test_same_range_same_rows_and_admission_control(spark_jet: JetDev) -> None:
    from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows

    name = unique("direct")
    create(spark_jet.servers, name, partitions=2)
    produce(spark_jet.servers, name, [(f"k{i}".encode(), b"v%d" % i) for i in range(90)])
    reader = _reader(spark_jet, streams=name)
    start = reader.initialOffset()
    assert start == {name: {"0": 0, "1": 0}}
    end = reader.latestOffset(start, ReadMaxRows(40))
    assert sum(end[name].values()) == 40
    first = _rows(reader, start, end)
    assert len(first) == 40
    assert _rows(reader, start, end) == first  # read() is deterministic
    rest = reader.latestOffset(end, ReadAllAvailable())
    assert sum(rest[name].values()) == 90
    assert len(_rows(reader, end, rest)) == 50
    assert reader.latestOffset(rest, ReadAllAvailable()) == rest  # nothing new


def test_latest_offset_without_arguments_honours_max_records(spark_jet: JetDev) -> None:
    """PySpark 4.0/4.1 call latestOffset() without start or limit: the reader counts from
    the last batch Spark planned (a restart passes the checkpoint's offsets to
    partitions(end, end) first) and applies maxRecordsPerTrigger itself."""
    name = unique("nolimit")
    create(spark_jet.servers, name, partitions=2)
    produce(spark_jet.servers, name, [(f"k{i}".encode(), b"v%d" % i) for i in range(90)])
    reader = _reader(spark_jet, streams=name, maxRecordsPerTrigger="40")
    end = reader.latestOffset()  # a new query: Spark asks before initialOffset()
    assert sum(end[name].values()) == 40
    start = reader.initialOffset()
    assert len(_rows(reader, start, end)) == 40  # plans the batch: the next starts at end
    second = reader.latestOffset()
    assert sum(second[name].values()) == 80
    assert all(second[name][p] >= end[name][p] for p in end[name])

    restarted = _reader(spark_jet, streams=name, maxRecordsPerTrigger="40")
    restarted.partitions(second, second)  # what Spark's setLatestSeenOffset does
    third = restarted.latestOffset()
    assert sum(third[name].values()) == 90
    assert len(_rows(restarted, second, third)) == 10


def test_pattern_picks_up_new_streams_and_available_now_caps(spark_jet: JetDev) -> None:
    from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows

    prefix = unique("dyn")
    first, second = f"{prefix}-a", f"{prefix}-b"
    create(spark_jet.servers, first)
    produce(spark_jet.servers, first, [(None, b"a%d" % i) for i in range(10)])
    reader = _reader(spark_jet, streamsPattern=f"{prefix}-.*")
    start = reader.initialOffset()
    assert start == {first: {"0": 0}}
    create(spark_jet.servers, second)
    produce(spark_jet.servers, second, [(None, b"b%d" % i) for i in range(30)])
    end = reader.latestOffset(start, ReadMaxRows(20))
    assert set(end) == {first, second}
    assert end[first]["0"] + end[second]["0"] == 20
    planned = [r for p in reader.partitions(start, end) for r in p.ranges]
    (new,) = [r for r in planned if r.stream == second]
    assert new.new_partition

    reader.prepareForTriggerAvailableNow()
    produce(spark_jet.servers, first, [(None, b"late")])
    capped = reader.latestOffset(end, ReadAllAvailable())
    assert capped == {first: {"0": 10}, second: {"0": 30}}  # not the late record


def test_a_deleted_stream_is_data_loss_unless_allowed(spark_jet: JetDev) -> None:
    from pyspark.sql.streaming.datasource import ReadAllAvailable

    from jetspark.errors import DataLossError

    keep, gone = unique("keep"), unique("gone")
    for name in (keep, gone):
        create(spark_jet.servers, name)
        produce(spark_jet.servers, name, [(None, b"x")])
    start = {keep: {"0": 1}, gone: {"0": 1}}

    async def delete() -> None:
        async with Client(spark_jet.servers) as client:
            await client.delete_stream(gone)

    anyio.run(delete)
    strict = _reader(spark_jet, streams=keep)
    with pytest.raises(DataLossError, match=f"data loss in {gone}/0"):
        strict.latestOffset(start, ReadAllAvailable())
    lenient = _reader(spark_jet, streams=keep, failOnDataLoss="false")
    assert lenient.latestOffset(start, ReadAllAvailable()) == {keep: {"0": 1}}


def test_arrow_batches_equal_the_fetched_records(spark_jet: JetDev) -> None:
    """read() yields Arrow batches straight from the record bytes: over many small fetches,
    with headers, keyless and empty-key records, every column equals what jetsdk decodes."""
    import pyarrow as pa

    from jetspark.options import source_options
    from jetspark.source import JetStreamReader

    from .helpers import read_all

    name = unique("arrow")
    create(spark_jet.servers, name, partitions=2)
    keys = [None, b"", b"a", b"bb"]
    produce(
        spark_jet.servers,
        name,
        [(keys[i % 4], b"v" * (i % 50)) for i in range(300)],
        chunk=70,
    )
    produce(spark_jet.servers, name, [(b"h", b"with-headers")], headers=[("x", b"1"), ("y", b"")])
    schema = source_struct(include_headers=True)
    raw = {
        "servers": ",".join(spark_jet.servers),
        "startingOffsets": "earliest",
        "streams": name,
        "fetchMaxBytes": "2000",
    }
    reader = JetStreamReader(source_options(raw, streaming=True), schema)
    start = reader.initialOffset()
    end = reader.latestOffset(start, _all())
    batches = [b for p in reader.partitions(start, end) for b in reader.read(p)]
    assert all(isinstance(b, pa.RecordBatch) for b in batches)
    assert len(batches) > 4  # fetchMaxBytes 2000: several fetches per partition
    rows = pa.Table.from_batches(batches).to_pylist()
    expected = [
        {
            "key": r.key,
            "value": r.value,
            "stream": name,
            "subject": r.subject,
            "offset": r.offset,
            "headers": [{"key": k, "value": v} for k, v in r.headers],
        }
        for r in read_all(spark_jet.servers, name)
    ]
    assert len(rows) == 301
    got = [{k: row[k] for k in expected[0]} for row in rows]
    assert sorted(map(repr, got)) == sorted(map(repr, expected))
    for part in (0, 1):
        offsets = [r["offset"] for r in rows if r["partition"] == part]
        assert offsets == list(range(len(offsets)))  # each partition whole, in order
    assert sum(1 for r in rows if r["key"] is None) == 75
    assert [r["headers"] for r in rows if r["value"] == b"with-headers"] == [
        [{"key": "x", "value": b"1"}, {"key": "y", "value": b""}]
    ]


def _all() -> Any:
    from pyspark.sql.streaming.datasource import ReadAllAvailable

    return ReadAllAvailable()


def test_batch_read_ends_at_ending_timestamp(spark_jet: JetDev) -> None:
    """endingTimestamp: each partition ends before its first record stored at or after it."""
    from jetspark.errors import OptionError
    from jetspark.options import source_options
    from jetspark.source import JetBatchReader

    from .helpers import read_all

    name = unique("until")
    create(spark_jet.servers, name)
    produce(spark_jet.servers, name, [(None, b"v%d" % i) for i in range(40)], chunk=4)
    stored = read_all(spark_jet.servers, name)
    cut_ms = stored[20].timestamp // 1_000_000 + 1
    expected = [r.value for r in stored if r.timestamp < cut_ms * 1_000_000]
    assert 20 < len(expected) < 40  # acked rounds of 4: later records are stored later
    raw = {"servers": ",".join(spark_jet.servers), "streams": name}
    reader = JetBatchReader(
        source_options({**raw, "endingTimestamp": str(cut_ms)}, streaming=False), source_struct()
    )
    got = []
    for partition in reader.partitions():
        for batch in reader.read(partition):
            got.extend(batch.column(1).to_pylist())
    assert got == expected
    with pytest.raises(OptionError, match="endingTimestamp"):
        source_options({**raw, "endingTimestamp": "1"}, streaming=True)


def test_min_offsets_per_trigger_waits_until_enough_or_the_delay(spark_jet: JetDev) -> None:
    """minOffsetsPerTrigger=50 with maxTriggerDelay=2s: the first batch goes at once, then
    a batch waits for 50 new offsets, or for 2 s since the last batch."""
    import time

    from pyspark.sql.streaming.datasource import ReadAllAvailable

    from jetserver.testing import wait_until

    name = unique("minoff")
    create(spark_jet.servers, name)
    produce(spark_jet.servers, name, [(None, b"a%d" % i) for i in range(10)])
    reader = _reader(spark_jet, streams=name, minOffsetsPerTrigger="50", maxTriggerDelay="2s")
    start = reader.initialOffset()
    first = reader.latestOffset(start, ReadAllAvailable())
    assert first == {name: {"0": 10}}  # the first batch is never held back
    produce(spark_jet.servers, name, [(None, b"b%d" % i) for i in range(10)])
    assert reader.latestOffset(first, ReadAllAvailable()) == first  # 10 < 50: wait
    produce(spark_jet.servers, name, [(None, b"c%d" % i) for i in range(40)])
    second = reader.latestOffset(first, ReadAllAvailable())
    assert second == {name: {"0": 60}}  # 50 new: at once
    released = time.monotonic()
    produce(spark_jet.servers, name, [(None, b"d")])
    assert reader.latestOffset(second, ReadAllAvailable()) == second
    ends: list[dict[str, Any]] = []
    wait_until(
        lambda: ends.append(reader.latestOffset(second, ReadAllAvailable())) or ends[-1] != second,
        30,
        "the delay to pass",
    )
    assert ends[-1] == {name: {"0": 61}}
    assert time.monotonic() - released >= 2.0
