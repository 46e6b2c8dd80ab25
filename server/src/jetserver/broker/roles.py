"""The role driver of a partition replica: leader, follower, none (spec/cluster.md).

:class:`RoleDriver` drives the replica's :class:`~jetserver.replication.core.ReplicaCore`
for assignments (:meth:`RoleDriver.apply_assignment`), runs the role's tasks (the leader's
ISR proposals, the follower's :class:`~jetserver.replication.fetcher.FollowerFetcher`),
holds the NATS subscription of a leader, and moves the HW for a leader's replica fetches
(:meth:`RoleDriver.replica_fetched`). It changes the sequencer only through its narrow
calls (the epoch stamped on records, dropping what is queued) and the HW only through the
committer.

- Becoming **leader** (a new epoch): stop the previous role, record the epoch's start
  offset in the epoch cache, rebuild the idempotent-producer table from the log tail, start
  a :class:`~jetserver.replication.LeaderState`, have the server's ISR sweep
  (``broker.isr_sweep``) check its ISR, subscribe
  to NATS. In the same epoch, a new assignment only brings a new ISR.
- **At open** (a replicated partition after an unclean shutdown): CRC-check the whole log
  and truncate at the first damaged record, before the partition is visible; a replica
  that lost data this way, or whose recovery found damage, does not lead while another
  ISR member can, and does not report its leader silent until it caught up once.
- Becoming **follower**: unsubscribe, drop queued messages, fail pending ALL acks with
  NOT_LEADER (the message may or may not be committed: idempotent producers retry safely),
  and run a fetcher for the new leader and epoch.
- **none**: neither (not a replica any more).

Task safety: event loop only; role changes are serialized by a lock; the role's tasks run
in the partition's task group under a cancel scope. The next role change cancels a leader's
task and waits for its end before it acts; a follower's fetcher it stops
(:meth:`FollowerFetcher.stop`: the fetcher writes nothing more and ends by itself) and waits
only for a log write in progress.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

import anyio
import attrs

from jetsdk.codec.errors import CodecError
from jetserver.broker.acks import PendingAck
from jetserver.broker.commit import Committer
from jetserver.broker.ingest_side import Intake
from jetserver.broker.nats_port import (
    SUBSCRIBE_CONFIRM_TIMEOUT_S,
    NatsSubscription,
    NatsUnavailable,
)
from jetserver.broker.replica_base import ReplicaBase
from jetserver.broker.sequencer import Sequencer
from jetserver.broker.services import ReplicaServices
from jetserver.broker.stream_files import tail_records
from jetserver.metadata.model import (
    DEFAULT_DUPLICATE_WINDOW_S,
    DURABILITY_FLUSHED,
    PartitionAssignment,
    StreamSpec,
)
from jetserver.metadata.reserved import is_internal
from jetserver.replication import LeaderPolicy, LeaderState, ReplicationConfig
from jetserver.replication.control import (
    IsrChange,
    hand_over_of,
    leave_isr_of,
    server_down_event_of,
    server_down_of,
    server_heard_of,
    server_stopping_of,
    server_up_event_of,
)
from jetserver.replication.core import (
    ROLE_FOLLOWER,
    ROLE_NONE,
    Plan,
    ReplicaCore,
)
from jetserver.replication.fetcher import FollowerFetcher
from jetserver.replication.ids import replica_index
from jetserver.replication.producers import REBUILD_RECORDS, ProducerTable
from jetserver.replication.scrub import checkpointed_hw, scrub_and_truncate
from jetserver.security.peer import peer_security_of
from jetserver.storage import Log, StorageError
from jetserver.storage.epoch_writes import EPOCH_WRITES

log = logging.getLogger(__name__)

__all__ = ["RoleDriver", "new_core"]


def _rebuild_producers(log_: Log) -> ProducerTable | Exception:
    """In a worker thread: the idempotent-producer table from the log's tail (or why not)."""
    table = ProducerTable()
    try:
        table.rebuild(tail_records(log_, REBUILD_RECORDS))
    except (StorageError, CodecError) as exc:
        return exc
    return table


def new_core(
    log_: Log,
    *,
    server_id: str,
    clustered: bool,
    spec: StreamSpec | None,
    replication: ReplicationConfig,
    producers: ProducerTable,
) -> ReplicaCore[PendingAck]:
    """The core of a replica over ``log_``, with the damage its recovery reported."""
    report = log_.recovery
    return ReplicaCore(
        me=server_id,
        clustered=clustered,
        policy=LeaderPolicy(
            durability=spec.durability if spec is not None else DURABILITY_FLUSHED,
            min_isr=spec.min_isr if spec is not None else 1,
            lag_max_s=replication.replica_lag_max_s,
            hw_news_delay_s=replication.hw_news_delay_s,
        ),
        duplicate_window_s=(
            spec.duplicate_window_s if spec is not None else DEFAULT_DUPLICATE_WINDOW_S
        ),
        producers=producers,
        damaged=not report.ok,
        found_damage=bool(report.corrupt_files or report.unreadable_ranges),
    )


@attrs.define(eq=False, repr=False)
class RoleDriver:
    """The role of one partition replica (module docstring)."""

    base: ReplicaBase
    """The replica's name, log, core and lifecycle (read only here)."""
    subject: str
    """The NATS subject a leader subscribes to."""
    committer: Committer
    """Carries out the core's outcomes (HW, ALL acks); flushes."""
    sequencer: Sequencer
    """Takes the epoch to stamp; drops its queue when a role ends."""
    intake: Intake
    """The leader's NATS subscription feeds it."""
    owner: object
    """The replica that owns the NATS ingest subscription (the NATS port's echo checks)."""
    services: ReplicaServices
    """The server's NATS link (the leader's subscription), id, control plane (ISR changes,
    silent leaders; None on a server alone), replication timings, fetch sessions and fsync
    runner (a follower's)."""
    queue_group: str
    """NATS queue group of the subscription."""
    replication_factor: int
    """Replicas of the partition."""
    _fetcher: FollowerFetcher | None = None
    _sub: NatsSubscription | None = None
    _role_scope: anyio.CancelScope | None = None
    _role_done: anyio.Event | None = None
    _role_lock_: anyio.Lock | None = None
    _isr_asked: LeaderState | None = None
    """The leader state whose ISR change the sweep is proposing."""
    _committed_floor: int = 0
    _scrubbed: bool = False
    """The log was CRC-checked (or needs no check) since this process opened it."""

    def __repr__(self) -> str:
        return self.base.part_repr(self)

    def __attrs_post_init__(self) -> None:
        self._committed_floor = max(self.base.log.high_watermark, checkpointed_hw(self.base.log))

    @property
    def fetcher(self) -> FollowerFetcher | None:
        """The fetch loop while following (None otherwise)."""
        return self._fetcher

    @property
    def subscription(self) -> NatsSubscription | None:
        """The leader's NATS subscription (None: not subscribed)."""
        return self._sub

    @property
    def role_scope(self) -> anyio.CancelScope | None:
        """The cancel scope of the role's task (None: none runs)."""
        return self._role_scope

    def wake_isr(self) -> None:
        """Have the ISR check look again now (a follower's fetch may have changed it)."""
        self.services.isr_sweep.wake(self, anyio.current_time())

    async def scrub_at_open(self) -> None:
        """A replicated partition opened after an unclean shutdown (or after any, with
        ``replication.scrub_on_clean_start``): CRC-check the whole log and truncate at the
        first damaged record (see :mod:`~jetserver.replication.scrub`).

        Bit rot in a sealed segment can happen while the server is down after a clean stop
        too; finding it costs one CRC pass over the partition's files. Runs before the
        partition is visible (``run`` calls it before reporting started), so its HW never
        appears to move back.
        """
        log_, services = self.base.log, self.services
        if (
            self._scrubbed
            or services.controller is None
            or self.replication_factor <= 1
            or log_.recovery.fresh  # a new partition: nothing to check
            or (log_.recovery.clean_shutdown and not services.replication.scrub_on_clean_start)
        ):
            return
        self._scrubbed = True
        if await scrub_and_truncate(log_, self.base.stream, self.base.partition):
            self.base.core.damaged = True
            self.base.core.found_damage = True

    async def apply_assignment(
        self, assignment: PartitionAssignment, addresses: Mapping[str, str]
    ) -> None:
        """Take the role ``assignment`` gives this server (idempotent; call in order).

        Leader (``assignment.leader`` is this server): in a new epoch, record the epoch's
        start offset in the epoch cache, rebuild the idempotent-producer table, start
        tracking followers and subscribe to NATS; in the same epoch, adopt the new ISR.
        Follower: unsubscribe, fail pending ALL acks (NOT_LEADER), and start fetching from
        the leader at ``addresses[leader]`` after reconciling by leader epoch. Not a
        replica: neither. What to do is the core's decision (:meth:`ReplicaCore.assign`).

        Args:
            assignment: the partition's current assignment from the metadata.
            addresses: server id -> client ``host:port`` of the replicas.

        Ordered with :meth:`run` (spec/cluster.md, "Replica reconciliation"): waits for it
        to start; dropped (DEBUG) once the replica stops, even while the role is prepared.

        Raises:
            StorageError: the epoch cache or the log could not be written (the caller
                retries).
        """
        async with self._role_lock():
            if not (await self._wait_for_run() and await self._take(assignment, addresses)):
                log.debug(
                    "assignment not applied: the partition is stopping",
                    extra=self.base.fields(
                        leader=assignment.leader, leader_epoch=assignment.leader_epoch
                    ),
                )

    async def _take(self, assignment: PartitionAssignment, addresses: Mapping[str, str]) -> bool:
        """Under the role lock; False if a stop came before the role was taken (none)."""
        core = self.base.core
        address = addresses.get(assignment.leader or "", "")
        plan = core.assign(assignment, address)
        if plan is Plan.KEEP:
            return True
        if plan is Plan.ADOPT_ISR:
            await self.committer.carry_out(core.adopt_isr(assignment, self.base.log.high_watermark))
            self.wake_isr()  # new members: the ISR check's next time may be sooner
            return True
        if plan is Plan.LEAD:
            if not await self._become_leader(assignment):
                return False
        elif plan is Plan.STEP_ASIDE:
            await self._end_role(ROLE_NONE)
            # Leading with records missing would make the followers truncate to this
            # log. Step aside and hand the leadership to another ISR member; this replica
            # then follows it and fetches what it lost.
            log.warning(
                "not leading: recovery found damaged records; handing over to another ISR member",
                extra=self.base.fields(
                    leader_epoch=assignment.leader_epoch, isr=",".join(assignment.isr)
                ),
            )
            hand, tg = hand_over_of(self.services.controller), self.base.life.tg
            if hand is not None and tg is not None:
                tg.start_soon(hand, self.base.stream, self.base.partition, assignment.leader_epoch)
            return True
        elif plan is Plan.FENCED:
            await self._end_role(ROLE_NONE)  # the renewal (renew_leadership) goes on
            return True
        elif plan is Plan.FOLLOW:
            if not await self._become_follower(assignment, address):
                return False
        else:
            await self._end_role(ROLE_NONE)
        if log.isEnabledFor(logging.DEBUG):  # one INFO line per burst: RoleSummary
            log.debug(
                "assignment applied",
                extra=self.base.fields(
                    role=core.role,
                    leader=assignment.leader,
                    leader_epoch=assignment.leader_epoch,
                    isr=",".join(assignment.isr),
                    leo=self.base.log.log_end_offset,
                    hw=self.base.log.high_watermark,
                ),
            )
        return True

    async def _wait_for_run(self) -> bool:
        """True once :meth:`run` started; False if a stop (or the end of ``run``) came first."""
        if not self.base.life.run_started.is_set():
            await self.base.life.run_started.wait()
        return self._roles_open()

    def _roles_open(self) -> bool:
        """True while role tasks may start: :meth:`run` runs and no stop was asked."""
        return self.base.life.open

    def _role_lock(self) -> anyio.Lock:
        if self._role_lock_ is None:  # created on first use: idle partitions hold none
            # Taken without a loop turn when free (as elections' report lock): each of a
            # failover's thousand role changes waited a whole pass of the busy loop here.
            self._role_lock_ = anyio.Lock(fast_acquire=True)
        return self._role_lock_

    def renew_leadership(self, epoch: int) -> None:
        """This replica gave up leading ``epoch`` after a failed fsync whose cut took back
        records its followers were sent (:meth:`ReplicaCore.cut`): end the role's tasks and
        ask the metadata, until it answers with a later epoch, to renew the leadership
        (ReportLeader from the leader itself). Followers reconcile with the new epoch and
        truncate what the cut took back."""
        if self.base.life.tg is not None:
            self.base.life.tg.start_soon(self._renew, epoch)

    async def _renew(self, epoch: int) -> None:
        log.warning(
            "fsync failed after followers were sent records the cut took back: this leader "
            "gave up its epoch and asks for a new one",
            extra=self.base.fields(leader_epoch=epoch, leo=self.base.log.log_end_offset),
        )
        async with self._role_lock():
            if self.base.core.fenced_epoch == epoch and self.base.core.role == ROLE_NONE:
                await self._end_role(ROLE_NONE)  # unsubscribe, stop the ISR task
        failures = 0
        me, controller = self.services.server_id, self.services.controller
        while controller is not None and not self.base.life.ending:
            a = self.base.core.assignment
            if a is None or a.leader_epoch > epoch or a.leader != me:
                return  # renewed (or moved): apply_assignment takes it from here
            await controller.report_leader_silent(self.base.stream, self.base.partition, epoch, me)
            failures += 1
            await anyio.sleep(self.services.replication.backoff_s(failures))

    async def _end_role(self, next_role: str) -> None:
        """Stop the current role's tasks, ingest and pending acks; switch to ``next_role``."""
        out = self.base.core.end_role(next_role)
        self.leave_isr_sweep()
        fetcher = self._fetcher
        if fetcher is not None:
            fetcher.stop()  # from here it writes nothing (a write in progress ends first)
        await self.unsubscribe()
        self.sequencer.drop_queued()
        # A large write in a worker thread ends first: it holds the ended epoch (the next
        # role assigns a new one at the LEO, or truncates).
        await self.sequencer.large.done()
        scope, done = self._role_scope, self._role_done
        self._role_scope = self._role_done = None
        if fetcher is not None and fetcher.ends_when_stopped:
            # It ends by itself (stopped, its waiting fetch dropped). Cancelling it and
            # waiting for its end kept a failover's new leaders waiting 0.7-1.8 s: anyio
            # delivers a cancellation again on every loop pass until the task ends.
            await fetcher.writes_done()
        else:
            if scope is not None:
                scope.cancel()
            if done is not None:
                await done.wait()
        self._fetcher = None
        await self.committer.carry_out(out)
        self.committer.waits.role_ended()

    def _start_role_task(self, fn: Callable[[], Any]) -> None:
        """Run ``fn`` until the role ends (cancelled by :meth:`_end_role`); only while
        :meth:`_roles_open` (its callers check that after their last await)."""
        assert self.base.life.tg is not None
        scope = anyio.CancelScope()
        done = anyio.Event()
        self._role_scope, self._role_done = scope, done

        async def runner() -> None:
            try:
                with scope:
                    await fn()
            except Exception:
                log.exception("replication task failed", extra=self.base.fields())
            finally:
                done.set()

        self.base.life.tg.start_soon(runner)

    async def _become_leader(self, a: PartitionAssignment) -> bool:
        """Lead ``a.leader_epoch``; False if a stop began meanwhile (in the thread call)."""
        await self._end_role(ROLE_NONE)
        log_ = self.base.log
        # The epoch's start in the epoch cache: in memory here, its file (written without
        # fsync, spec/storage.md §5) by a worker thread that nobody waits for. On the loop,
        # those writes were the largest part of a failover's role changes (epoch_writes);
        # a worker-thread call each, awaited, made the new leaders wait for one another
        # (2,000 partitions: 667 of them waited 0.63 s on average for calls of 0.3 ms).
        log_.epochs.assign(a.leader_epoch, log_.log_end_offset, deferred=EPOCH_WRITES.add)
        table: ProducerTable | None = ProducerTable()
        if log_.log_end_offset > log_.log_start_offset:  # an empty log has none to read
            rebuilt = await anyio.to_thread.run_sync(_rebuild_producers, log_)
            if isinstance(rebuilt, Exception):
                log.warning(
                    "cannot rebuild idempotent producer state",
                    extra=self.base.fields(error=str(rebuilt)),
                )
                table = None
            else:
                table = rebuilt
        self.sequencer.leader_epoch = a.leader_epoch
        out = self.base.core.lead(
            a,
            leo=log_.log_end_offset,
            flushed=log_.flushed_offset,
            hw=log_.high_watermark,
            now=anyio.current_time(),
            producers=table,
        )
        await self.committer.carry_out(out)
        if not self._roles_open():  # a stop came during the worker-thread call above
            await self._end_role(ROLE_NONE)
            return False
        self.committer.request_flush()  # flush whatever a previous role left unflushed
        self._join_isr_sweep()
        if a.leader_epoch == 0:  # its stream's creation: CreateStream answers once it leads
            await self._subscribe(confirm=True)
        else:
            # A failover, handoff or rebalance: serve as soon as the SUB is sent, and
            # confirm it (a PING round trip) in the role's task. Waiting for the
            # confirmation was most of a failover's role changes: at 10,000 partitions a
            # survivor's 2,000 new leaders waited 2.2 s each on average for round trips of
            # its busy loop (2.6 s for one). Produce and fetch requests do not need the
            # subscription; a NATS publish reaches it once the server has the SUB.
            await self._subscribe(confirm=False)
            if self._roles_open() and self._sub is not None:  # else no task to start
                self._start_role_task(self._confirm_subscription)
        if self.base.life.tg is None:  # run ended while subscribing: its end unsubscribed before
            await self.unsubscribe()
        return True

    async def _become_follower(self, a: PartitionAssignment, address: str) -> bool:
        """Follow ``a.leader`` (on a stopping server, outside the ISR: without fetching, see
        ``server_stopping_of``); False if this replica began stopping meanwhile."""
        await self._end_role(ROLE_FOLLOWER)
        services = self.services
        me, controller = services.server_id, services.controller
        rejoin = server_stopping_of(controller) and me not in a.isr
        if not self._roles_open() or rejoin:
            await self._end_role(ROLE_NONE)
            return self._roles_open()
        core = self.base.core
        core.follow(a, address)
        leave, tg = leave_isr_of(controller), self.base.life.tg
        if core.damaged and leave is not None and tg is not None and me in a.isr and len(a.isr) > 1:
            # An ISR member may be elected without its reports (jetserver.cluster.takeover).
            log.warning("leaving the ISR: the log was found damaged", extra=self.base.fields())
            tg.start_soon(leave, self.base.stream, self.base.partition)
        sessions = services.fetch_sessions
        session = sessions.acquire(address) if sessions is not None and address else None
        fetcher = FollowerFetcher(
            stream=self.base.stream,
            partition=self.base.partition,
            server_id=me,
            replica_id=replica_index(a.replicas, me),
            leader=a.leader,
            leader_address=address,
            leader_epoch=a.leader_epoch,
            log=self.base.log,
            durability=self.base.core.policy.durability,
            config=services.replication,
            on_hw=self._follower_hw,
            request_flush=self.committer.request_flush,
            controller=controller,
            committed_floor=self._committed_floor,
            damaged=core.damaged,
            on_whole=core.caught_up,
            security=peer_security_of(controller),
            server_heard=server_heard_of(controller),
            server_down=server_down_of(controller),
            server_down_event=server_down_event_of(controller),
            server_up_event=server_up_event_of(controller),
            session=session,
            fsyncs=services.fsyncs,
        )
        self._fetcher = fetcher
        self.sequencer.leader_epoch = a.leader_epoch

        async def run_fetcher() -> None:
            try:
                await fetcher.run()
            finally:
                if sessions is not None and session is not None:
                    sessions.release(session)

        self._start_role_task(run_fetcher)
        return True

    async def _follower_hw(self, hw: int) -> None:
        if hw > self.base.log.high_watermark:
            self.base.log.set_high_watermark(hw)
            self.committer.waits.wake()

    async def _subscribe(self, *, confirm: bool) -> None:
        """Subscribe to the partition's subject; with ``confirm``, wait until the NATS
        server has the subscription (:meth:`_confirm_subscription`)."""
        if self._sub is not None or is_internal(self.base.stream):
            return  # an internal stream takes no NATS messages (spec/security.md §2)
        self._sub = await self.services.link.subscribe(
            self.subject,
            self.intake.on_message,
            queue=self.queue_group,
            sink=self.intake.accept,
            skip=self.intake.skip_copies,
            ingest_owner=self.owner,
        )
        if confirm:
            await self._confirm_subscription()

    async def _confirm_subscription(self) -> None:
        """A PING round trip on the ingest connection (shared with the other new leaders
        waiting at the same time): the NATS server has every SUB sent before it."""
        try:
            await self.services.link.flush(SUBSCRIBE_CONFIRM_TIMEOUT_S, ingest=True)
        except NatsUnavailable as exc:
            # nats-py replays the subscription once the link is back. One line per
            # interval: the new leaders waiting on the same round trip fail together.
            error = str(exc)
            self.services.unconfirmed.event(
                "NatsUnavailable", lambda: self.base.fields(error=error)
            )

    async def unsubscribe(self) -> None:
        sub, self._sub = self._sub, None
        if sub is not None:
            await sub.unsubscribe()

    def _join_isr_sweep(self) -> None:
        """A leader with a control plane: its ISR is checked by the server's sweep."""
        if self.services.controller is None:
            return  # a server alone: no ISR changes
        now = anyio.current_time()
        interval = self.services.replication.isr_check_interval_s
        self.services.isr_sweep.add(self, now, self.base.core.isr_check_wait_s(now, interval))

    def leave_isr_sweep(self) -> None:
        """No more ISR checks (the role ends, or the replica stops): an answer in flight is
        dropped."""
        self.services.isr_sweep.remove(self)
        self._isr_asked = None

    def isr_check(self, now: float) -> IsrChange | float | None:
        """The sweep's look at this leader: the ISR change to propose (lagging followers
        out, caught-up ones in), else the seconds until the next look; None: not leading."""
        core = self.base.core
        state = core.leader_state
        if state is None:
            return None
        wanted = core.isr_proposal(now)
        if wanted is None:
            return core.isr_check_wait_s(now, self.services.replication.isr_check_interval_s)
        proposal, base = wanted
        log.debug(  # the controller logs the batch's changes (one line for many)
            "proposing an ISR change",
            extra=self.base.fields(isr=",".join(state.isr), proposed=",".join(proposal)),
        )
        self._isr_asked = state
        return IsrChange(self.base.stream, self.base.partition, state.leader_epoch, proposal, base)

    async def isr_answered(self, change: IsrChange, accepted: bool) -> float | None:
        """The outcome of the change :meth:`isr_check` asked for: the seconds until the next
        look, or None if that leadership ended."""
        core, state = self.base.core, self._isr_asked
        if state is None or core.leader_state is not state:
            return None
        self._isr_asked = None
        hw = self.base.log.high_watermark
        await self.committer.carry_out(core.proposal_done(state, change.isr, accepted, hw=hw))
        interval = self.services.replication.isr_check_interval_s
        return core.isr_check_wait_s(anyio.current_time(), interval)

    async def replica_fetched(
        self, follower: str, offset: int, flushed: int, poll_s: float = 0.0
    ) -> None:
        """Leader: a replica fetch from ``follower`` at ``offset`` reporting ``flushed``,
        parked for up to ``poll_s`` if it has no records to send."""
        out = self.base.core.replica_fetched(
            follower,
            offset,
            flushed,
            self.committer.now(),
            hw=self.base.log.high_watermark,
            poll_s=poll_s,
        )
        if out.wake_isr:
            self.wake_isr()
        await self.committer.carry_out(out)
