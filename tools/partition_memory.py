"""Where an idle partition's memory goes: tracemalloc around creating N partitions.

    PYTHONPATH=. .venv/bin/python tools/partition_memory.py            # 2,000 partitions
    PYTHONPATH=. .venv/bin/python tools/partition_memory.py --partitions 500 --top 20

A nats-server and a jet server in this process (asyncio, like the server's own loop apart
from uvloop); one snapshot before and one after creating the partitions (streams of 100)
and letting them settle past the first HW checkpoint round. Prints the traced bytes per
partition grouped by the innermost jet source line that allocated them (what to cut),
then by allocating line, then the object counts per partition by type. RSS is printed too,
but tracemalloc's own bookkeeping inflates it: measure RSS with ``python -m bench scale``.
"""

from __future__ import annotations

import argparse
import gc
import os
import tempfile
import tracemalloc
from collections import Counter
from pathlib import Path

import anyio

from jetsdk import Client
from jetserver.testing.in_process import running_server
from jetserver.testing.nats import NatsServer

PER_STREAM = 100
SETTLE_S = 7.0
"""Past the first HW checkpoint round (every 5 s)."""
FRAMES = 40


def _rss() -> int:
    with open("/proc/self/statm", encoding="ascii") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _types() -> Counter[str]:
    gc.collect()
    return Counter(f"{type(o).__module__}.{type(o).__qualname__}" for o in gc.get_objects())


def _short(filename: str) -> str:
    return filename.split("site-packages/")[-1].split("/src/")[-1]


def _report(
    before: tracemalloc.Snapshot,
    after: tracemalloc.Snapshot,
    types: tuple[Counter[str], Counter[str]],
    n: int,
    top: int,
) -> None:
    diffs = after.compare_to(before, "traceback")
    print(f"traced: {sum(d.size_diff for d in diffs) / 1024 / n:.2f} KB per partition")
    by_jet: Counter[str] = Counter()
    for d in diffs:
        frame = next((f for f in reversed(d.traceback) if "jetserver/" in f.filename), None)
        key = "(outside jet)" if frame is None else f"{_short(frame.filename)}:{frame.lineno}"
        by_jet[key] += d.size_diff
    print("\nbytes per partition, by the innermost jet line that allocated them")
    for key, size in by_jet.most_common(top):
        print(f"  {size / n:8.0f}  {key}")
    print("\nbytes and objects per partition, by allocating line")
    for d in after.compare_to(before, "lineno")[:top]:
        frame = d.traceback[0]
        print(
            f"  {d.size_diff / n:8.0f} {d.count_diff / n:6.2f}  "
            f"{_short(frame.filename)}:{frame.lineno}"
        )
    print("\nobjects per partition, by type")
    for name, count in (types[1] - types[0]).most_common(top):
        print(f"  {count / n:7.2f}  {name}")


async def _measure(nats_url: str, data: Path, n: int, top: int) -> None:
    async with running_server(nats_url, data, logging__level="INFO") as server:
        async with Client([server.address]) as client:
            await client.create_stream("warm", "warm", partitions=1)
        await anyio.sleep(1.0)
        types0 = _types()
        before, rss0 = tracemalloc.take_snapshot(), _rss()
        async with Client([server.address]) as client:
            for i in range(n // PER_STREAM):
                await client.create_stream(f"s{i}", f"s{i}", partitions=PER_STREAM)
        await anyio.sleep(SETTLE_S)
        gc.collect()
        rss1, after = _rss(), tracemalloc.take_snapshot()
        types1 = _types()
    print(f"{n:,} partitions; RSS {(rss1 - rss0) / 1024 / n:.1f} KB per partition (traced)")
    skip = [tracemalloc.Filter(False, tracemalloc.__file__)]
    _report(before.filter_traces(skip), after.filter_traces(skip), (types0, types1), n, top)


def main() -> None:
    """Parse the arguments, measure, print."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--partitions", type=int, default=2000, help="multiple of 100")
    parser.add_argument("--top", type=int, default=30, help="rows per table")
    args = parser.parse_args()
    with NatsServer() as nats, tempfile.TemporaryDirectory() as tmp:
        tracemalloc.start(FRAMES)
        anyio.run(
            _measure, nats.url, Path(tmp) / "data", args.partitions, args.top, backend="asyncio"
        )


if __name__ == "__main__":
    main()
