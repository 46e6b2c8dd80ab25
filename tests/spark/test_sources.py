"""Source semantics against a real server: compaction gaps, retention, batch reads/writes."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import orjson
import pytest

from jetserver.testing import wait_until
from support.jet_dev import JetDev

from .helpers import bounds, create, produce, read_all, unique

pytestmark = pytest.mark.spark

WAIT_S = 60.0
POLL_S = 0.25
"""Pause between two reads of a whole stream (each read is a new client)."""


def _servers(dev: JetDev) -> str:
    return ",".join(dev.servers)


def _settled(servers: list[str], stream: str, check: Any) -> None:
    """Wait until maintenance has acted (``check(records)``) and then stopped changing the
    log (three maintenance intervals without a change)."""
    wait_until(
        lambda: check(read_all(servers, stream)),
        WAIT_S,
        f"maintenance of {stream}",
        interval_s=POLL_S,
    )
    last = [r.offset for r in read_all(servers, stream)]
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        time.sleep(1.5)
        now = [r.offset for r in read_all(servers, stream)]
        if now == last:
            return
        last = now
    raise AssertionError(f"{stream} kept changing")


def test_compaction_gaps_do_not_fail_the_query(
    spark: Any, spark_jet: JetDev, checkpoint: Path
) -> None:
    servers = spark_jet.servers
    name = unique("profiles")
    create(servers, name, compact=True, segment_max_bytes=1024, delete_retention=0.0)
    # Ten keys written once, then ten keys rewritten many times: compaction leaves the
    # first ten and the latest versions, with gaps in between.
    sent = [(f"static-{i}".encode(), b"once") for i in range(10)]
    sent += [(f"user-{i % 10}".encode(), f"version-{i}".encode()) for i in range(190)]
    produce(servers, name, sent, chunk=10)
    _settled(servers, name, lambda records: len(records) < 150)
    kept = read_all(servers, name)
    offsets = [r.offset for r in kept]
    assert offsets[:10] == list(range(10))
    assert offsets != list(range(len(offsets)))  # there are gaps

    seen: list[Any] = []
    query = (
        spark.readStream.format("jetstream")
        .option("servers", _servers(spark_jet))
        .option("streams", name)
        .option("startingOffsets", "earliest")
        .option("maxRecordsPerTrigger", "64")  # batch ends fall inside gaps too
        .load()
        .writeStream.foreachBatch(lambda df, _id: seen.extend(df.collect()))
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(180)
    assert query.exception() is None  # failOnDataLoss is on by default
    assert sorted(row["offset"] for row in seen) == offsets
    latest = {row["key"]: row["value"] for row in sorted(seen, key=lambda r: r["offset"])}
    assert latest == {k: v for k, v in sent}


def retained_stream(servers: list[str], prefix: str) -> tuple[str, int, int]:
    """A one-partition stream of 200 records of which retention removed the first ones
    (it keeps about 20): its name, log start and high watermark once maintenance settled."""
    name = unique(prefix)
    create(servers, name, segment_max_bytes=1024, retention_max_messages=20)
    produce(servers, name, [(None, f"line-{i}".encode()) for i in range(200)], chunk=10)
    _settled(servers, name, lambda records: records and records[0].offset > 0)
    log_start, hw = bounds(servers, name)
    return name, log_start, hw


def test_retention_past_the_start_is_data_loss(spark: Any, spark_jet: JetDev) -> None:
    name, log_start, hw = retained_stream(spark_jet.servers, "logs")

    def read(fail_on_data_loss: str) -> list[Any]:
        rows: list[Any] = (
            spark.read.format("jetstream")
            .option("servers", _servers(spark_jet))
            .option("streams", name)
            .option("startingOffsets", orjson.dumps({name: {"0": 0}}).decode())
            .option("failOnDataLoss", fail_on_data_loss)
            .load()
            .collect()
        )
        return rows

    with pytest.raises(Exception, match="failOnDataLoss") as info:
        read("true")
    assert "removed" in str(info.value) or "log starts at" in str(info.value)
    rows = read("false")
    assert [row["offset"] for row in rows] == list(range(log_start, hw))


def test_batch_write_then_batch_read_by_offsets(spark: Any, spark_jet: JetDev) -> None:
    servers = spark_jet.servers
    name = unique("batch")
    create(servers, name, partitions=2)
    other = unique("batch-other")
    create(servers, other)
    # Rows name their stream in a column (no 'stream' option): 50 to `name`, 10 to `other`.
    rows: list[tuple[Any, ...]] = [
        (name, f"k{i}", f"v{i}".encode(), i % 2, [("n", str(i).encode())]) for i in range(50)
    ]
    rows += [(other, f"o{i}", b"other", None, None) for i in range(10)]
    df = spark.createDataFrame(
        rows,
        "stream string, key string, value binary, partition int, "
        "headers array<struct<key:string,value:binary>>",
    )
    df.write.format("jetstream").option("servers", _servers(spark_jet)).mode("append").save()
    assert len(read_all(servers, other)) == 10
    stored = read_all(servers, name)
    assert len(stored) == 50

    got = (
        spark.read.format("jetstream")
        .option("servers", _servers(spark_jet))
        .option("streams", name)
        .option("startingOffsets", orjson.dumps({name: {"0": 5, "1": -2}}).decode())
        .option("endingOffsets", orjson.dumps({name: {"0": 10, "1": -1}}).decode())
        .option("includeHeaders", "true")
        .option("minPartitions", "4")
        .load()
        .collect()
    )
    assert sorted((row["partition"], row["offset"]) for row in got) == sorted(
        [(0, o) for o in range(5, 10)] + [(1, o) for o in range(25)]
    )
    for row in got:
        assert row["stream"] == name
        assert row["headers"][0]["key"] == "n"
        assert int(row["headers"][0]["value"]) % 2 == row["partition"]
        assert row["timestamp"].year >= 2024
