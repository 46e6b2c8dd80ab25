"""The jetspark code of the source and of the sinks without Spark, against jetsdk (issue 39).

``python -m bench spark`` with ``JET_BENCH_SPARK_PARTS=paths``: in this process, the
source's executor side (``JetBatchReader.read`` of every Spark partition: Fetch, CRC, one
Arrow batch per response, the bytes of each value copied once) against the jetsdk
Consumer, and the sinks' task write (``write_batches``: Arrow batches of 256 rows, as
Spark hands them at 16 KiB, encoded, sorted, sent with ack ALL) against the jetsdk
Producer; CPU microseconds per row of this process (``time.process_time``: both threads,
the caller's and the bridge's event loop), the median of alternating rounds, and the
rates. What a Spark query adds on top of these (its JVM, the Arrow stream between the
JVM and its Python workers, the streaming source's runner process) is what the Spark
part's CPU lines show.
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any

import anyio
import pyarrow as pa

PATH_ROWS = 10_000
PATH_ROUNDS = 5
SINK_BATCH_ROWS = 256
"""Rows of an Arrow batch the sink gets at 16 KiB (spark.sql.execution.arrow.maxBytesPerBatch
4 MiB, which foreach_batch_sink sets)."""


def _cpu_and_wall(fn: Callable[[], object]) -> tuple[float, float]:
    cpu, wall = time.process_time(), time.perf_counter()
    fn()
    return time.process_time() - cpu, time.perf_counter() - wall


def _line(label: str, spent: list[tuple[float, float]], count: int) -> None:
    cpu = statistics.median(c for c, _ in spent)
    wall = statistics.median(w for _, w in spent)
    print(
        f"  {label:<44}{cpu / count * 1e6:7.1f} us/row CPU {count / wall:>9,.0f} rows/s  "
        f"(CPU s of the rounds {[round(c, 2) for c, _ in spent]})",
        flush=True,
    )


def run_paths(
    spark: Any,
    servers: list[str],
    value_bytes: int,
    produce: Callable[[list[str], str, int, int], Awaitable[float]],
    consume: Callable[[list[str], str, int], Awaitable[float]],
    create: Callable[[list[str], str], Awaitable[None]],
    keys: int,
) -> None:
    """Print the CPU per row of the source's read and the sinks' write against jetsdk's
    Consumer and Producer (``produce``, ``consume``, ``create``: the Spark bench's
    coroutines, run here with anyio; ``spark`` only parses the source's schema)."""
    from jetspark._write import write_batches
    from jetspark.options import sink_options, source_options
    from jetspark.schema import source_schema
    from jetspark.source import JetBatchReader

    joined = ",".join(servers)
    count = PATH_ROWS
    stream = f"bench-paths-{value_bytes}b"
    anyio.run(produce, servers, stream, count, value_bytes)
    source = spark.createDataFrame([], source_schema(False)).schema
    opts = source_options(
        {"servers": joined, "streams": stream, "startingOffsets": "earliest"}, streaming=False
    )

    def read() -> None:
        reader = JetBatchReader(opts, source)
        rows = sum(b.num_rows for p in reader.partitions() for b in reader.read(p))
        if rows != count:
            raise RuntimeError(f"the source read {rows} rows, not {count}")

    table = pa.table(
        {
            "key": pa.array([b"k%d" % (i % keys) for i in range(count)], pa.binary()),
            "value": pa.array([b"x" * value_bytes] * count, pa.binary()),
        }
    )
    batches = table.to_batches(max_chunksize=SINK_BATCH_ROWS)
    rounds = iter(range(1_000_000))

    def write() -> None:
        n = next(rounds)
        target = f"bench-paths-w-{value_bytes}b-{n}"
        anyio.run(create, servers, target)
        sink = sink_options({"servers": joined, "stream": target})
        stats = write_batches(sink, 1000 + n, 0, iter(batches))
        if stats.written != count:
            raise RuntimeError(f"the sink wrote {stats.written} rows, not {count}")

    read()  # warm-up
    write()
    spent: dict[str, list[tuple[float, float]]] = {k: [] for k in ("c", "r", "p", "w")}
    for r in range(PATH_ROUNDS):
        spent["c"].append(_cpu_and_wall(lambda: anyio.run(consume, servers, stream, count)))
        spent["r"].append(_cpu_and_wall(read))
        target = f"bench-paths-p-{value_bytes}b-{r}"
        spent["p"].append(
            _cpu_and_wall(partial(anyio.run, produce, servers, target, count, value_bytes))
        )
        spent["w"].append(_cpu_and_wall(write))
    print(
        f"without Spark: {count:,} rows of {value_bytes} B, this process's CPU (both threads), "
        f"median of {PATH_ROUNDS} alternating rounds (load {os.getloadavg()[0]:.1f})"
    )
    _line("jetsdk Consumer (8 partitions, from earliest)", spent["c"], count)
    _line("source read() of every Spark partition", spent["r"], count)
    _line("jetsdk Producer (ack ALL, incl. create)", spent["p"], count)
    _line("sink write_batches, one task (ack ALL)", spent["w"], count)
