"""Issue 4, item 7a: kill -9 of a partition leader while a producer publishes with ack ALL.

Three servers, a stream with RF=3 (min ISR 2) and three partitions (one leader per server).
A producer (SDK, ack ALL, idempotent) publishes without pause and a consumer reads every
partition. The leader of partition 0 is killed with SIGKILL; a new leader must be elected
from the ISR, the producer and the consumer must go on by themselves, and in the end every
acknowledged message is stored exactly once, in order, the HW never went back on any
replica, no send failed (the SDK producer retries across the failover with the same
sequences), the consumer saw every offset once, and (after the killed server restarted and
caught up) the three replica logs are byte-identical below the HW. The time to a new
leader and to the first ack after the kill are printed.
"""

from __future__ import annotations

import time
from pathlib import Path

import anyio
import pytest

from cluster.harness import Cluster, needs_cluster
from cluster.scenario import Scenario, elapsed, first_ack_after
from cluster.views import wait_full_isr, wait_leader

pytestmark = [pytest.mark.fault, pytest.mark.anyio, needs_cluster]

PARTITIONS = 3
ACKED_BEFORE_KILL = 1000
ACKED_AFTER_KILL = 1000
NEW_LEADER_BOUND_S = 20.0
"""A new leader must be in place within this (the printed figure is what counts)."""


async def test_kill_9_the_partition_leader_loses_no_acked_message(tmp_path: Path) -> None:
    with Cluster(root=tmp_path, size=3) as cluster:
        async with Scenario.open(cluster, "orders", partitions=PARTITIONS, rf=3) as sc:
            sc.start_producer(count=50_000, time_limit_s=60.0, rate=1500.0)
            await sc.producer.wait_acked(ACKED_BEFORE_KILL, 30.0)
            before, leader = await wait_full_isr(cluster, "orders", 0, 3, 30.0)
            victim = cluster.server(leader)
            t0 = time.monotonic()
            victim.kill9()
            after = await wait_leader(
                cluster,
                "orders",
                0,
                NEW_LEADER_BOUND_S,
                not_on=victim.server_id,
                min_epoch=before.leader_epoch + 1,
            )
            new_leader_s = elapsed(t0)
            assert after.leader in before.isr, (before, after)
            acked_at_kill = len(sc.producer.acked)
            await sc.producer.wait_acked(acked_at_kill + ACKED_AFTER_KILL, 30.0)
            sc.note(
                f"killed {victim.server_id} (leader of orders/0, epoch {before.leader_epoch}): "
                f"new leader {after.leader} (epoch {after.leader_epoch}) after "
                f"{new_leader_s * 1000:.0f} ms; first ack of partition 0 after "
                f"{first_ack_after(sc.producer, t0, 0) * 1000:.0f} ms, of any partition after "
                f"{first_ack_after(sc.producer, t0) * 1000:.0f} ms"
            )
            await anyio.to_thread.run_sync(victim.start)
            await sc.verify()
            # The producer rides out the failover by itself: every send is acknowledged.
            sc.note(f"producer retries: {sc.producer.retries}")
            assert not sc.producer.failures, (sc.producer.failures, sc.producer.last_failure)
