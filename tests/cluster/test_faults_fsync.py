"""Issue 10: one failed fsync on a replicated partition costs no acknowledged record.

Every server runs with the fsync fault shim (tests/support/fsync_fault.py) loaded but
unarmed. Once an RF 3 partition has its full ISR and acks are flowing, the test arms one
server (the leader, or a follower): its next-but-one fdatasync of a segment of the stream
fails with EIO and the bytes written since the last good sync are dropped, as after a
failed writeback on Linux. The idempotent ALL producer keeps sending; acks must go on, and
the final check (acked ⊆ stored, exactly once, order, HW monotonic, consumer, replica logs
byte-identical below the HW) must pass.

On the code before the fix a failed fsync still advanced the flushed offset: a follower
reported the dropped bytes as flushed (the leader counted them toward the HW), and a leader
moved its HW over them.
"""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from cluster.harness import Cluster, needs_cluster, wait_until_async
from cluster.records import read_disk_log
from cluster.scenario import Scenario
from cluster.views import wait_full_isr, wait_leader
from jetserver.raft.config import JOURNAL_FILE
from jetserver.storage.fatal import EXIT_STORAGE_FATAL
from support.fsync_fault import ArmableFault

pytestmark = [pytest.mark.fault, pytest.mark.anyio, needs_cluster]

SERVERS = ("s1", "s2", "s3")
BOUND_S = 30.0
ACKS_AFTER = 300
JOURNAL = f"/{JOURNAL_FILE}"
"""Acks that must arrive after the fault fired."""


async def test_a_leader_whose_failed_fsync_cut_records_its_followers_hold_renews_its_epoch(
    tmp_path: Path, fsync_shim: Path
) -> None:
    """Followers are sent records before the leader has fsynced them (they store theirs
    meanwhile). Here the leader's fsync of records both followers already hold is held at a
    gate, then fails: the leader must give up its epoch at once and lead on in the next one,
    where the followers truncate to its cut. Checked as above, plus the renewal.

    On the code that replicated before the leader's fsync but kept the epoch, this failed
    (the followers' copies of the cut records contradicted what the leader appended next at
    those offsets: replicas_identical, 7 violations; and no new epoch)."""
    faults = {
        sid: ArmableFault(tmp_path / f"{sid}.fault", tmp_path / f"{sid}.fired") for sid in SERVERS
    }
    gates = {sid: tmp_path / f"{sid}.gate" for sid in SERVERS}
    env = {
        sid: {
            **faults[sid].env(),
            "JET_FSYNC_GATE": str(gates[sid]),
            # In a worker thread, so the leader serves its followers while the fsync is held.
            "JET_STORAGE_FSYNC_ON_LOOP": "false",
        }
        for sid in SERVERS
    }
    with Cluster(root=tmp_path / "cluster", size=3, server_env=env) as cluster:
        async with Scenario.open(cluster, "orders", partitions=1, rf=3) as sc:
            sc.start_producer(count=100_000, time_limit_s=90.0, rate=200.0)
            await sc.producer.wait_acked(100, BOUND_S)
            info, leader = await wait_full_isr(cluster, "orders", 0, 3, BOUND_S)
            followers = [r for r in info.replicas if r != leader]
            gate = gates[leader]
            blocked = gate.with_name(gate.name + ".blocked")
            gate.touch()  # closed: the leader's next watched fsync waits here, then fails
            faults[leader].arm(f"/{leader}/data/streams/orders-", 1)
            await wait_until_async(blocked.exists, BOUND_S, f"an fsync held on {leader}")
            acked_before = len(sc.producer.acked)

            def ends() -> dict[str, int]:
                out = {}
                for sid in info.replicas:
                    records = read_disk_log(cluster.server(sid).data_dir, "orders", 0)
                    out[sid] = records[-1].offset + 1 if records else 0
                return out

            held = await anyio.to_thread.run_sync(ends)

            async def followers_hold_the_unsynced_records() -> bool:
                now = await anyio.to_thread.run_sync(ends)
                return all(now[f] >= held[leader] for f in followers)

            await wait_until_async(
                followers_hold_the_unsynced_records, BOUND_S, "followers hold the held records"
            )
            assert len(sc.producer.acked) == acked_before  # nothing commits past the held fsync
            gate.unlink()
            await wait_until_async(lambda: faults[leader].fired, BOUND_S, "the held fsync failed")
            renewed = await wait_leader(
                cluster, "orders", 0, BOUND_S, min_epoch=info.leader_epoch + 1
            )
            assert renewed.leader == leader
            assert renewed.isr == info.isr
            await sc.producer.wait_acked(len(sc.producer.acked) + ACKS_AFTER, BOUND_S)
            sc.note(f"held {held}; renewed at epoch {renewed.leader_epoch}")
            await sc.verify()
            log_text = await anyio.to_thread.run_sync(cluster.server(leader).incarnation_log)
            assert "gave up its epoch and asks for a new one" in log_text


@pytest.mark.parametrize("victim", ["leader", "follower"])
async def test_failed_fsync_on_a_replica_loses_no_acked_record(
    tmp_path: Path, fsync_shim: Path, victim: str
) -> None:
    faults = {
        sid: ArmableFault(tmp_path / f"{sid}.fault", tmp_path / f"{sid}.fired") for sid in SERVERS
    }
    env = {sid: f.env() for sid, f in faults.items()}
    with Cluster(root=tmp_path / "cluster", size=3, server_env=env) as cluster:
        async with Scenario.open(cluster, "orders", partitions=1, rf=3) as sc:
            sc.start_producer(count=100_000, time_limit_s=90.0, rate=1000.0)
            await sc.producer.wait_acked(300, BOUND_S)
            info, leader = await wait_full_isr(cluster, "orders", 0, 3, BOUND_S)
            target = leader if victim == "leader" else next(r for r in info.replicas if r != leader)
            fault = faults[target]
            fault.arm(f"/{target}/data/streams/orders-", 2)
            await wait_until_async(lambda: fault.fired, BOUND_S, f"fsync fault on {target}")
            acked = len(sc.producer.acked)
            await sc.producer.wait_acked(acked + ACKS_AFTER, BOUND_S)
            sc.note(f"fsync of {fault.marker.read_text().strip()} failed on {victim} {target}")
            await sc.verify()
            log_text = await anyio.to_thread.run_sync(cluster.server(target).incarnation_log)
            assert "cut the log back to its last good sync" in log_text


async def test_failed_fsync_of_the_raft_journal_stops_the_server(
    tmp_path: Path, fsync_shim: Path
) -> None:
    """The server whose Raft journal fsync fails exits at once (status 74) with a clear
    error; the other two go on, and it rejoins after a restart."""
    faults = {
        sid: ArmableFault(tmp_path / f"{sid}.fault", tmp_path / f"{sid}.fired", suffix=JOURNAL)
        for sid in SERVERS
    }
    env = {sid: f.env() for sid, f in faults.items()}
    with Cluster(root=tmp_path / "cluster", size=3, server_env=env) as cluster:
        victim = cluster.server("s2")
        async with Scenario.open(cluster, "orders", partitions=2, rf=3) as sc:
            sc.start_producer(count=100_000, time_limit_s=90.0, rate=500.0)
            await wait_full_isr(cluster, "orders", 0, 3, BOUND_S)
            faults["s2"].arm("/s2/data/raft/", 1)
            # A metadata change makes every member append to (and sync) its journal.
            await sc.jet.create_stream("other", replication_factor=1)
            await wait_until_async(lambda: faults["s2"].fired, BOUND_S, "journal fault fired")
            await wait_until_async(lambda: not victim.alive, BOUND_S, "s2 stopped")
            assert victim.proc is not None
            assert victim.proc.returncode == EXIT_STORAGE_FATAL
            log_text = await anyio.to_thread.run_sync(victim.incarnation_log)
            assert "FATAL: fsync of the Raft journal" in log_text
            acked = len(sc.producer.acked)
            await sc.producer.wait_acked(acked + 300, BOUND_S)  # the other two go on
            faults["s2"].control.unlink()
            await anyio.to_thread.run_sync(victim.start)
            await wait_full_isr(cluster, "orders", 0, 3, BOUND_S)
            await sc.verify()
