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
from cluster.views import wait_full_isr, wait_leader
from support.raw_client import RawClient

pytestmark = [pytest.mark.fault, pytest.mark.anyio]

PARTITIONS = 3
ACKED_BEFORE_LOSS = 1500
"""Acks to collect before the power cut (the producer keeps publishing into it)."""
ACKED_AFTER_RESTART = 500
"""More acks needed after the restart."""
PRODUCE_RATE = 3000.0
"""Messages per second offered (a burst: more than the cluster acks, so some are in
flight at the cut)."""


@pytest.mark.parametrize(
    "servers", [pytest.param(1, id="rf1"), pytest.param(3, id="rf3", marks=needs_cluster)]
)
async def test_power_loss_on_every_server_keeps_every_acked_record(
    tmp_path: Path, servers: int
) -> None:
    with Cluster(root=tmp_path, size=servers, power_loss=True) as cluster:
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
                    f"dropped {len(report.deleted)}, kept {report.kept} whole; cut "
                    f"{sorted(Path(p).name for p in report.truncated)}, dropped "
                    f"{sorted(f'{Path(p).name} ({why})' for p, why in report.deleted.items())}"
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


@needs_cluster
@pytest.mark.parametrize(
    ("durability", "hold_followers"),
    [
        # One case keeps CI short (~18 s): the weaker durability, and the followers held so
        # that the restarted leader's own registration decides. Without holding them the
        # election usually wins the race (test_faults_leader covers that path); add
        # pytest.param("flushed", False) to run both.
        pytest.param("replicated", True, id="replicated-followers-held"),
    ],
)
async def test_power_loss_on_the_leader_alone_restarting_at_once(
    tmp_path: Path, durability: str, hold_followers: bool
) -> None:
    """The leader of a partition loses power alone (its files cut back to their last
    fsync) and starts again at once, racing the followers' silent-leader reports. Its log
    may now miss records the followers have; whichever comes first (the election, or its
    own registration as restarted after an unclean stop), it must not lead with records
    missing: every acknowledged record survives, nothing is stored twice, the producer
    goes on without a failed send, and the replicas converge.

    ``hold_followers``: the followers are paused (SIGSTOP) from before the cut until the
    restarted server answers on its port, so no election can happen first and its own
    registration after an unclean stop usually decides (which path won is printed)."""
    with Cluster(root=tmp_path, size=3, power_loss=True) as cluster:
        async with Scenario.open(
            cluster,
            "orders",
            partitions=PARTITIONS,
            rf=3,
            durability=durability,  # type: ignore[arg-type]
        ) as sc:
            sc.start_producer(count=50_000, time_limit_s=60.0, rate=PRODUCE_RATE)
            await sc.producer.wait_acked(ACKED_BEFORE_LOSS, 30.0)
            before, leader = await wait_full_isr(cluster, "orders", 0, 3, 30.0)
            victim = cluster.server(leader)
            followers = [cluster.server(r) for r in before.replicas if r != leader]
            if hold_followers:
                for f in followers:
                    f.pause()
            t0 = time.monotonic()
            victim.kill9()
            report = victim.apply_power_loss()
            lost = sum(b - a for b, a in report.truncated.values())
            try:
                victim.spawn()
                if hold_followers:
                    await wait_answering(victim.address, 30.0)
            finally:
                for f in followers:
                    f.resume()
            await anyio.to_thread.run_sync(victim.wait_ready)
            sc.note(
                f"{victim.server_id} (leader of orders/0, epoch {before.leader_epoch}) lost "
                f"power: {lost} bytes cut, {len(report.deleted)} file(s) dropped; running "
                f"again after {elapsed(t0):.2f} s"
            )
            after = await wait_leader(cluster, "orders", 0, 30.0, min_epoch=before.leader_epoch + 1)
            sc.note(
                f"orders/0 leader {after.leader} epoch {after.leader_epoch} isr {after.isr} "
                f"after {elapsed(t0):.2f} s"
            )
            acked_at_restart = len(sc.producer.acked)
            await sc.producer.wait_acked(acked_at_restart + ACKED_AFTER_RESTART, 40.0)
            moved = "leadership(s) moved" in victim.incarnation_log()
            sc.note(
                "leadership moved by "
                + ("the restarted server's registration" if moved else "an election")
            )
            await sc.verify()
            sc.note(f"producer retries: {sc.producer.retries}")
            assert not sc.producer.failures, (sc.producer.failures, sc.producer.last_failure)


async def wait_answering(address: str, timeout_s: float) -> None:
    """Wait until a server accepts connections at ``address`` (bounded)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            with anyio.fail_after(1.0):
                async with await RawClient.connect(address):
                    return
        except Exception:
            if time.monotonic() > deadline:
                raise
        await anyio.sleep(0.05)
