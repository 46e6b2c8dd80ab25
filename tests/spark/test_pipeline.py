"""End to end: a stream → Spark → a stream, with exactly-once across failures."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

import anyio
import pytest

import jetspark
from jetsdk import Client
from jetsdk.consumer.group_admin import PartitionLag, group_lag
from jetserver.testing import wait_until
from support.jet_dev import JetDev

from .helpers import (
    QUERY_TIMEOUT_S,
    finish,
    new_streams,
    produce,
    read_all,
    read_stream,
    run_foreach_batch,
    start_foreach_batch,
)

pytestmark = pytest.mark.spark

POLL_S = 0.25
"""Pause between two reads of a whole stream while waiting for rows (each read is a new
client: polling at the kit's default 20 ms kept a core busy)."""


def test_source_transform_sink_end_to_end(spark: Any, spark_jet: JetDev, checkpoint: Path) -> None:
    from pyspark.sql import functions as F

    servers = spark_jet.servers
    src, out = new_streams(servers, ("orders", 3), ("upper", 2))
    sent = [(f"k{i % 7}".encode(), f"order-{i}".encode()) for i in range(200)]
    produce(servers, src, sent, headers=[("origin", b"test")])

    df = read_stream(
        spark,
        servers,
        src,
        maxRecordsPerTrigger="100",
        includeHeaders="true",
        group="spark-demo",
    )
    # "offset" passes through to keep per-key order (spec/spark.md "Row order")
    upper = df.select(
        "key", F.upper(F.col("value").cast("string")).alias("value"), "headers", "offset"
    )
    sink = jetspark.foreach_batch_sink(servers, out)
    run_foreach_batch(upper, sink, checkpoint)

    got = read_all(servers, out)
    assert sorted((r.key, r.value) for r in got) == sorted((k, v.upper()) for k, v in sent)
    assert all(r.headers == (("origin", b"test"),) for r in got)
    # Per-key order survives: one key is one source partition, one task, one target partition.
    by_key: dict[bytes | None, list[bytes]] = defaultdict(list)
    for r in sorted(got, key=lambda r: r.offset):
        by_key[r.key].append(r.value)
    for key, values in by_key.items():
        assert values == [v.upper() for k, v in sent if k == key]
    # Admission control: 200 offsets at most 100 per trigger.
    assert len(sink.results) >= 2
    assert all(r.written <= 100 and r.duplicates == 0 for r in sink.results)
    # The processed offsets are mirrored as the group's commits (spec/groups.md §7.2): the
    # SDK's own lag tool reads them.
    mirrored = jetspark.committed_offsets(servers, "spark-demo")
    assert sum(v for (stream, _), v in mirrored.items() if stream == src) == 200
    assert jetspark.group_lag(servers, "spark-demo")[(src, 0)] == 0
    lag = anyio.run(_sdk_lag, servers, "spark-demo", src)
    assert {p: (entry.committed, entry.lag) for p, entry in lag.items()} == {
        p: (mirrored[(src, p)], 0) for p in range(3)
    }


async def _sdk_lag(servers: list[str], group: str, stream: str) -> dict[int, PartitionLag]:
    async with Client(servers) as client:
        found = await group_lag(client, group, [stream])
    return {key.partition: entry for key, entry in found.items()}


class _CrashingSink:
    """Hands each batch to ``sink``, with the rows of every Spark partition sorted by
    ``order`` if given (no shuffle: the same rows stay in the same partitions). For batch
    ``fail_batch``, writes only the rows of Spark partition 0 (with a key below ``cut`` if
    given), then fails: a crash in the middle of writing a micro-batch, the task for
    partition 0 having sent its first rows and the other not having run."""

    def __init__(
        self,
        sink: jetspark.ForeachBatchSink,
        *,
        fail_batch: int = -1,
        order: Any = None,
        cut: bytes | None = None,
    ) -> None:
        self.sink, self.order, self.fail_batch, self.cut = sink, order, fail_batch, cut

    def __call__(self, df: Any, batch_id: int) -> None:
        from pyspark.sql import functions as F

        if self.order is not None:
            df = df.sortWithinPartitions(self.order)
        if batch_id == self.fail_batch:
            # A narrow filter keeps each row in its Spark partition, in order: exactly what
            # the task for partition 0 would have written before the crash.
            first = F.spark_partition_id() == 0
            if self.cut is not None:
                first = first & (F.col("key") < F.lit(self.cut))
            self.sink(df.filter(first), batch_id)
            raise RuntimeError("injected failure after a partial write")
        self.sink(df, batch_id)


def test_crash_mid_batch_then_restart_is_exactly_once(
    spark: Any, spark_jet: JetDev, checkpoint: Path
) -> None:
    from pyspark.errors import StreamingQueryException

    servers = spark_jet.servers
    src, out = new_streams(servers, ("events", 2), ("copy", 2))
    sent = [(f"u{i % 50}".encode(), f"event-{i}".encode()) for i in range(300)]
    produce(servers, src, sent)

    def start(sink: Any) -> Any:
        # minPartitions 2: a Spark partition per stream partition (small ranges would share
        # one), so the crash comes after one of batch 1's two tasks.
        df = read_stream(spark, servers, src, maxRecordsPerTrigger="100", minPartitions="2")
        return start_foreach_batch(df.select("key", "value"), sink, checkpoint)

    first = jetspark.foreach_batch_sink(servers, out)
    query = start(_CrashingSink(first, fail_batch=1))
    with pytest.raises(StreamingQueryException, match="injected failure"):
        query.awaitTermination(QUERY_TIMEOUT_S)
    partial = read_all(servers, out)
    assert 100 < len(partial) < 200  # batch 0, and part of batch 1

    second = jetspark.foreach_batch_sink(servers, out)
    finish(start(second))
    got = read_all(servers, out)
    assert sorted((r.key, r.value) for r in got) == sorted(sent)
    replayed = second.results[0]
    assert replayed.batch_id == 1
    assert replayed.duplicates == len(partial) - 100
    assert replayed.written + replayed.duplicates == 100


def test_aggregation_replayed_in_another_order_is_exactly_once(
    spark: Any, spark_jet: JetDev, checkpoint: Path
) -> None:
    """groupBy (a shuffle) → foreachBatch sink; the last batch is written in part (one
    task's first rows), the query fails, and the restarted query replays that batch with
    every partition's rows in the reverse order: the part already stored is recognised,
    nothing is lost. (Numbered in arrival order, the replay would take the stored prefix's
    sequence numbers for other rows: those rows lost, the prefix stored twice.)"""
    from pyspark.errors import StreamingQueryException
    from pyspark.sql import functions as F

    servers = spark_jet.servers
    src, out = new_streams(servers, ("words", 2), ("word-counts", 2))
    sent = [(f"w{i % 37:02d}".encode(), f"x{i}".encode()) for i in range(300)]
    produce(servers, src, sent)

    def start(sink: Any) -> Any:
        df = read_stream(spark, servers, src, maxRecordsPerTrigger="150")
        counts = df.groupBy("key").agg(F.count("*").alias("n"))
        value = counts.select("key", F.col("n").cast("string").alias("value"))
        return start_foreach_batch(value, sink, checkpoint, output_mode="update")

    first = jetspark.foreach_batch_sink(servers, out)
    query = start(_CrashingSink(first, order=F.asc("key"), fail_batch=1, cut=b"w18"))
    with pytest.raises(StreamingQueryException, match="injected failure"):
        query.awaitTermination(QUERY_TIMEOUT_S)
    partial = read_all(servers, out)
    batch0 = first.results[0].written
    assert first.results[0].batch_id == 0
    assert batch0 == 37
    assert 0 < first.results[1].written < 37  # part of batch 1 is stored
    assert len(partial) == batch0 + first.results[1].written

    second = jetspark.foreach_batch_sink(servers, out)
    finish(start(_CrashingSink(second, order=F.desc("key"))))
    replayed = second.results[0]
    assert replayed.batch_id == 1
    assert replayed.duplicates == len(partial) - batch0
    got = read_all(servers, out)
    assert len(got) == batch0 + replayed.written + replayed.duplicates
    pairs = [(r.key, r.value) for r in got]
    assert len(set(pairs)) == len(pairs)  # no (key, count) twice
    final: dict[bytes | None, int] = {}
    for key, value in pairs:
        final[key] = max(final.get(key, 0), int(value))
    assert final == {k: sum(1 for k2, _ in sent if k2 == k) for k, _ in sent}


def test_stream_writer_stopped_mid_run_resumes_exactly(
    spark: Any, spark_jet: JetDev, checkpoint: Path
) -> None:
    from pyspark.sql import functions as F

    servers = spark_jet.servers
    src, out = new_streams(servers, ("clicks", 2), ("clicks-out", 3))
    sent = [
        (None if i % 3 == 0 else f"c{i % 11}".encode(), f"click-{i}".encode()) for i in range(300)
    ]
    produce(servers, src, sent)

    def start(trigger: dict[str, Any]) -> Any:
        df = read_stream(spark, servers, src, maxRecordsPerTrigger="100").select(
            "key", F.concat(F.col("value"), F.lit(b"!")).alias("value")
        )
        return (
            df.writeStream.format("jetstream")
            .option("servers", ",".join(servers))
            .option("stream", out)
            .option("checkpointLocation", str(checkpoint))
            .trigger(**trigger)
            .start()
        )

    query = start({"processingTime": "0 seconds"})

    def first_batch_stored() -> bool:
        # A query that failed (a Python worker that did not connect back in time, on a
        # loaded machine) fails the test now, not after the whole bound.
        assert query.isActive, f"the query ended before its first batch: {query.exception()}"
        return len(read_all(servers, out)) >= 100

    wait_until(first_batch_stored, QUERY_TIMEOUT_S, "a first batch", interval_s=POLL_S)
    query.stop()  # may interrupt a batch half-written
    assert query.exception() is None

    finish(start({"availableNow": True}))
    got = read_all(servers, out)
    assert sorted((r.key or b"", r.value) for r in got) == sorted(
        (k or b"", v + b"!") for k, v in sent
    )
