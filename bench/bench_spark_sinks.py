"""The sinks' rates against the jetsdk Producer (:mod:`bench.bench_spark`), and at 16 KiB
their stages: each call is Spark's job start, then the JVM's Arrow stream to the Python
workers, then the sink's own part (a task's content sort and the send with ack ALL, which
cannot start before the task's last row: the content order is what makes a replay
exactly-once, spec/spark.md "Row order"). Each round times, on the same cached rows, an
empty ``foreach_batch_sink`` call (the job start), a ``mapInArrow`` of the sink's columns
with the sink's Arrow batch size that only counts the batches (job start + Arrow stream),
and the sink's call; the Arrow stream is the second less the first, the sink's own part
the third less the second (medians of the rounds)."""

from __future__ import annotations

import statistics
from collections.abc import Iterator
from typing import Any

import anyio

from bench.bench_spark import (
    FOREACH_TARGET,
    LARGE_VALUE_BYTES,
    WRITE_TARGET,
    Cpu,
    _count,
    _cpu_line,
    _create,
    _ms_line,
    _produce,
    _ratio_line,
    _rows,
    _timed,
    _timed_cpu,
    _write,
)

__all__ = ["sink_rates"]


def _count_batches(batches: Iterator[Any]) -> Iterator[Any]:
    import pyarrow as pa

    rows = sum(b.num_rows for b in batches)
    yield pa.RecordBatch.from_pydict({"rows": [rows]})


def _arrow_only(df: Any) -> int:
    """Rows a ``mapInArrow`` of ``df``'s key and value got, in the sink's Arrow batches."""
    from jetspark.foreach_batch import ARROW_BATCH_BYTES, _arrow_batch_bytes

    with _arrow_batch_bytes(df.sparkSession, ARROW_BATCH_BYTES):
        got = df.select("key", "value").mapInArrow(_count_batches, "rows long").collect()
    return sum(r["rows"] for r in got)


def sink_rates(
    spark: Any, servers: list[str], joined: str, count: int, value_bytes: int, rounds: int
) -> None:
    """Print the sinks' rates (median of ``rounds``, each round the Producer first) and, at
    16 KiB, their stages; ``count`` rows of ``value_bytes``."""
    import jetspark

    tag = f"{value_bytes}b-{count}"
    stages = value_bytes == LARGE_VALUE_BYTES
    rows = _rows(spark, count, value_bytes)
    empty = rows.limit(0).cache()
    empty.count()
    # Rates (rows/s) of the Producer and the sinks; seconds of the stages' calls.
    t: dict[str, list[float]] = {k: [] for k in ("produce", "fb", "ds", "start", "arrow")}
    cpu: dict[str, list[Cpu]] = {"fb": [], "ds": []}
    for r in range(rounds):
        t["produce"].append(
            count / anyio.run(_produce, servers, f"bench-p-{tag}-{r}", count, value_bytes)
        )
        for name in ("fb", "ds", "fbe"):
            anyio.run(_create, servers, f"bench-{name}-{tag}-{r}")
        sink = jetspark.foreach_batch_sink(joined, f"bench-fb-{tag}-{r}", name="bench")
        if stages:
            nothing = jetspark.foreach_batch_sink(joined, f"bench-fbe-{tag}-{r}", name="bench")
            t["start"].append(_timed(lambda nothing=nothing, r=r: nothing(empty, r)))
            t["arrow"].append(_timed(lambda: _arrow_only(rows)))
        seconds, c = _timed_cpu(spark, lambda sink=sink, r=r: sink(rows, r))
        t["fb"].append(count / seconds)
        cpu["fb"].append(c)
        seconds, c = _timed_cpu(spark, lambda r=r: _write(rows, joined, f"bench-ds-{tag}-{r}"))
        t["ds"].append(count / seconds)
        cpu["ds"].append(c)
        for stream in (f"bench-fb-{tag}-{r}", f"bench-ds-{tag}-{r}"):
            stored = anyio.run(_count, servers, stream)
            if stored != count:
                raise RuntimeError(f"{stream} holds {stored} records, not {count}")
    rows.unpersist()
    empty.unpersist()
    base_write = statistics.median(t["produce"])
    print(f"sink (rows/s stored, ack ALL), {count:,} rows")
    _ratio_line("jetsdk Producer (baseline)", t["produce"], None, None)
    _ratio_line("foreach_batch_sink (exactly-once)", t["fb"], base_write, FOREACH_TARGET)
    _cpu_line("CPU of a foreach_batch_sink call", cpu["fb"], count)
    _ratio_line('df.write.format("jetstream")', t["ds"], base_write, WRITE_TARGET)
    _cpu_line("CPU of a df.write", cpu["ds"], count)
    if stages:
        call = [count / rate for rate in t["fb"]]
        print("  foreach_batch_sink's stages (median of the rounds' calls):")
        _ms_line("  Spark's job start (an empty call)", t["start"])
        _ms_line("  + the Arrow stream to the workers (a counting mapInArrow)", t["arrow"])
        _ms_line("  + the sort and the send with ack ALL (the sink's call)", call)
        _ms_line("  the Producer's send of the same rows", [count / p for p in t["produce"]])
        ours = statistics.median(call) - statistics.median(t["arrow"])
        theirs = statistics.median(t["arrow"])
        print(f"  Spark's part {theirs:.2f} s, the sink's own {ours:.2f} s of the call")
