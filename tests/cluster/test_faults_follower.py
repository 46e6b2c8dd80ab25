"""Issue 4, item 7c: a follower killed (kill -9) under writes, restarted on its data.

kill -9 a follower of a RF=3 partition while a producer publishes with ack ALL, write
more (the ISR shrinks after the lag bound, then ALL acks go on with min ISR 2), restart it
on its data directory: it reconciles by leader epoch, catches up, rejoins the ISR. The test
ends with the full check (acked ⊆ stored, exactly once, order, HW monotonic on every
replica, consumer complete, replica logs byte-identical below the HW).

Item 7b (SIGSTOP a follower, SIGCONT) is tested by the replication tests
(tests/cluster/test_replication_cluster.py) and under load by the seeded random fault run
(tests/cluster/test_faults_random.py).
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
REJOIN_BOUND_S = 30.0
"""Bound on a restarted follower rejoining the ISR."""
ACKS_WHILE_DOWN = 500
"""Acks that must arrive while the follower is out."""


async def test_killed_follower_restarts_reconciles_and_catches_up(tmp_path: Path) -> None:
    with Cluster(root=tmp_path, size=3) as cluster:
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
