"""Issue 4, item 7f: simulated power loss on every server at once.

Every server runs with the storage durability trace (JET_TEST_DURABLE_LOG). While a
producer publishes with ack ALL, every server is killed with SIGKILL at the same moment,
then every file the storage engine wrote is cut back to its last fsync (files and directory
entries never fsynced are dropped): the page cache of the whole cluster is lost, as in a
power cut of the rack. Jepsen lost acknowledged writes of NATS JetStream 2.12.1 this way.

After the restart every acknowledged record must be there, exactly once and in order, the
producer must go on, and the replicas must converge to identical logs.
"""

from __future__ import annotations

import time
from pathlib import Path

import anyio
import pytest

from cluster.harness import Cluster, needs_cluster
from cluster.scenario import Scenario, elapsed, first_ack_after

pytestmark = [pytest.mark.fault, pytest.mark.anyio]

PARTITIONS = 3
ACKED_BEFORE_LOSS = 1500
"""Acks to collect before the power cut (the producer keeps publishing into it)."""
ACKED_AFTER_RESTART = 500
"""More acks needed after the restart."""
PRODUCE_RATE = 3000.0
"""Messages per second offered (a burst: more than the cluster acks, so some are in
flight at the cut)."""


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.mark.parametrize(
    "servers", [pytest.param(1, id="rf1"), pytest.param(3, id="rf3", marks=needs_cluster)]
)
async def test_power_loss_on_every_server_keeps_every_acked_record(
    tmp_path: Path, servers: int
) -> None:
    with Cluster(tmp_path, servers_count=servers, power_loss=True) as cluster:
        async with Scenario.open(cluster, "orders", partitions=PARTITIONS, rf=servers) as sc:
            sc.start_producer(count=50_000, time_limit_s=60.0, rate=PRODUCE_RATE)
            await sc.producer.wait_acked(ACKED_BEFORE_LOSS, 30.0)
            acked_at_cut = len(sc.producer.acked)
            t0 = time.monotonic()
            reports = await anyio.to_thread.run_sync(cluster.simulate_power_loss)
            for sid, report in sorted(reports.items()):
                lost = sum(before - after for before, after in report.truncated.values())
                sc.note(
                    f"{sid}: power loss cut {len(report.truncated)} file(s) by {lost} bytes, "
                    f"dropped {len(report.deleted)}, kept {report.kept} whole"
                )
            t_dead = time.monotonic()
            await anyio.to_thread.run_sync(cluster.start_all)
            leaders = await sc.wait_leaders()
            sc.note(f"restarted, leaders {leaders} after {elapsed(t0):.2f} s")
            await sc.producer.wait_acked(acked_at_cut + ACKED_AFTER_RESTART, 40.0)
            sc.note(
                f"first ack after the restart began: {first_ack_after(sc.producer, t_dead):.2f} s"
            )
            await sc.verify(compare_replicas=servers > 1)
