"""Starts and ends by time per partition, and maxBytesPerTrigger, against a real server with
the reader called directly (no JVM; test_options_spark.py runs them through Spark).

Records are sent in acked rounds, so later rounds are stored at later times and a time
between two rounds cuts each partition at a known offset.
"""

from __future__ import annotations

from typing import Any

import anyio
import orjson
import pytest

from jetsdk import Client
from jetsdk.codec.record import Record
from jetsdk.partitioner import partition_for_key
from jetspark.errors import OptionError
from support.jet_dev import JetDev

from .helpers import create, produce, read_partitions, source_struct, unique
from .test_reader_direct import _all, _reader, _rows

pytestmark = pytest.mark.spark


def _cut(records: list[Record], index: int) -> int:
    """A time in ms after record ``index`` of a partition and at or before the next one
    stored in a later millisecond; records before it are exactly those stored before it."""
    return records[index].timestamp // 1_000_000 + 1


def _first_at(records: list[Record], ms: int) -> int:
    later = [r.offset for r in records if r.timestamp >= ms * 1_000_000]
    return later[0] if later else records[-1].offset + 1


def _two_partitions(dev: JetDev, prefix: str) -> tuple[str, dict[int, list[Record]]]:
    name = unique(prefix)
    create(dev.servers, name, partitions=2)
    produce(dev.servers, name, [(f"k{i}".encode(), b"v%d" % i) for i in range(60)], chunk=6)
    parts = read_partitions(dev.servers, name)
    assert all(len(records) > 10 for records in parts.values())
    return name, parts


def test_start_by_timestamp_per_partition_and_its_strategy(spark_jet: JetDev) -> None:
    name, parts = _two_partitions(spark_jet, "bytime")
    cuts = {p: _cut(records, len(records) // 2) for p, records in parts.items()}
    spec = orjson.dumps({name: {str(p): ms for p, ms in cuts.items()}}).decode()
    reader = _reader(spark_jet, streams=name, startingOffsetsByTimestamp=spec)
    start = reader.initialOffset()
    assert start == {name: {str(p): _first_at(parts[p], cuts[p]) for p in parts}}
    assert 0 < start[name]["0"] < len(parts[0])

    # startingTimestamp takes precedence, as in Spark's Kafka source.
    both = _reader(spark_jet, streams=name, startingOffsetsByTimestamp=spec, startingTimestamp="0")
    assert both.initialOffset() == {name: {"0": 0, "1": 0}}

    # Partition 1's time is after its last record: no offset matches.
    future = orjson.dumps({name: {"0": cuts[0], "1": 4_000_000_000_000}}).decode()
    strict = _reader(spark_jet, streams=name, startingOffsetsByTimestamp=future)
    with pytest.raises(OptionError, match=f"'startingOffsetsByTimestamp'.*{name}/1"):
        strict.initialOffset()
    lenient = _reader(
        spark_jet,
        streams=name,
        startingOffsetsByTimestamp=future,
        startingOffsetsByTimestampStrategy="latest",
    )
    assert lenient.initialOffset() == {
        name: {"0": _first_at(parts[0], cuts[0]), "1": len(parts[1])}
    }
    with pytest.raises(OptionError, match="'startingTimestamp'"):
        _reader(spark_jet, streams=name, startingTimestamp="4000000000000").initialOffset()
    missing = orjson.dumps({name: {"0": cuts[0]}}).decode()
    with pytest.raises(OptionError, match=f"{name}/1 is not listed"):
        _reader(spark_jet, streams=name, startingOffsetsByTimestamp=missing).initialOffset()


def test_batch_read_ends_by_timestamp_per_partition(spark_jet: JetDev) -> None:
    from jetspark.options import source_options
    from jetspark.source import JetBatchReader

    name, parts = _two_partitions(spark_jet, "untilp")
    cut0 = _cut(parts[0], len(parts[0]) // 3)
    spec = orjson.dumps({name: {"0": cut0, "1": 4_000_000_000_000}}).decode()
    raw = {"servers": ",".join(spark_jet.servers), "streams": name}
    reader = JetBatchReader(
        source_options({**raw, "endingOffsetsByTimestamp": spec}, streaming=False), source_struct()
    )
    got: dict[int, list[int]] = {0: [], 1: []}
    for partition in reader.partitions():
        for batch in reader.read(partition):
            for part, offset in zip(batch.column(4).to_pylist(), batch.column(5).to_pylist()):
                got[part].append(offset)
    # Partition 0 ends before its first record at or after cut0; partition 1's time is
    # past its last record, so it ends at the high watermark (Kafka: latest).
    assert got[0] == list(range(_first_at(parts[0], cut0)))
    assert got[1] == list(range(len(parts[1])))
    with pytest.raises(OptionError, match="endingOffsetsByTimestamp"):
        source_options({**raw, "endingOffsetsByTimestamp": spec}, streaming=True)


def _stored_bytes_per_offset(dev: JetDev, name: str) -> dict[int, float]:
    async def main() -> dict[int, float]:
        async with Client(dev.servers) as client:
            info = await client.describe_stream(name)
        out = {}
        for p in info.partitions:
            assert p.size_bytes is not None
            assert p.leo is not None
            assert p.log_start is not None
            out[p.partition] = p.size_bytes / (p.leo - p.log_start)
        return out

    return anyio.run(main)


def _bytes(end: dict[str, Any], start: dict[str, Any], name: str, size: dict[int, float]) -> float:
    return sum((end[name][str(p)] - start[name][str(p)]) * size[p] for p in size)


def test_max_bytes_per_trigger_and_with_max_records_the_tighter_wins(
    spark_jet: JetDev,
) -> None:
    from pyspark.sql.streaming.datasource import ReadMaxBytes, ReadMaxRows

    name = unique("bytes")
    create(spark_jet.servers, name, partitions=2)
    # Partition 0 holds small records, partition 1 records ten times larger.
    key = {partition_for_key(k, 2): k for k in (b"a", b"b", b"c", b"d", b"e", b"f")}
    produce(spark_jet.servers, name, [(key[0], b"s" * 100) for _ in range(100)])
    produce(spark_jet.servers, name, [(key[1], b"L" * 1000) for _ in range(100)])
    size = _stored_bytes_per_offset(spark_jet, name)
    small, large = 0, 1
    assert size[large] > 5 * size[small]
    limit = 20_000

    reader = _reader(spark_jet, streams=name, maxBytesPerTrigger=str(limit))
    assert reader.getDefaultReadLimit() == ReadMaxBytes(limit)
    start = reader.initialOffset()
    end = reader.latestOffset(start, ReadMaxBytes(limit))
    # Shared in proportion to the bytes available: about 1/11 of the limit to the small
    # records' partition, the rest to the large ones'; never over the limit.
    assert limit - 2 * size[large] < _bytes(end, start, name, size) <= limit
    assert 0 < end[name][str(large)] < 100
    assert 0 < end[name][str(small)] < 100
    assert len(_rows(reader, start, end)) == sum(end[name].values())
    assert reader.latestOffset(start, _all()) == {name: {"0": 100, "1": 100}}

    # Both options: Spark passes ReadMaxRows; the bytes limit applies too.
    both = _reader(
        spark_jet, streams=name, maxBytesPerTrigger=str(limit), maxRecordsPerTrigger="10"
    )
    assert both.getDefaultReadLimit() == ReadMaxRows(10)
    rows_tighter = both.latestOffset(start, ReadMaxRows(10))
    assert sum(rows_tighter[name].values()) == 10
    bytes_tighter = both.latestOffset(start, ReadMaxRows(150))
    assert bytes_tighter == end
    # PySpark 4.0/4.1: no arguments, the reader applies both options itself.
    old = _reader(
        spark_jet, streams=name, maxBytesPerTrigger=str(limit), maxRecordsPerTrigger="150"
    )
    assert old.latestOffset() == end
    # A soft limit: one offset even when a record is larger than the limit.
    tiny = _reader(spark_jet, streams=name, maxBytesPerTrigger="1")
    assert sum(tiny.latestOffset(start, ReadMaxBytes(1))[name].values()) == 1
