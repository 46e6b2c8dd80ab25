"""The stream reader's offset logic against a real server, called directly (no JVM).

Spark calls these methods from its source runner; here they are called in-process, which
tests the planning rules quickly: deterministic reads, admission control with partitions
that appear mid-query, the AvailableNow target, and a stream deleted under a checkpoint.
"""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from jetsdk import Client
from support.jet_dev import JetDev

from .helpers import create, produce, unique

pytestmark = pytest.mark.spark


def _schema() -> Any:
    from pyspark.sql.types import (
        BinaryType,
        IntegerType,
        LongType,
        StringType,
        StructField,
        StructType,
        TimestampType,
    )

    return StructType(
        [
            StructField("key", BinaryType()),
            StructField("value", BinaryType()),
            StructField("stream", StringType()),
            StructField("subject", StringType()),
            StructField("partition", IntegerType()),
            StructField("offset", LongType()),
            StructField("timestamp", TimestampType()),
        ]
    )


def _reader(dev: JetDev, **options: str) -> Any:
    from jetspark.options import source_options
    from jetspark.source import JetStreamReader

    raw = {"servers": ",".join(dev.servers), "startingOffsets": "earliest", **options}
    return JetStreamReader(source_options(raw, streaming=True), _schema())


def _rows(reader: Any, start: dict[str, Any], end: dict[str, Any]) -> list[tuple[Any, ...]]:
    out: list[tuple[Any, ...]] = []
    for partition in reader.partitions(start, end):
        for batch in reader.read(partition):
            out.extend(zip(*(batch.column(i).to_pylist() for i in range(batch.num_columns))))
    return out


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
    (new,) = [p for p in reader.partitions(start, end) if p.range.stream == second]
    assert new.range.new_partition

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
