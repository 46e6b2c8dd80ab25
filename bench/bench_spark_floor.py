"""The source's floor (issue 39): what Spark's own streaming sources do with the same rows.

``python -m bench spark`` with ``JET_BENCH_SPARK_PARTS=floor``: the same ``count`` values
of 16 KiB, read as a stream into the bench's counting foreachBatch (Trigger.AvailableNow,
local[2]) by the ``jetstream`` source and by two of Spark's own sources, each against the
jetsdk Consumer reading the records from the server, alternating in every round:

- ``parquet``: a directory of uncompressed parquet files of (offset, value) rows written
  once before the rounds (8 files, as the stream's 8 partitions), read with
  ``spark.readStream.parquet`` in one batch (``maxFilesPerTrigger`` above the files);
- ``rate + literal``: ``rate-micro-batch`` with ``rowsPerBatch`` = count, each row given the
  same 16 KiB binary literal: no read at all, one batch of generated rows.

For each: rows/s inside the batch (triggerExecution) and its ratio to the Consumer, the
seconds of the batch, the fixed cost of a 1-row batch of the same source (ms, median) and
what is left per row ((batch - fixed) / rows), and the CPU seconds of the JVM and of its
Python processes for the query (:mod:`bench.bench_spark_cpu`). If Spark's own sources do
not reach the source's target against the Consumer here, no connector can.
"""

from __future__ import annotations

import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from typing import Any

import anyio

from bench.bench_spark_cpu import Cpu, cpu_now, cpu_since

__all__ = ["run_floor"]

FLOOR_FILES = 8
"""Parquet files of the floor's directory (the bench stream's partitions)."""


def _counting(counted: list[int]) -> Callable[[Any, int], None]:
    return lambda df, _batch: counted.append(df.count())


def _run_to_end(spark: Any, frame: Any, counted: list[int]) -> tuple[float, Cpu]:
    """(seconds inside its batches, CPU of the query) of the streaming ``frame`` run to its
    end (Trigger.AvailableNow) into the counting foreachBatch, which appends to
    ``counted``."""
    with tempfile.TemporaryDirectory(prefix="bench-floor-cp-") as checkpoint:
        cpu = cpu_now(spark)
        query = (
            frame.writeStream.foreachBatch(_counting(counted))
            .option("checkpointLocation", checkpoint)
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination(1800)
        spent = cpu_since(spark, cpu)
        if query.exception() is not None:
            raise RuntimeError(str(query.exception()))
        batches = [p for p in query.recentProgress if p["numInputRows"]]
    return sum(p["durationMs"]["triggerExecution"] for p in batches) / 1000, spent


def _parquet_query(spark: Any, path: str, count: int) -> tuple[float, Cpu]:
    """(seconds inside the batches, CPU of the query) of a parquet directory read as a
    stream into the counting foreachBatch."""
    counted: list[int] = []
    frame = (
        spark.readStream.schema("offset long, value binary")
        .option("maxFilesPerTrigger", 10 * FLOOR_FILES)
        .parquet(path)
    )
    result = _run_to_end(spark, frame, counted)
    if sum(counted) != count:
        raise RuntimeError(f"the parquet stream counted {sum(counted)} rows, not {count}")
    return result


def _rate_query(spark: Any, count: int, value: bytes) -> tuple[float, Cpu]:
    """(seconds inside the batch, CPU of the query) of one ``rate-micro-batch`` batch of
    ``count`` rows of ``value`` into the counting foreachBatch (Trigger.AvailableNow runs
    one batch of this source; a query stopped after its first batch left a
    StackOverflowError in its stream execution thread)."""
    from pyspark.sql import functions as F

    counted: list[int] = []
    rows = spark.readStream.format("rate-micro-batch").option("rowsPerBatch", count)
    frame = (
        rows.option("numPartitions", 2)
        .load()
        .select(F.col("value").alias("offset"), F.lit(value).alias("value"))
    )
    result = _run_to_end(spark, frame, counted)
    if counted != [count]:
        raise RuntimeError(f"the rate stream counted {counted}, not one batch of {count}")
    return result


def _write_parquet(spark: Any, path: str, count: int, value: bytes) -> None:
    from pyspark.sql import functions as F

    rows = spark.range(count, numPartitions=FLOOR_FILES if count > 1 else 1)
    rows = rows.select(F.col("id").alias("offset"), F.lit(value).alias("value"))
    rows.write.mode("overwrite").option("compression", "none").parquet(path)


def run_floor(
    spark: Any,
    servers: list[str],
    count: int,
    value_bytes: int,
    rounds: int,
    produce: Callable[[list[str], str, int, int], Any],
    consume: Callable[[list[str], str, int], Any],
    source: Callable[..., tuple[float, float, int, Cpu]],
) -> None:
    """Print the jetstream source and Spark's own sources against the jetsdk Consumer.
    ``produce``, ``consume`` and ``source`` are :mod:`bench.bench_spark`'s (the stream's
    records, the Consumer's seconds, a jetstream query)."""
    joined = ",".join(servers)
    value = b"x" * value_bytes
    anyio.run(produce, servers, "bench-floor", count, value_bytes)
    anyio.run(produce, servers, "bench-floor-one", 1, value_bytes)
    folder = tempfile.mkdtemp(prefix="bench-floor-")
    try:
        _write_parquet(spark, f"{folder}/rows", count, value)
        _write_parquet(spark, f"{folder}/one", 1, value)
        paths: dict[str, Callable[[int], tuple[float, Cpu]]] = {
            "jetstream source": lambda n: _jetstream(spark, joined, source, n),
            "jetstream-jvm source": lambda n: _jetstream(spark, joined, source, n, "jetstream-jvm"),
            "parquet directory stream": lambda n: _parquet_query(
                spark, f"{folder}/{'rows' if n > 1 else 'one'}", n
            ),
            "rate-micro-batch + 16 KiB literal": lambda n: _rate_query(spark, n, value),
        }
        for run in paths.values():  # warm-up: workers, JIT
            run(count)
        batch: dict[str, list[float]] = {name: [] for name in paths}
        fixed: dict[str, list[float]] = {name: [] for name in paths}
        spent: dict[str, list[Cpu]] = {name: [] for name in paths}
        consumer: list[float] = []
        consumer_cpu: list[float] = []
        for _ in range(rounds):
            started = time.process_time()
            consumer.append(anyio.run(consume, servers, "bench-floor", count))
            consumer_cpu.append(time.process_time() - started)
            for name, run in paths.items():
                seconds, cpu = run(count)
                batch[name].append(seconds)
                spent[name].append(cpu)
                fixed[name].append(run(1)[0])
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    base = statistics.median(consumer)
    print(
        f"source floor: {count:,} values of {value_bytes} B, local[2], one batch a query, "
        f"median of {rounds} round(s) (load {os.getloadavg()[0]:.1f})"
    )
    print(
        f"  {'jetsdk Consumer (baseline)':<36}{count / base:>9,.0f} rows/s  in {base:.3f} s, "
        f"CPU {statistics.median(consumer_cpu):.2f} s (this process)"
    )
    for name in paths:
        seconds, one = statistics.median(batch[name]), statistics.median(fixed[name])
        cpu = spent[name]
        print(
            f"  {name:<36}{count / seconds:>9,.0f} rows/s {base / seconds:5.2f}x  batch "
            f"{seconds:.3f} s, 1-row batch {one * 1000:.0f} ms, "
            f"{(seconds - one) / count * 1e6:.0f} us/row; CPU a query: JVM "
            f"{statistics.median(c.jvm for c in cpu):.2f} s, Python workers "
            f"{statistics.median(c.workers for c in cpu):.2f} s, others "
            f"{statistics.median(c.others for c in cpu):.2f} s"
        )


def _jetstream(
    spark: Any,
    joined: str,
    source: Callable[..., tuple[float, float, int, Cpu]],
    count: int,
    fmt: str = "jetstream",
) -> tuple[float, Cpu]:
    _wall, inside, _batches, cpu = source(
        spark, joined, "bench-floor" if count > 1 else "bench-floor-one", count, fmt
    )
    return inside, cpu
