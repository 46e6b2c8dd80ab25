"""Many replicated partitions on 3 servers: ``python -m bench scale_cluster [--quick]``.

A fresh 3-server ``jet dev`` cluster gets streams of 100 partitions at replication factor 3
(3,000 partitions; ``--quick``: 600). Then, from the metadata (every partition's leader and
leader epoch):

- the create time per partition;
- **idle leader changes**: leader elections (the sum of leader-epoch increases) while
  nothing is produced, over ``IDLE_S`` seconds after settling: a stable cluster has none;
- **failover**: kill -9 of the server leading the most partitions (about a third); the
  time until every partition has a live leader again, and the elections that took;
- the metadata Raft's files on a survivor.

``JET_BENCH_PARTITIONS=1000`` runs another size (a multiple of 100).

Target (issue 17): the leaderships of 1,000 partitions moved within 5 s of a kill -9.
The figures are from one run; on a shared 2-core machine run it a few times and take the
median.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import anyio

from jetsdk import Client
from jetsdk.errors import JetError
from jetserver.devcluster import DevCluster

PER_STREAM = 100
"""Partitions per stream."""
SETTLE_S = 10.0
"""Wait after creating before the idle window."""
IDLE_S = 30.0
"""The idle window in which leader changes are counted."""
CREATE_ATTEMPTS = 10
"""Tries per stream."""
FAILOVER_BOUND_S = 120.0
"""Give up waiting for leaders after this."""

State = dict[tuple[str, int], tuple[str | None, int, tuple[str, ...]]]
"""(stream, partition) -> (leader, leader epoch, ISR)."""


async def _create(address: list[str], partitions: int) -> tuple[float, int]:
    """Create the streams; (seconds, refused attempts). A create refused because a server
    looked down at that moment is tried again (up to CREATE_ATTEMPTS times)."""
    started = time.perf_counter()
    refused = 0
    async with Client(address, request_timeout=60.0) as client:
        for i in range(partitions // PER_STREAM):
            for attempt in range(CREATE_ATTEMPTS):
                try:
                    await client.create_stream(
                        f"s{i}", f"s{i}", partitions=PER_STREAM, replication_factor=3
                    )
                    break
                except JetError:
                    refused += 1
                    if attempt == CREATE_ATTEMPTS - 1:
                        raise
                    await anyio.sleep(2.0)
    return time.perf_counter() - started, refused


async def _state(address: list[str]) -> State:
    async with Client(address) as client:
        meta = await client.metadata(refresh=True)
        return {
            (name, p.partition): (p.leader, p.leader_epoch, p.isr)
            for name, info in meta.streams.items()
            if name.startswith("s")
            for p in info.partitions
        }


def _elections(before: State, after: State) -> int:
    return sum(max(after[k][1] - b[1], 0) for k, b in before.items() if k in after)


def measure(partitions: int, idle_s: float) -> dict[str, float]:
    """Create, idle, kill -9; the figures (see the module docstring)."""
    keep = os.environ.get("JET_BENCH_ROOT")  # keep data and per-server logs there
    root = Path(keep) if keep else None
    with (
        open(os.devnull, "wb") as devnull,
        DevCluster(size=3, root=root, log_file=None if keep else devnull) as dev,
    ):
        create_s, refused = anyio.run(_create, dev.addresses, partitions, backend="asyncio")
        time.sleep(SETTLE_S)
        before = anyio.run(_state, dev.addresses, backend="asyncio")
        time.sleep(idle_s)
        settled = anyio.run(_state, dev.addresses, backend="asyncio")
        idle_changes = _elections(before, settled)
        leaders = [v[0] for v in settled.values()]
        victim = max({lead for lead in leaders if lead}, key=leaders.count)
        led = leaders.count(victim)
        # A partition whose ISR is the victim alone stays without a leader (no unclean
        # election): it is counted apart.
        alone = {k for k, v in settled.items() if v[0] == victim and v[2] == (victim,)}
        survivors = [p.address for p in dev.servers if p.server_id != victim]
        dev.kill(victim)
        started = time.perf_counter()
        now = settled
        timeline: list[tuple[float, int]] = []
        while time.perf_counter() - started < FAILOVER_BOUND_S:
            now = anyio.run(_state, survivors, backend="asyncio")
            left = sum(1 for k, v in now.items() if k not in alone and v[0] in (None, victim))
            timeline.append((time.perf_counter() - started, left))
            if not left:
                break
            time.sleep(0.1)
        marks = [f"{t:.1f}s:{n}" for t, n in timeline[:: max(1, len(timeline) // 12)]]
        print(f"  partitions still to move over time: {' '.join(marks)}")
        moved_s = time.perf_counter() - started
        stuck = {k: now[k] for k in now if k not in alone and now[k][0] in (None, victim)}
        without = len(stuck)
        if stuck:
            print(f"  still without a leader (leader, epoch, ISR): {sorted(stuck.items())[:5]}")
        survivor = next(p for p in dev.servers if p.server_id != victim)
        raft = [f for f in Path(survivor.data_dir).rglob("*") if "raft" in str(f) and f.is_file()]
        raft_bytes = sum(f.stat().st_size for f in raft)  # before the cluster's files go
    return {
        "create_ms_per_partition": create_s * 1000 / partitions,
        "creates_refused": refused,
        "idle_leader_changes": idle_changes,
        "led": led,
        "moved_s": moved_s,
        "without_leader": without,
        "isr_alone": len(alone),
        "failover_elections": _elections(settled, now),
        "raft_files": len(raft),
        "raft_mib": raft_bytes / 2**20,
    }


def run(quick: bool) -> None:
    """Measure once and print the figures with the target."""
    partitions = int(os.environ.get("JET_BENCH_PARTITIONS", 600 if quick else 3000))
    idle_s = 10.0 if quick else IDLE_S
    r = measure(partitions, idle_s)
    verdict = "met" if r["moved_s"] <= 5.0 and not r["without_leader"] else "NOT met"
    print(
        f"  3 servers, {partitions:,} partitions at RF 3 (streams of {PER_STREAM}): created in "
        f"{r['create_ms_per_partition']:.1f} ms per partition "
        f"({r['creates_refused']:.0f} creates refused and tried again)\n"
        f"  idle for {idle_s:.0f} s: {r['idle_leader_changes']:.0f} leader changes\n"
        f"  kill -9 of the server leading {r['led']:.0f}: every partition had a live leader "
        f"again after {r['moved_s']:.2f} s ({r['without_leader']:.0f} still without one, "
        f"{r['isr_alone']:.0f} left alone in their ISR by the settled cluster; "
        f"{r['failover_elections']:.0f} elections; target: 1,000 in <= 5 s: {verdict})\n"
        f"  metadata Raft files on a survivor: {r['raft_files']:.0f}, {r['raft_mib']:.1f} MiB"
    )
