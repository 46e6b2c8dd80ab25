"""Kafka-style source options through a real Spark (the shared local[2] session): starts and
ends by time per partition, the sinks' ``subject`` column with the source's ``subjects``
filter, and maxBytesPerTrigger as Spark's own read limit (``ReadMaxBytes``) in a streaming
query."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from jetspark._compat import ADMISSION_CONTROL
from support.jet_dev import JetDev

from .helpers import (
    create,
    read_partitions,
    read_stream,
    run_foreach_batch,
    unique,
)
from .test_reader_limits import _first_at, _stored_bytes_per_offset

pytestmark = pytest.mark.spark

FUTURE_MS = 4_000_000_000_000


def _write(spark: Any, servers: str, stream: str, rows: list[tuple[Any, ...]], schema: str) -> None:
    df = spark.createDataFrame(rows, schema)
    writer = df.write.format("jetstream").option("servers", servers).option("stream", stream)
    writer.mode("append").save()


def _read(spark: Any, servers: str, stream: str, **options: str) -> list[Any]:
    reader = spark.read.format("jetstream").option("servers", servers).option("streams", stream)
    for key, value in options.items():
        reader = reader.option(key, value)
    return list(reader.load().collect())


def test_by_time_and_subjects_through_spark(spark: Any, spark_jet: JetDev) -> None:
    servers = ",".join(spark_jet.servers)
    # Two rounds written by df.write, one after the other: round 2 is stored later.
    name = unique("sparktime")
    create(spark_jet.servers, name, partitions=2)
    schema = "value binary, partition int"
    _write(spark, servers, name, [(b"r1-%d" % i, i % 2) for i in range(20)], schema)
    _write(spark, servers, name, [(b"r2-%d" % i, i % 2) for i in range(20)], schema)
    parts = read_partitions(spark_jet.servers, name)
    cut = {p: records[9].timestamp // 1_000_000 + 1 for p, records in parts.items()}
    assert all(_first_at(records, cut[p]) == 10 for p, records in parts.items())

    # Partition 0 from round 2 to the end, partition 1 from the start until round 2.
    got = _read(
        spark,
        servers,
        name,
        startingOffsetsByTimestamp=orjson.dumps({name: {"0": cut[0], "1": 0}}).decode(),
        endingOffsetsByTimestamp=orjson.dumps({name: {"0": FUTURE_MS, "1": cut[1]}}).decode(),
    )
    assert sorted((r["partition"], r["offset"], r["value"]) for r in got) == sorted(
        [(0, rec.offset, rec.value) for rec in parts[0][10:]]
        + [(1, rec.offset, rec.value) for rec in parts[1][:10]]
    )
    assert {r["value"][:2] for r in got if r["partition"] == 0} == {b"r2"}
    assert {r["value"][:2] for r in got if r["partition"] == 1} == {b"r1"}
    # A start after every record: the default strategy (error) fails the read (strategy
    # latest: test_reader_limits.py).
    late = orjson.dumps({name: {"0": FUTURE_MS, "1": 0}}).decode()
    with pytest.raises(Exception, match="startingOffsetsByTimestamp"):
        _read(spark, servers, name, startingOffsetsByTimestamp=late)

    # The sinks' subject column, then the source's subjects filter.
    topic = unique("sparksubj")
    prefix = topic.replace("-", "")
    create(spark_jet.servers, topic, subject=f"{prefix}.>")
    regions = ["eu", "us", "eu", "ap"]
    _write(
        spark,
        servers,
        topic,
        [(b"s%d" % i, f"{prefix}.{regions[i % 4]}.x{i}") for i in range(8)],
        "value binary, subject string",
    )
    rows = _read(spark, servers, topic, subjects=f"{prefix}.eu.*, {prefix}.ap.>")
    assert sorted(r["value"] for r in rows) == [b"s0", b"s2", b"s3", b"s4", b"s6", b"s7"]
    assert all(r["subject"].split(".")[1] in ("eu", "ap") for r in rows)


def test_max_bytes_per_trigger_in_a_streaming_query(
    spark: Any, spark_jet: JetDev, tmp_path: Any
) -> None:
    """maxBytesPerTrigger under Trigger.AvailableNow: Spark hands ReadMaxBytes back to the
    reader, and every micro-batch stays within the limit (PySpark 4.2+: several batches;
    4.0/4.1 run one batch of at most the limit)."""
    servers = ",".join(spark_jet.servers)
    name = unique("sparkbytes")
    create(spark_jet.servers, name, partitions=2)
    _write(
        spark,
        servers,
        name,
        [(b"x" * 400, i % 2) for i in range(100)],
        "value binary, partition int",
    )
    size = _stored_bytes_per_offset(spark_jet, name)
    limit = int(30 * max(size.values()))
    seen: list[int] = []

    def batch(df: Any, _batch_id: int) -> None:
        seen.append(df.count())

    df = read_stream(spark, spark_jet.servers, name, maxBytesPerTrigger=str(limit))
    run_foreach_batch(df, batch, tmp_path / "checkpoint")
    seen = [n for n in seen if n]
    assert all(n * min(size.values()) <= limit for n in seen), (seen, size, limit)
    if ADMISSION_CONTROL:
        assert sum(seen) == 100
        assert len(seen) >= 4  # 100 records of ~440 bytes, 30 per batch at most
    else:
        assert len(seen) == 1
