"""What one acked send costs the producer (the client side of ``bench cost``).

A ``Producer`` (linger 0, ack LEADER, 100 B) of a one-server ``jet dev``, asyncio's own
event loop, each send awaited before the next:

- ``calls``: Python function calls per send in the client process (cProfile around
  ``SEND_COST_MESSAGES`` sends in a row; asyncio's loop is counted too);
- ``cpu``: the client process's user + system CPU (getrusage) per send, sent at 500/s.

Each measurement runs in a process of its own with the tree's code on its PYTHONPATH;
with ``JET_BENCH_AGAINST=<another jet work tree>`` the rounds of this tree (``A``) and
that one (``B``) alternate, A first in even rounds. ``SEND_COST_ROUNDS`` rounds (default
3; quick 2) of ``SEND_COST_MESSAGES`` sends (default 1,000). Run: ``python -m bench
send_cost [--quick]``.
"""

from __future__ import annotations

import contextlib
import cProfile
import os
import pstats
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

RATE = 500
"""Sends per second in the ``cpu`` rounds."""


def run(quick: bool) -> None:
    """Alternate the trees' rounds and print the medians (module docstring)."""
    from bench.trees import compared_trees, tree_paths

    rounds = int(os.environ.get("SEND_COST_ROUNDS", "2" if quick else "3"))
    n = int(os.environ.get("SEND_COST_MESSAGES", "1000"))
    trees = list(compared_trees().items())
    results: dict[tuple[str, str], list[float]] = {}
    load = Path("/proc/loadavg").read_text().split()[:3]
    print(f"one acked send's client cost, {rounds} rounds of {n} (load {' '.join(load)})")
    for r in range(rounds):
        for tag, tree in trees if r % 2 == 0 else trees[::-1]:
            env = dict(os.environ, PYTHONPATH=os.pathsep.join(map(str, tree_paths(tree))))
            out = subprocess.run(
                [sys.executable, __file__, str(n)],
                env=env,
                check=True,
                capture_output=True,
                text=True,
                timeout=600,
            ).stdout.split()
            calls, cpu = float(out[-2]), float(out[-1])
            results.setdefault((tag, "calls"), []).append(calls)
            results.setdefault((tag, "cpu"), []).append(cpu)
            load = Path("/proc/loadavg").read_text().split()[:3]
            print(f"  r{r} {tag}: {calls:.1f} calls/send, {cpu:.0f} us/send (load {load[0]})")
    for (tag, kind), values in results.items():
        unit = "calls/send" if kind == "calls" else "client CPU us/send"
        rounds_text = ", ".join(f"{v:.1f}" for v in values)
        print(f"  {tag} {kind}: median {statistics.median(values):.1f} {unit} ({rounds_text})")


def _child(n: int) -> None:
    """One round in this process (this tree's code): print calls and CPU per send."""
    import anyio

    from jetsdk import Client, Producer
    from jetserver.devcluster import DevCluster

    async def measure(addresses: list[str]) -> tuple[float, float]:
        async with Client(addresses) as client:
            await client.create_stream("sendcost", "sendcost.x")
            async with Producer(client, "sendcost", linger=0) as producer:
                for _ in range(200):  # connections open, the partition's sender idle
                    await producer.send(b"x" * 100)
                profile = cProfile.Profile()
                profile.enable()
                for _ in range(n):
                    await producer.send(b"x" * 100)
                profile.disable()
                with tempfile.NamedTemporaryFile() as f:
                    profile.dump_stats(f.name)
                    calls = pstats.Stats(f.name).total_calls / n  # type: ignore[attr-defined]
                usage = resource.getrusage(resource.RUSAGE_SELF)
                cpu0 = usage.ru_utime + usage.ru_stime
                start = time.perf_counter()
                for i in range(n):
                    delay = start + i / RATE - time.perf_counter()
                    if delay > 0:
                        await anyio.sleep(delay)
                    await producer.send(b"x" * 100)
                usage = resource.getrusage(resource.RUSAGE_SELF)
                return calls, (usage.ru_utime + usage.ru_stime - cpu0) / n * 1e6

    with contextlib.ExitStack() as stack:
        devnull = stack.enter_context(open(os.devnull, "wb"))
        dev = stack.enter_context(DevCluster(size=1, log_file=devnull))
        calls, cpu = anyio.run(measure, dev.addresses, backend="asyncio")
    print(calls, cpu)


if __name__ == "__main__":
    _child(int(sys.argv[1]))
