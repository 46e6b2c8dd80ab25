"""Issue 4, items 7b and 7c: a follower paused (SIGSTOP) or killed (kill -9) under writes.

(b) SIGSTOP a follower of a RF=3 partition: it stops fetching, leaves the ISR (through the
    metadata) after the lag bound, and ack-ALL writes go on with the two others (min ISR
    2). After SIGCONT it catches up and rejoins the ISR.
(c) kill -9 a follower, write more, restart it on its data directory: it reconciles by
    leader epoch, catches up, rejoins the ISR, and every replica log is byte-identical
    below the HW.

Both end with the full check (acked ⊆ stored, exactly once, order, HW monotonic on every
replica, consumer complete, replicas identical).
"""

from __future__ import annotations

import time
from pathlib import Path

import anyio
import pytest

from cluster.harness import Cluster, needs_cluster
from cluster.scenario import Scenario, elapsed
from cluster.views import wait_full_isr, wait_info

pytestmark = [pytest.mark.fault, pytest.mark.anyio, needs_cluster]

PARTITIONS = 1
ISR_SHRINK_BOUND_S = 30.0
"""Bound on a paused follower leaving the ISR (the lag bound plus the metadata update)."""
REJOIN_BOUND_S = 30.0
"""Bound on a resumed or restarted follower rejoining the ISR."""
ACKS_WHILE_DOWN = 500
"""Acks that must arrive while the follower is out."""


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


async def test_paused_follower_leaves_the_isr_and_rejoins_after_sigcont(tmp_path: Path) -> None:
    with Cluster(tmp_path, servers_count=3) as cluster:
        async with Scenario.open(cluster, "orders", partitions=PARTITIONS, rf=3) as sc:
            sc.start_producer(count=100_000, time_limit_s=90.0, rate=500.0)
            await sc.producer.wait_acked(500, 30.0)
            info, leader = await wait_full_isr(cluster, "orders", 0, 3, REJOIN_BOUND_S)
            follower = cluster.server(next(r for r in info.replicas if r != leader))
            t0 = time.monotonic()
            follower.pause()
            shrunk = await wait_info(
                cluster,
                "orders",
                0,
                lambda i: follower.server_id not in i.isr,
                ISR_SHRINK_BOUND_S,
                f"{follower.server_id} out of the ISR",
            )
            sc.note(f"paused {follower.server_id}: ISR {shrunk.isr} after {elapsed(t0):.2f} s")
            acked = len(sc.producer.acked)
            await sc.producer.wait_acked(acked + ACKS_WHILE_DOWN, 20.0)
            t1 = time.monotonic()
            follower.resume()
            rejoined = await wait_info(
                cluster,
                "orders",
                0,
                lambda i: follower.server_id in i.isr,
                REJOIN_BOUND_S,
                f"{follower.server_id} back in the ISR",
            )
            sc.note(f"resumed: ISR {rejoined.isr} after {elapsed(t1):.2f} s")
            acked = len(sc.producer.acked)
            await sc.producer.wait_acked(acked + 200, 20.0)
            await sc.verify()


async def test_killed_follower_restarts_reconciles_and_catches_up(tmp_path: Path) -> None:
    with Cluster(tmp_path, servers_count=3) as cluster:
        async with Scenario.open(cluster, "orders", partitions=PARTITIONS, rf=3) as sc:
            sc.start_producer(count=100_000, time_limit_s=90.0, rate=1000.0)
            await sc.producer.wait_acked(1000, 30.0)
            info, leader = await wait_full_isr(cluster, "orders", 0, 3, REJOIN_BOUND_S)
            follower = cluster.server(next(r for r in info.replicas if r != leader))
            follower.kill9()
            acked = len(sc.producer.acked)
            await sc.producer.wait_acked(acked + 2 * ACKS_WHILE_DOWN, 30.0)
            t0 = time.monotonic()
            await anyio.to_thread.run_sync(follower.start)
            rejoined = await wait_info(
                cluster,
                "orders",
                0,
                lambda i: follower.server_id in i.isr and len(i.isr) == 3,
                REJOIN_BOUND_S,
                f"{follower.server_id} back in the ISR",
            )
            sc.note(
                f"killed follower {follower.server_id}, restarted: ISR {rejoined.isr} after "
                f"{elapsed(t0):.2f} s"
            )
            acked = len(sc.producer.acked)
            await sc.producer.wait_acked(acked + 200, 20.0)
            await sc.verify()
