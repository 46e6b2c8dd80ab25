"""Issue 4, item 7e: a minority replica's files are damaged; it restarts on them.

A follower of a RF=3 partition (small segments, so there are several) is killed with
SIGKILL; one bit of a record in an early, closed segment is flipped and the last segment
is cut in the middle of a record. Once it has restarted and logged both damages (a torn
tail cut by recovery, a damaged record found by the replication scrub), the other follower
is paused (SIGSTOP) and the partition leader is killed, so that the damaged replica is the
only one able to report the leader silent; the paused follower resumes after ``PAUSE_S``.

Expected: the damaged replica detects the damage, never leads with data missing (the
final check finds every acknowledged message at its offset; the partition may stay
leaderless until the healthy follower is back), and re-replicates what it lost, so that
in the end the three replica logs are byte-identical below the HW.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import anyio
import pytest

from cluster.harness import Cluster, JetServer, needs_cluster, wait_until_async
from cluster.records import partition_dir
from cluster.scenario import Scenario, elapsed
from cluster.views import wait_full_isr, wait_leader
from support.corrupt import flip_bits

pytestmark = [pytest.mark.fault, pytest.mark.anyio, needs_cluster]

SEGMENT_BYTES = 32 * 1024
"""Small segments: 2000 acked 100-byte messages fill several."""
LEADER_BOUND_S = 30.0
DETECTION_BOUND_S = 15.0
"""Bound on the damaged replica reporting what it found."""
PAUSE_S = 4.0
"""How long the healthy follower stays paused while the leader is dead."""


def damage(server: JetServer, stream: str, partition: int) -> str:
    """Flip a bit in the middle of the second segment, cut the last one in half."""
    directory = partition_dir(server.data_dir, stream, partition)
    assert directory is not None, f"{server.server_id} has no files for {stream}/{partition}"
    segments = sorted(directory.glob("*.log"))
    if len(segments) > 3 and segments[-1].stat().st_size == 0:
        # Killed right after a roll (CI run of 2026-11-26 on a loaded VM: the cut below
        # was negative): drop the empty new segment, as if the kill came before the roll,
        # so that the tail to tear is the previous segment's.
        empty = segments.pop()
        for suffix in (".log", ".index", ".timeindex"):
            empty.with_suffix(suffix).unlink(missing_ok=True)
    assert len(segments) >= 3, f"want 3+ segments, {server.server_id} has {len(segments)}"
    flipped = segments[1]
    size = flipped.stat().st_size
    flip_bits(flipped, size // 2, 0x10)
    last = segments[-1]
    last_size = last.stat().st_size
    cut = last_size // 2 - 37  # inside a record (records here are 165 bytes)
    os.truncate(last, cut)
    return (
        f"flipped a bit at byte {size // 2} of {flipped.name}, cut {last.name} from "
        f"{last_size} to {cut} bytes"
    )


DETECTION_MARKS = ("damaged records", "torn tail")
"""What the server logs when it finds damage (replication scrub, storage recovery)."""


def detections(server: JetServer) -> list[str]:
    """Log lines of the current incarnation that report damage."""
    return [
        line
        for line in server.incarnation_log().splitlines()
        if any(mark in line for mark in DETECTION_MARKS)
    ]


async def test_damaged_minority_replica_recovers_and_never_leads_with_data_missing(
    tmp_path: Path,
) -> None:
    with Cluster(root=tmp_path, size=3) as cluster:
        async with Scenario.open(
            cluster, "orders", partitions=1, rf=3, segment_max_bytes=SEGMENT_BYTES
        ) as sc:
            sc.start_producer(count=100_000, time_limit_s=90.0, rate=1000.0)
            await sc.producer.wait_acked(2000, 30.0)
            info, leader_id = await wait_full_isr(cluster, "orders", 0, 3, 30.0)
            damaged = cluster.server(next(r for r in info.replicas if r != leader_id))
            damaged.kill9()
            sc.note(f"{damaged.server_id}: {damage(damaged, 'orders', 0)}")
            await anyio.to_thread.run_sync(damaged.start)
            await wait_until_async(
                lambda: len(detections(damaged)) >= 2,
                DETECTION_BOUND_S,
                f"{damaged.server_id} reports both damages",
            )
            for line in detections(damaged):
                sc.note(f"{damaged.server_id} reported: {line[:400]}")
            leader = cluster.server(leader_id)
            healthy = cluster.server(
                next(r for r in info.replicas if r not in (leader_id, damaged.server_id))
            )
            healthy.pause()
            t0 = time.monotonic()
            leader.kill9()
            await anyio.sleep(PAUSE_S)
            healthy.resume()
            new = await wait_leader(
                cluster,
                "orders",
                0,
                LEADER_BOUND_S,
                not_on=leader_id,
                min_epoch=info.leader_epoch + 1,
            )
            sc.note(
                f"paused {healthy.server_id}, killed leader {leader_id} right after the restart, "
                f"resumed {healthy.server_id} {PAUSE_S} s later: new leader {new.leader} "
                f"(epoch {new.leader_epoch}, ISR {new.isr}) {elapsed(t0):.2f} s after the kill"
            )
            await anyio.to_thread.run_sync(leader.start)
            acked = len(sc.producer.acked)
            await sc.producer.wait_acked(acked + 500, 60.0)
            await wait_full_isr(cluster, "orders", 0, 3, 60.0)
            await sc.verify()
