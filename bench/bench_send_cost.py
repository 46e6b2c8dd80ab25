"""What one acked send costs the producer (the client side of ``bench cost``).

A ``Producer`` (linger 0, ack LEADER, 100 B) of a one-server ``jet dev``, each send
awaited before the next, in the cases of ``SEND_COST_CASES`` (default all three):

- ``written`` / ``flushed``: ``await producer.send(...)`` on asyncio's own event loop,
  to a stream of that durability (as ``bench light``'s ``lw`` and ``lf``);
- ``sync``: the generated sync API's ``producer.send(...)`` (its loop thread, asyncio),
  to a ``written`` stream;
- ``aiter`` / ``iter`` (only when named in ``SEND_COST_CASES``): not a send but one
  message read, ``async for msg in consumer`` (asyncio) against the sync API's ``for msg
  in consumer``, of a ``written`` stream filled first (``SEND_COST_MESSAGES`` read per
  kind, from the earliest offset, after 200; the same kinds, per message; ``cpu`` reads
  as fast as it can, not at 500/s).

The kinds (``SEND_COST_KINDS``, default ``lines,calls,cpu``):

- ``lines``: Python lines run per send in the client process (``sys.settrace`` around
  ``SEND_COST_MESSAGES`` sends in a row, as bench/cost_hook's lines kind does for the
  server; every thread of the client that runs Python per send: the caller's and, for
  ``sync``, the loop thread); asyncio's loop is counted too. Deterministic up to the
  order in which the answer and the next turn meet (a few lines per send);
- ``calls``: Python function calls per send (cProfile, the caller's thread);
- ``cpu``: the client process's user + system CPU (getrusage) per send, sent at 500/s.

Each round runs in a process of its own with the tree's code on its PYTHONPATH; with
``JET_BENCH_AGAINST=<another jet work tree>`` the rounds of this tree (``A``) and that
one (``B``) alternate, A first in even rounds. ``SEND_COST_ROUNDS`` rounds (default 3;
quick 2) of ``SEND_COST_MESSAGES`` sends (default 1,000). ``SEND_COST_TOP=<k>`` prints
the k functions that run the most lines per send (last round of each tree and case);
``SEND_COST_BYLINE=<dir>`` writes every line's runs per send there (JSON per round).
Run: ``python -m bench send_cost [--quick]``.
"""

from __future__ import annotations

import contextlib
import cProfile
import json
import os
import pstats
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from types import CodeType, FrameType
from typing import Any

RATE = 500
"""Sends per second in the ``cpu`` rounds."""
CASES = ("written", "flushed", "sync")
KINDS = ("lines", "calls", "cpu")
_UNITS = {"lines": "lines/send", "calls": "calls/send", "cpu": "client CPU us/send"}


def run(quick: bool) -> None:
    """Alternate the trees' rounds and print the medians (module docstring)."""
    from bench.trees import compared_trees, tree_paths

    rounds = int(os.environ.get("SEND_COST_ROUNDS", "2" if quick else "3"))
    n = int(os.environ.get("SEND_COST_MESSAGES", "1000"))
    cases = os.environ.get("SEND_COST_CASES", ",".join(CASES)).split(",")
    kinds = os.environ.get("SEND_COST_KINDS", ",".join(KINDS))
    top = int(os.environ.get("SEND_COST_TOP", "0"))
    trees = list(compared_trees().items())
    results: dict[tuple[str, str, str], list[float]] = {}
    tops: dict[tuple[str, str], dict[str, float]] = {}
    load = Path("/proc/loadavg").read_text().split()[:3]
    print(f"one acked send's client cost, {rounds} rounds of {n} (load {' '.join(load)})")
    for r in range(rounds):
        for case in cases:
            for tag, tree in trees if r % 2 == 0 else trees[::-1]:
                env = dict(os.environ, PYTHONPATH=os.pathsep.join(map(str, tree_paths(tree))))
                out = subprocess.run(
                    [sys.executable, __file__, str(n), case, kinds],
                    env=env,
                    check=True,
                    capture_output=True,
                    text=True,
                    timeout=600,
                ).stdout.splitlines()
                figures = json.loads(out[-1])
                tops[tag, case] = figures.pop("top", {})
                load = Path("/proc/loadavg").read_text().split()[:3]
                shown = ", ".join(f"{v:.1f} {_UNITS[k]}" for k, v in figures.items())
                print(f"  r{r} {case} {tag}: {shown} (load {load[0]})")
                for kind, value in figures.items():
                    results.setdefault((case, tag, kind), []).append(value)
    for (case, tag, kind), values in results.items():
        rounds_text = ", ".join(f"{v:.1f}" for v in values)
        median = statistics.median(values)
        print(f"  {case} {tag} {kind}: median {median:.1f} {_UNITS[kind]} ({rounds_text})")
    for (tag, case), per in tops.items():
        if top:
            print(f"  {case} {tag}: the {top} functions running the most lines per send")
            for name, lines in sorted(per.items(), key=lambda kv: -kv[1])[:top]:
                print(f"    {lines:8.1f}  {name}")


class _LineCounter:
    """Counts the Python lines run per function in every thread it is installed in."""

    def __init__(self) -> None:
        self.counts: Counter[CodeType] = Counter()
        self.by_line: Counter[tuple[str, int]] = Counter()

    def install(self) -> None:
        """Count the lines of the calls this thread starts from now on."""
        counts = self.counts
        by_line = self.by_line if os.environ.get("SEND_COST_BYLINE") else None

        def local(frame: FrameType, event: str, _arg: Any) -> Any:
            if event == "line":
                counts[frame.f_code] += 1
                if by_line is not None:
                    by_line[frame.f_code.co_filename, frame.f_lineno] += 1
            return local

        def called(_frame: FrameType, event: str, _arg: Any) -> Any:
            return local if event == "call" else None

        sys.settrace(called)

    def per_send(self, n: int) -> tuple[float, dict[str, float]]:
        """Lines per send, and per function (``file:line(name)``) per send."""
        total = sum(self.counts.values()) / n
        per = {
            f"{c.co_filename.rsplit('/src/', 1)[-1]}:{c.co_firstlineno}({c.co_name})": v / n
            for c, v in self.counts.items()
        }
        return total, per

    def dump_by_line(self, n: int, case: str) -> None:
        """With ``SEND_COST_BYLINE=<dir>``: every line's runs per send there, as JSON
        (``<case>.<pid>.json``, ``{"<file>:<line>": runs}``)."""
        where = os.environ.get("SEND_COST_BYLINE")
        if where:
            out = {f"{path}:{line}": runs / n for (path, line), runs in self.by_line.items()}
            Path(where, f"{case}.{os.getpid()}.json").write_text(json.dumps(out))


@contextlib.contextmanager
def _measuring(
    kind: str, n: int, case: str, figures: dict[str, Any], loop_trace: Any = None
) -> Iterator[None]:
    """Measure ``kind`` over the ``n`` sends of the block into ``figures``;
    ``loop_trace(fn)`` runs ``fn`` in the client's loop thread when it is not this one."""
    if kind == "lines":
        counter = _LineCounter()
        if loop_trace is not None:
            loop_trace(counter.install)
        counter.install()
        yield
        sys.settrace(None)
        if loop_trace is not None:
            loop_trace(lambda: sys.settrace(None))
        figures["lines"], figures["top"] = counter.per_send(n)
        counter.dump_by_line(n, case)
    elif kind == "calls":
        profile = cProfile.Profile()
        profile.enable()
        yield
        profile.disable()
        with tempfile.NamedTemporaryFile() as f:
            profile.dump_stats(f.name)
            figures["calls"] = pstats.Stats(f.name).total_calls / n  # type: ignore[attr-defined]
    else:
        usage = resource.getrusage(resource.RUSAGE_SELF)
        cpu0 = usage.ru_utime + usage.ru_stime
        yield
        usage = resource.getrusage(resource.RUSAGE_SELF)
        figures["cpu"] = (usage.ru_utime + usage.ru_stime - cpu0) / n * 1e6


def _child(n: int, case: str, kinds: list[str]) -> None:
    """One round in this process (this tree's code): print the kinds' figures as JSON.
    The ``cpu`` kind's sends are paced at ``RATE``, the others' back to back."""
    import anyio

    from jetsdk import Client, Consumer, Producer
    from jetsdk import sync as jsync
    from jetsdk.client_requests import Durability
    from jetserver.testing.devcluster import DevCluster

    figures: dict[str, Any] = {}
    durability: Durability | None = None if case == "flushed" else "written"
    value = b"x" * 100

    async def async_case(addresses: list[str]) -> None:
        async with Client(addresses) as client:
            await client.create_stream("sendcost", "sendcost.x", durability=durability)
            async with Producer(client, "sendcost", linger=0) as producer:
                for _ in range(200):  # connections open, the partition's sender idle
                    await producer.send(value)
                for kind in kinds:
                    with _measuring(kind, n, case, figures):
                        start, rate = time.perf_counter(), RATE if kind == "cpu" else 0
                        for i in range(n):
                            if rate and (delay := start + i / rate - time.perf_counter()) > 0:
                                await anyio.sleep(delay)
                            await producer.send(value)

    def sync_case(addresses: list[str]) -> None:
        with jsync.Client(addresses) as client:
            client.create_stream("sendcost", "sendcost.x", durability=durability)
            with jsync.Producer(client, "sendcost", linger=0) as producer:
                portal = client._portal
                assert portal is not None
                for _ in range(200):
                    producer.send(value)
                for kind in kinds:
                    with _measuring(kind, n, case, figures, portal.call):
                        start, rate = time.perf_counter(), RATE if kind == "cpu" else 0
                        for i in range(n):
                            if rate and (delay := start + i / rate - time.perf_counter()) > 0:
                                time.sleep(delay)
                            producer.send(value)

    async def fill(addresses: list[str]) -> None:
        async with Client(addresses) as client:
            await client.create_stream("sendcost", "sendcost.x", durability="written")
            async with Producer(client, "sendcost", linger=0.005) as producer:
                for _ in range(200 + n * len(kinds)):
                    await producer.send_soon(value)

    async def aiter_case(addresses: list[str]) -> None:
        async with Client(addresses) as client, Consumer(client, "sendcost") as consumer:
            read = 0
            async for _msg in consumer:  # warm: connections open, the fetcher running
                read += 1
                if read == 200:
                    break
            for kind in kinds:  # n messages each
                with _measuring(kind, n, case, figures):
                    async for _msg in consumer:
                        read += 1
                        if read % n == 200 % n:
                            break

    def iter_case(addresses: list[str]) -> None:
        with jsync.Client(addresses) as client, jsync.Consumer(client, "sendcost") as consumer:
            portal = client._portal
            assert portal is not None
            read = 0
            for _msg in consumer:
                read += 1
                if read == 200:
                    break
            for kind in kinds:
                with _measuring(kind, n, case, figures, portal.call):
                    for _msg in consumer:
                        read += 1
                        if read % n == 200 % n:
                            break

    with contextlib.ExitStack() as stack:
        devnull = stack.enter_context(open(os.devnull, "wb"))
        dev = stack.enter_context(DevCluster(size=1, log_file=devnull))
        if case in ("aiter", "iter"):
            anyio.run(fill, dev.addresses, backend="asyncio")
        if case == "aiter":
            anyio.run(aiter_case, dev.addresses, backend="asyncio")
        elif case == "iter":
            iter_case(dev.addresses)
        elif case == "sync":
            sync_case(dev.addresses)
        else:
            anyio.run(async_case, dev.addresses, backend="asyncio")
    print(json.dumps(figures))


if __name__ == "__main__":
    _child(int(sys.argv[1]), sys.argv[2], sys.argv[3].split(","))
