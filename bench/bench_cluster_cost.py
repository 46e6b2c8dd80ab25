"""What one RF 3 ack ALL message costs each server at light load: CPU, switches, system
calls and Python calls, on the partition leader and on a follower.

A 3-server dev cluster (``jet dev --servers 3``), one stream of one partition with three
replicas (durability ``flushed``); this process sends 100-byte messages with an ack ALL
``Producer`` (linger 0) at :data:`RATE` msg/s, one in flight at a time (each waits for its
ack: every message alone on its way, so the counts per message do not fall as the machine
gets busier, unlike latency). Per round, by ``JET_COST_KINDS`` (default
``cpu,strace,calls``):

- ``cpu``: user + system CPU (/proc) of the leader and of the followers (their mean), in
  µs per message, and the voluntary context switches (every thread) per message;
- ``strace``: system calls per message of the leader and of one follower (``strace -c -f
  -p``; one strace per process, in turn);
- ``calls``: Python calls per message in the leader's and a follower's loop thread
  (cProfile switched on and off by signal through ``bench/cost_hook/sitecustomize.py``),
  with the top callees; ``JET_COST_KEEP=<dir>`` keeps the profiles there.

With ``JET_BENCH_AGAINST=<another jet work tree>`` a second cluster runs that tree's code
(``A`` = this tree, ``B`` = that one) and the rounds interleave A and B. ``JET_COST_ROUNDS``
(default 3; quick 2) and ``JET_COST_MESSAGES`` (default 1,500; quick 1,000) set the rounds
and their size. Run: ``python -m bench cluster_cost [--quick]``.
"""

from __future__ import annotations

import contextlib
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from bench.bench_cost import (
    _user_system_s,
    print_medians,
    profiled,
    record,
    settings,
    syscall_counts,
    top_callees,
)
from bench.bench_light3 import _switches
from bench.bench_sdk import _load
from bench.pacing import paced
from bench.trees import HERE, compared_trees, tree_paths
from cluster.views import wait_info
from jetsdk import AckPolicy, Client, Producer
from jetserver.testing.devcluster import DevCluster

RATE = 500
"""Messages per second."""
VALUE = b"x" * 100
STREAM = "cost3"
WARMUP = 100
READY_TIMEOUT_S = 60.0


async def _setup(addresses: list[str], dev: DevCluster) -> str:
    async with Client(addresses) as client:
        await client.create_stream(STREAM, STREAM, partitions=1, replication_factor=3)
        info = await wait_info(
            dev, STREAM, 0, lambda i: len(i.isr) == 3, READY_TIMEOUT_S, "full ISR"
        )
        async with Producer(client, STREAM, ack=AckPolicy.ALL, linger=0) as producer:
            for _ in range(WARMUP):
                await producer.send(VALUE)
    assert info.leader is not None
    return str(info.leader)


async def _send(addresses: list[str], n: int) -> None:
    async with (
        Client(addresses) as client,
        Producer(client, STREAM, ack=AckPolicy.ALL, linger=0) as producer,
    ):
        await producer.send(VALUE)
        async for _ in paced(n, RATE):
            await producer.send(VALUE)


def _cpu(pid: int) -> float:
    return sum(_user_system_s(pid))


async def _round(
    kind: str, addresses: list[str], pids: dict[str, int], leader: str, n: int, work: Path, tag: str
) -> dict[str, tuple[float, str]]:
    """One round of ``n`` messages: per role (``leader``, ``follower``) a figure and a detail."""
    followers = [k for k in pids if k != leader]
    if kind == "cpu":
        c0 = {k: _cpu(p) for k, p in pids.items()}
        s0 = {k: _switches(p) for k, p in pids.items()}
        await _send(addresses, n)
        c1 = {k: _cpu(p) for k, p in pids.items()}
        s1 = {k: _switches(p) for k, p in pids.items()}

        def per(keys: list[str]) -> tuple[float, str]:
            cpu = statistics.mean((c1[k] - c0[k]) / n * 1e6 for k in keys)
            sw = statistics.mean((s1[k] - s0[k]) / n for k in keys)
            return cpu, f"{sw:.2f} voluntary switches/msg"

        return {"leader": per([leader]), "follower": per(followers)}
    roles = {"leader": leader, "follower": followers[0]}
    out: dict[str, tuple[float, str]] = {}

    async def send() -> None:
        await _send(addresses, n)

    for role, sid in roles.items():
        pid = pids[sid]
        if kind == "strace":
            counts = await syscall_counts(pid, work, f"strace.{tag}.{role}.txt", send)
            if counts is None:
                out[role] = (float("nan"), "strace could not attach")
                continue
            top = sorted(counts.items(), key=lambda kv: -kv[1])[:8]
            out[role] = (
                sum(counts.values()) / n,
                ", ".join(f"{name} {c / n:.2f}" for name, c in top),
            )
            continue
        stats = await profiled(pid, work, f"prof.{tag}.{sid}", send, f"prof.{tag}.{role}")
        out[role] = (stats.total_calls / n, top_callees(stats, n))  # type: ignore[attr-defined]
    return out


def run(quick: bool) -> None:
    """Start the clusters and run the rounds (module docstring)."""
    kinds, rounds, n = settings(quick, 1500)
    trees = compared_trees()
    results: dict[tuple[str, str, str], list[float]] = {}
    with contextlib.ExitStack() as stack:
        work = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="jet-cost3-")))
        devnull = stack.enter_context(open(os.devnull, "wb"))
        clusters: dict[str, tuple[list[str], dict[str, int], str]] = {}
        for tag, tree in trees.items():
            paths = [HERE / "bench/cost_hook", *tree_paths(tree)]
            envs = {
                f"s{i}": {
                    "PYTHONPATH": os.pathsep.join(str(p) for p in paths),
                    "JET_COST_PROFILE": str(work / f"prof.{tag}.s{i}"),
                }
                for i in (1, 2, 3)
            }
            dev = stack.enter_context(DevCluster(size=3, log_file=devnull, server_env=envs))
            leader = anyio.run(_setup, dev.addresses, dev, backend="asyncio")
            clusters[tag] = (dev.addresses, {s.server_id: s.pid for s in dev.servers}, leader)
        print(
            f"RF 3 ack ALL, one message's server cost at {RATE} msg/s one at a time, 100 B, "
            f"{rounds} rounds of {n}"
            + "".join(f"; {tag} = {tree}" for tag, tree in trees.items())
            + f" (load {_load()})",
            flush=True,
        )
        started = time.perf_counter()
        for kind in kinds:
            for r in range(rounds):
                for tag in list(trees) if r % 2 == 0 else list(trees)[::-1]:
                    addresses, pids, leader = clusters[tag]
                    got = anyio.run(
                        _round, kind, addresses, pids, leader, n, work, tag, backend="asyncio"
                    )
                    for role, (value, detail) in got.items():
                        record(results, (kind, f"{role:<8}", tag), r, value, detail)
        print_medians(results, rounds, n)
        print(f"  ({time.perf_counter() - started:.0f} s)")
