"""RF 3 ack ALL at light load: latency and server CPU per message, optionally A/B.

A 3-server dev cluster (``jet dev --servers 3``), one stream of one partition with three
replicas; this process sends 100-byte messages with an ack ALL ``Producer`` (linger 0) at
:data:`RATE` msg/s, one in flight at a time (each waits for its ack), in alternating
rounds. Per round: p50 and p99 of send -> ack, and per message the user + system CPU
(/proc) and the voluntary context switches (all threads) of the partition leader and of
the followers (their mean); then the medians over the rounds.

With ``JET_BENCH_AGAINST=<path of another jet work tree>`` a second cluster runs that tree's
server code beside this one (``A`` = this tree, ``B`` = that one) and the rounds alternate
between them (A B, B A, ...): an A/B of two builds at the same moments. Run: ``python -m
bench light3 [--quick]`` (quick: 3 rounds of 3 s, else 6 rounds of 4 s).
"""

from __future__ import annotations

import contextlib
import glob
import os
import statistics
import sys
import time
from pathlib import Path

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from bench.bench_sdk import _load, _process_cpu_s
from bench.pacing import paced
from bench.trees import compared_trees, running_tree
from cluster.views import wait_info
from jetsdk import AckPolicy, Client, Producer
from jetserver.testing.devcluster import DevCluster

RATE = 500
"""Messages per second (each one alone on its way at this rate on the dev VM)."""
VALUE = b"x" * 100
STREAM = "light3"
WARMUP = 50
"""Messages sent before a round's measurement (connections open, ISR full)."""
READY_TIMEOUT_S = 60.0

Figures = tuple[float, float, float, float, float, float]
"""p50 ms, p99 ms, leader CPU us/msg, follower CPU us/msg, leader and follower voluntary
context switches per message."""


def _switches(pid: int) -> int:
    """Voluntary context switches of every thread of ``pid`` so far (0 if unknown)."""
    total = 0
    for path in glob.glob(f"/proc/{pid}/task/*/status"):
        try:
            with open(path) as f:
                for line in f:
                    if line.startswith("voluntary_ctxt_switches"):
                        total += int(line.split()[1])
        except OSError:
            continue
    return total


async def _setup(dev: DevCluster) -> str:
    """Create the stream; the leader's server id once the ISR is full."""
    async with Client(dev.addresses) as client:
        await client.create_stream(STREAM, STREAM, partitions=1, replication_factor=3)
    info = await wait_info(dev, STREAM, 0, lambda i: len(i.isr) == 3, READY_TIMEOUT_S, "full ISR")
    assert info.leader is not None
    return str(info.leader)


async def _round(dev: DevCluster, leader: str, seconds: float) -> Figures:
    pids = {s.server_id: s.pid for s in dev.servers}
    latencies: list[float] = []
    async with (
        Client(dev.addresses) as client,
        Producer(client, STREAM, ack=AckPolicy.ALL, linger=0) as producer,
    ):
        for _ in range(WARMUP):
            await producer.send(VALUE)
        cpu0 = {k: _process_cpu_s(p) for k, p in pids.items()}
        sw0 = {k: _switches(p) for k, p in pids.items()}
        async for _ in paced(int(RATE * seconds), RATE):
            sent = time.perf_counter()
            await producer.send(VALUE)
            latencies.append((time.perf_counter() - sent) * 1e3)
        cpu1 = {k: _process_cpu_s(p) for k, p in pids.items()}
        sw1 = {k: _switches(p) for k, p in pids.items()}
    n = len(latencies)
    followers = [k for k in pids if k != leader]
    latencies.sort()
    return (
        latencies[n // 2],
        latencies[min(n - 1, int(0.99 * n))],
        (cpu1[leader] - cpu0[leader]) / n * 1e6,
        statistics.mean((cpu1[k] - cpu0[k]) / n * 1e6 for k in followers),
        (sw1[leader] - sw0[leader]) / n,
        statistics.mean((sw1[k] - sw0[k]) / n for k in followers),
    )


def _line(figures: Figures) -> str:
    p50, p99, lcpu, fcpu, lsw, fsw = figures
    return (
        f"p50 {p50:5.2f} p99 {p99:6.2f} ms; CPU us/msg leader {lcpu:5.0f} follower {fcpu:5.0f}; "
        f"switches/msg leader {lsw:4.1f} follower {fsw:4.1f}"
    )


def run(quick: bool) -> None:
    """Alternating rounds of each tree's cluster; per round and median figures."""
    rounds, seconds = (3, 3.0) if quick else (6, 4.0)
    trees = compared_trees()
    results: dict[str, list[Figures]] = {tag: [] for tag in trees}
    with contextlib.ExitStack() as stack:
        devnull = stack.enter_context(open(os.devnull, "wb"))
        clusters: dict[str, tuple[DevCluster, str]] = {}
        for tag, tree in trees.items():
            with running_tree(tree):  # the servers import that tree's code
                dev = stack.enter_context(DevCluster(size=3, log_file=devnull))
            clusters[tag] = (dev, anyio.run(_setup, dev, backend="asyncio"))
        print(
            f"RF 3 ack ALL, {RATE} msg/s one at a time, 100 B, {rounds} rounds of {seconds:g} s"
            + "".join(f"; {tag} = {tree}" for tag, tree in trees.items())
            + f" (load {_load()})"
        )
        for r in range(rounds):
            order = list(trees) if r % 2 == 0 else list(reversed(trees))
            for tag in order:
                dev, leader = clusters[tag]
                figures = anyio.run(_round, dev, leader, seconds, backend="asyncio")
                results[tag].append(figures)
                print(f"  round {r} {tag}: {_line(figures)} (load {_load()})", flush=True)
    for tag, rows in results.items():
        m = [statistics.median(row[i] for row in rows) for i in range(6)]
        print(f"  {tag} median: {_line((m[0], m[1], m[2], m[3], m[4], m[5]))}")
