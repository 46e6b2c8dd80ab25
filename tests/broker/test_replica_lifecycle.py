"""Issue 31, item 5: an assignment and the replica's own lifecycle are ordered.

A partition replica (a real log in a temporary directory, a real NATS link to a real
nats-server) is handed an assignment that makes it leader:

- before its ``run()`` started: the call waits for ``run`` and then leads (it used to
  raise ``RuntimeError: apply_assignment before run() started``);
- while it stops: the role is being prepared (the epoch cache's fsync in a worker thread,
  held here by its lock) when ``stop()`` comes and ``run()`` ends. The assignment is
  dropped, with no role task and no NATS subscription left behind (it used to raise the
  same RuntimeError, which a stopping server logged as a traceback: issue 31, case 8).

A replica of a server that began a graceful stop and is handed a follower role outside
the ISR (its handoff made another replica leader and took it out) does not fetch: caught
up, it would be added back to the ISR it just left, after the server planned its ISR
exits, and hold the new leader's HW back until the lag bound (seen in
tests/cluster/test_stop_after_kill.py before the fix). One still in the ISR fetches on.

A follower that becomes leader (a failover) does not wait for its fetcher's task to end:
the fetcher is stopped (it writes nothing more) and the new role starts at once. Here the
fetcher is held in its silent-leader report, shielded as the controller's batch sender is
while it delivers a batch: the old code waited for that task (at a failover, the
cancellation of a thousand fetchers delivered on a busy loop cost 0.7-1.8 s).

The control plane is a stand-in that refuses every ISR change (nothing here proposes one).
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import anyio
import attrs
import nats as nats_py
import pytest

from jetsdk.codec.record import encode_body
from jetserver.broker.acks import AckRouter
from jetserver.broker.partition import PartitionReplica
from jetserver.broker.running import new_replica
from jetserver.broker.services import ReplicaServices
from jetserver.broker.stream_files import OpenJobs, open_partition_logs
from jetserver.metadata.model import MetadataState, PartitionAssignment, StreamSpec
from jetserver.metadata.ops import CreateStream, apply
from jetserver.natslink.link import NatsLink
from jetserver.replication.core import ROLE_FOLLOWER, ROLE_LEADER, ROLE_NONE
from jetserver.testing import in_process_config, nats_flushed, wait_until_async
from support.control_plane import RecordingControl
from support.nats_server import NatsServer

pytestmark = pytest.mark.anyio

ME = "s1"
ADDRESSES = {"s1": "127.0.0.1:1", "s2": "127.0.0.1:2", "s3": "127.0.0.1:3"}
BOUND_S = 10.0
"""Bound on every wait."""
POLL_S = 0.005
NOT_BEFORE_RUN_S = 1.0
"""How long an assignment handed over before ``run`` must stay unapplied (the old code
raised within milliseconds: two worker-thread calls)."""


async def replica_over_a_real_log(
    tmp_path: Path,
    link: NatsLink,
    replicas: tuple[str, ...] = ("s1", "s2", "s3"),
    control: RecordingControl | None = None,
) -> tuple[PartitionReplica, MetadataState]:
    """orders/0, RF 3, led by the first of ``replicas`` at epoch 0 (by default s1, this
    server); this server's replica, not started."""
    config = in_process_config("nats://127.0.0.1:1", tmp_path / "data", server__id=ME)
    spec = StreamSpec(name="orders", subject="orders", partitions=1, replication_factor=3)
    state, result = apply(MetadataState(), CreateStream(spec, "id1", 5, (replicas,)))
    assert result.ok
    meta = state.streams["orders"]
    a = meta.partitions[0]
    job = OpenJobs(tmp_path / "data", config).job(meta, a)
    (opened,) = await anyio.to_thread.run_sync(open_partition_logs, [job])
    assert not isinstance(opened, Exception), opened
    log_, producers = opened
    replica = new_replica(
        meta,
        a,
        log_,
        producers,
        config=config,
        services=ReplicaServices(
            link=link,
            acks=AckRouter(link),
            server_id=ME,
            controller=control or RecordingControl(ME),
            replication=config.replication,
        ),
    )
    return replica, state


async def hand_over(
    replica: PartitionReplica,
    a: PartitionAssignment,
    outcome: list[object],
    done: anyio.Event,
    label: str,
) -> None:
    """Apply ``a`` to ``replica``; then ``label`` (or what it raised) goes to ``outcome``
    and ``done`` is set."""
    try:
        await replica.apply_assignment(a, ADDRESSES)
        outcome.append(label)
    except Exception as exc:  # what the old code raised
        outcome.append(exc)
    done.set()


async def test_an_assignment_before_run_waits_for_run_then_leads(
    link: NatsLink, tmp_path: Path
) -> None:
    replica, state = await replica_over_a_real_log(tmp_path, link)
    a = state.streams["orders"].partitions[0]
    outcome: list[object] = []
    applied = anyio.Event()

    async with anyio.create_task_group() as tg:
        tg.start_soon(hand_over, replica, a, outcome, applied, "applied")
        with anyio.move_on_after(NOT_BEFORE_RUN_S):
            await applied.wait()
        assert outcome == [], "an assignment before run() must wait for run()"
        assert replica.role == ROLE_NONE
        await tg.start(replica.run)
        with anyio.fail_after(BOUND_S):
            await applied.wait()
        assert outcome == ["applied"]
        assert replica.role == ROLE_LEADER
        assert replica.leader_epoch == a.leader_epoch
        replica.stop()
        with anyio.fail_after(BOUND_S):
            await replica.wait_stopped()


async def test_an_assignment_that_meets_the_stop_is_dropped_without_a_traceback(
    link: NatsLink, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="jetserver.broker.roles")
    replica, state = await replica_over_a_real_log(tmp_path, link)
    a = state.streams["orders"].partitions[0]
    outcome: list[object] = []
    returned = anyio.Event()
    threads = anyio.to_thread.current_default_thread_limiter()

    # A log with a record: the new leader rebuilds its producer table from the log's
    # tail in a worker thread (its epoch goes to the epoch cache on the event loop,
    # written without fsync). Every worker thread is held, so the stop lands while the
    # new leader waits for one.
    replica.log.append([encode_body(b"v")], 1, 0)
    holders = [object() for _ in range(int(threads.total_tokens))]
    async with anyio.create_task_group() as tg:
        await tg.start(replica.run)
        for holder in holders:
            await threads.acquire_on_behalf_of(holder)
        try:
            tg.start_soon(hand_over, replica, a, outcome, returned, "returned")
            await wait_until_async(
                lambda: threads.statistics().tasks_waiting > 0,
                BOUND_S,
                "the new leader waits for a worker thread",
                interval_s=POLL_S,
            )
            replica.stop()
            await wait_until_async(
                lambda: replica.life.tg is None,
                BOUND_S,
                "run() has ended (its log is closing)",
                interval_s=POLL_S,
            )
        finally:
            for holder in holders:
                threads.release_on_behalf_of(holder)
        with anyio.fail_after(BOUND_S):
            await returned.wait()
            await replica.wait_stopped()
    assert outcome == ["returned"], outcome
    assert replica.role == ROLE_NONE
    assert replica.roles.subscription is None  # nothing subscribed after the stop
    assert replica.roles.role_scope is None  # no role task started
    assert any(
        "assignment not applied: the partition is stopping" in r.getMessage()
        for r in caplog.records
    )


async def test_a_stopping_server_outside_the_isr_follows_without_fetching(
    link: NatsLink, tmp_path: Path
) -> None:
    control = RecordingControl(ME)
    replica, state = await replica_over_a_real_log(
        tmp_path, link, replicas=("s2", "s1", "s3"), control=control
    )
    a = state.streams["orders"].partitions[0]
    assert a.leader == "s2"
    handed_off = attrs.evolve(a, isr=("s2", "s3"))  # as the handoff's ElectLeader leaves it
    async with anyio.create_task_group() as tg:
        await tg.start(replica.run)
        control.stopping = True  # SIGTERM: the graceful stop began
        with anyio.fail_after(BOUND_S):
            await replica.apply_assignment(handed_off, ADDRESSES)
        assert replica.fetcher is None
        assert replica.role == ROLE_NONE
        assert replica.assignment == handed_off
        # Still in the ISR: it fetches on (the leader's HW counts it) until it leaves.
        with anyio.fail_after(BOUND_S):
            await replica.apply_assignment(a, ADDRESSES)
        assert replica.fetcher is not None
        assert replica.role == ROLE_FOLLOWER
        replica.stop()
        with anyio.fail_after(BOUND_S):
            await replica.wait_stopped()


async def test_the_parts_of_a_replica_print_short(link: NatsLink, tmp_path: Path) -> None:
    """A failed assertion about a replica or one of its parts prints it: a generated repr
    followed every reference (the parts, the stream manager's callbacks) through the
    whole server and took minutes."""
    replica, _state = await replica_over_a_real_log(tmp_path, link)
    parts = [
        replica,
        replica.committer,
        replica.sequencer,
        replica.intake,
        replica.news,
        replica.roles,
    ]
    names = [repr(p) for p in parts]
    assert names == [f"{type(p).__name__}({replica.stream}/{replica.partition})" for p in parts]
    await anyio.to_thread.run_sync(replica.log.close)


class HeldReportControl(RecordingControl):
    """The leader's server is down and gone; a silent-leader report is held (shielded, as
    the controller's batch sender while it delivers a batch) until :attr:`release`."""

    def __init__(self) -> None:
        super().__init__(ME)
        self.reporting = anyio.Event()
        self.release = anyio.Event()
        self.held = 0

    def server_down(self, server_id: str) -> bool:
        return True

    def server_gone(self, server_id: str) -> bool:
        return True

    def server_down_event(self, server_id: str) -> anyio.Event:
        down = anyio.Event()
        down.set()
        return down

    async def report_leader_silent(
        self, stream: str, partition: int, leader_epoch: int, reporter: str
    ) -> None:
        self.held += 1
        self.reporting.set()
        with anyio.CancelScope(shield=True), anyio.move_on_after(3 * BOUND_S):
            await self.release.wait()


async def test_a_follower_leads_without_waiting_for_its_fetchers_task_to_end(
    link: NatsLink, tmp_path: Path
) -> None:
    control = HeldReportControl()
    replica, state = await replica_over_a_real_log(
        tmp_path, link, replicas=("s2", "s1", "s3"), control=control
    )
    a = state.streams["orders"].partitions[0]
    assert a.leader == "s2"
    async with anyio.create_task_group() as tg:
        await tg.start(replica.run)
        with anyio.fail_after(BOUND_S):
            await replica.apply_assignment(a, ADDRESSES)
            await control.reporting.wait()  # the fetcher is held in its report
        fetcher = replica.fetcher
        assert fetcher is not None
        elected = attrs.evolve(a, leader=ME, leader_epoch=a.leader_epoch + 1)
        try:
            with anyio.fail_after(BOUND_S / 2):  # the report is held for 3 x BOUND_S
                await replica.apply_assignment(elected, ADDRESSES)
            assert replica.role == ROLE_LEADER
            assert replica.leader_epoch == elected.leader_epoch
            assert fetcher.stopped
            assert replica.fetcher is None
        finally:
            control.release.set()
        assert control.held == 1  # the stopped fetcher reports nothing more
        replica.stop()
        with anyio.fail_after(BOUND_S):
            await replica.wait_stopped()


async def test_a_failover_leader_serves_before_nats_confirms_its_subscription(
    link: NatsLink, nats_server: NatsServer, tmp_path: Path
) -> None:
    """A follower elected in a later epoch takes its role as soon as its SUB is sent: the
    NATS server is paused (SIGSTOP), so no PING round trip can confirm it, and the role is
    applied anyway (the old code waited for the confirmation, up to 5 s). The role's task
    confirms it once the server answers again; a message published then reaches it."""
    replica, state = await replica_over_a_real_log(tmp_path, link, replicas=("s2", "s1", "s3"))
    a = state.streams["orders"].partitions[0]
    async with anyio.create_task_group() as tg:
        await tg.start(replica.run)
        with anyio.fail_after(BOUND_S):
            await replica.apply_assignment(a, ADDRESSES)  # follows s2 (epoch 0)
        elected = attrs.evolve(a, leader=ME, leader_epoch=a.leader_epoch + 1)
        nats_server.pause()
        try:
            started = anyio.current_time()
            with anyio.fail_after(BOUND_S):  # the confirmation's round is shielded
                await replica.apply_assignment(elected, ADDRESSES)
            assert anyio.current_time() - started < 1.0  # not the 5 s bound of a confirmation
            assert replica.role == ROLE_LEADER
            assert replica.roles.subscription is not None
        finally:
            nats_server.resume()
        publisher = await nats_py.connect(nats_server.url)
        try:
            await publisher.publish(replica.subject, b"after the failover")
            await nats_flushed(publisher)
        finally:
            await publisher.close()
        await wait_until_async(
            lambda: replica.log.log_end_offset == 1, BOUND_S, "the message appended"
        )
        replica.stop()
        with anyio.fail_after(BOUND_S):
            await replica.wait_stopped()


async def test_a_failover_leader_runs_no_isr_task_of_its_own(
    link: NatsLink, tmp_path: Path
) -> None:
    """Issue 34: a new leader's ISR is checked by the server's one sweep
    (``broker.isr_sweep``), not by a task of its own: once its subscription is confirmed,
    the replica runs no role task (its flusher, as any leader's, aside). The old code kept an
    ISR loop task per leader (a survivor of a kill -9 at 10,000 partitions: 1,700 tasks
    waking every 0.25 s while their proposals were pending)."""

    def role_tasks() -> list[asyncio.Task[object]]:
        return [t for t in asyncio.all_tasks() if "_start_role_task" in task_name(t)]

    replica, state = await replica_over_a_real_log(tmp_path, link, replicas=("s2", "s1", "s3"))
    a = state.streams["orders"].partitions[0]
    async with anyio.create_task_group() as tg:
        await tg.start(replica.run)
        elected = attrs.evolve(a, leader=ME, leader_epoch=a.leader_epoch + 1)
        with anyio.fail_after(BOUND_S):
            await replica.apply_assignment(elected, ADDRESSES)
        assert replica.role == ROLE_LEADER
        await wait_until_async(
            lambda: not role_tasks(),
            BOUND_S / 2,
            "the role's tasks ended (the subscription confirmed)",
            interval_s=POLL_S,
        )
        assert len(replica.roles.services.isr_sweep) == 1  # its ISR is the sweep's
        replica.stop()
        with anyio.fail_after(BOUND_S):
            await replica.wait_stopped()
        assert len(replica.roles.services.isr_sweep) == 0


def task_name(task: asyncio.Task[object]) -> str:
    coro = task.get_coro()
    return str(getattr(coro, "__qualname__", ""))
