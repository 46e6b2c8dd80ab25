"""Spark integration throughput: jetspark vs using jetsdk directly.

Source: a streaming query (``jetstream`` source, Trigger.AvailableNow, a trivial
foreachBatch that counts) over a stream of N records, against a jetsdk Consumer reading the
same records. Sink: ``foreach_batch_sink`` and ``df.write.format("jetstream")`` writing N rows
(ack ALL), against a jetsdk Producer sending N messages (ack ALL). Spark's start-up is not
counted; a streaming query's own start-up is shown apart ("wall" vs "in batches").

    python -m bench spark [--quick]
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from typing import Any

import anyio

from jetsdk import AckPolicy, Client, Consumer, Producer
from jetserver.devcluster import DevCluster

PARTITIONS = 4
VALUE_BYTES = 100
KEYS = 1000


async def _produce(servers: list[str], stream: str, count: int) -> float:
    value = b"x" * VALUE_BYTES
    async with Client(servers) as client:
        await client.create_stream(stream, partitions=PARTITIONS)
        started = time.perf_counter()
        async with Producer(client, stream, ack=AckPolicy.ALL) as producer:
            for i in range(count):
                await producer.send_soon(value, b"k%d" % (i % KEYS))
            await producer.flush()
        return time.perf_counter() - started


async def _consume(servers: list[str], stream: str, count: int) -> float:
    async with Client(servers) as client:
        started = time.perf_counter()
        seen = 0
        async with Consumer(client, stream, start="earliest") as consumer:
            while seen < count:
                seen += len(await consumer.fetch(max_records=10_000, timeout=5.0))
        return time.perf_counter() - started


async def _create(servers: list[str], stream: str) -> None:
    async with Client(servers) as client:
        await client.create_stream(stream, partitions=PARTITIONS)


def _spark_source(spark: Any, servers: str, stream: str, count: int) -> tuple[float, float, int]:
    """(wall seconds, seconds inside batches, batches)."""
    counted: list[int] = []
    with tempfile.TemporaryDirectory(prefix="bench-spark-") as checkpoint:
        started = time.perf_counter()
        query = (
            spark.readStream.format("jetstream")
            .option("servers", servers)
            .option("streams", stream)
            .option("startingOffsets", "earliest")
            .load()
            .writeStream.foreachBatch(lambda df, _id: counted.append(df.count()))
            .option("checkpointLocation", checkpoint)
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination(1800)
        wall = time.perf_counter() - started
        if query.exception() is not None:
            raise RuntimeError(str(query.exception()))
        batches = [p for p in query.recentProgress if p["numInputRows"]]
        inside = sum(p["durationMs"]["triggerExecution"] for p in batches) / 1000
    if sum(counted) != count:
        raise RuntimeError(f"the source counted {sum(counted)} records, not {count}")
    return wall, inside, len(batches)


def _rows(spark: Any, count: int) -> Any:
    from pyspark.sql import functions as F

    df = spark.range(count, numPartitions=2).select(
        F.concat(F.lit("k"), (F.col("id") % KEYS).cast("string")).alias("key"),
        F.lit("x" * VALUE_BYTES).alias("value"),
    )
    return df.cache()


def _line(label: str, count: int, seconds: float, base: float | None) -> None:
    rate = count / seconds if seconds > 0 else float("inf")
    ratio = f"{(count / seconds) / base:6.2f}x" if base else "   1.00x"
    print(f"  {label:<46}{rate:>12,.0f} rec/s {seconds:>8.2f} s  {ratio}", flush=True)


def run(quick: bool) -> None:
    """Measure and print the source and sink comparisons."""
    count = 20_000 if quick else 200_000
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    import jetspark
    from jetspark.demo import local_spark

    with open(os.devnull, "wb") as devnull, DevCluster(servers=1, log_file=devnull) as dev:
        servers = dev.addresses
        joined = ",".join(servers)
        produce_s = anyio.run(_produce, servers, "bench-src", count)
        consume_s = anyio.run(_consume, servers, "bench-src", count)
        spark = local_spark("jetspark-bench")
        try:
            jetspark.register(spark)
            _spark_source(spark, joined, "bench-src", count)  # warm-up: workers, JIT
            wall, inside, batches = _spark_source(spark, joined, "bench-src", count)
            rows = _rows(spark, count)
            rows.count()
            anyio.run(_create, servers, "bench-sink-fb")
            anyio.run(_create, servers, "bench-sink-ds")
            sink = jetspark.foreach_batch_sink(joined, "bench-sink-fb", name="bench")
            started = time.perf_counter()
            sink(rows, 0)
            foreach_s = time.perf_counter() - started
            started = time.perf_counter()
            rows.write.format("jetstream").option("servers", joined).option(
                "stream", "bench-sink-ds"
            ).mode("append").save()
            write_s = time.perf_counter() - started
        finally:
            spark.stop()

    base_read = count / consume_s
    base_write = count / produce_s
    print(f"{count:,} records of {VALUE_BYTES} B, {PARTITIONS} partitions, ack ALL, local[2]")
    print("source (records/s into a counting foreachBatch)")
    _line("jetsdk Consumer (baseline)", count, consume_s, None)
    _line(f"jetstream source, in {batches} batch(es)", count, inside, base_read)
    _line("jetstream source, wall incl. query start", count, wall, base_read)
    print("sink (records/s stored, ack ALL)")
    _line("jetsdk Producer (baseline)", count, produce_s, None)
    _line("foreach_batch_sink (exactly-once)", count, foreach_s, base_write)
    _line('df.write.format("jetstream")', count, write_s, base_write)


if __name__ == "__main__":
    run(quick="--quick" in sys.argv)
