"""Replication roles of a partition replica: leader, follower, none (spec/cluster.md).

:class:`ReplicaRoles` is mixed into :class:`~jetserver.broker.partition.PartitionReplica`
(which holds the fields declared here); it implements
:meth:`~ReplicaRoles.apply_assignment`, the leader's side of replica fetches and ISR
proposals, and starts the follower's :class:`~jetserver.replication.fetcher.FollowerFetcher`.

- Becoming **leader** (a new epoch): stop the previous role, record the epoch's start
  offset in the epoch cache, rebuild the idempotent-producer table from the log tail, start
  a :class:`~jetserver.replication.LeaderState`, propose ISR changes in a loop, subscribe
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
in the partition's task group under a cancel scope that the next role change cancels (and
waits for) before it acts.
"""

from __future__ import annotations

import collections
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any

import anyio
from anyio.abc import TaskGroup
from nats.aio.msg import Msg

from jetsdk.codec.error_codes import ErrorCode
from jetsdk.codec.errors import CodecError
from jetserver.broker.acks import PendingAck
from jetserver.broker.ingested import Ingested
from jetserver.broker.producers import REBUILD_RECORDS, ProducerTable
from jetserver.broker.stream_files import tail_records
from jetserver.errors import ApiError
from jetserver.fsync_runner import FsyncRunner
from jetserver.lazy_event import LazyEvent
from jetserver.metadata.model import (
    DEFAULT_DUPLICATE_WINDOW_S,
    DURABILITY_FLUSHED,
    PartitionAssignment,
    StreamSpec,
)
from jetserver.metadata.reserved import is_internal
from jetserver.nats_fast import SkipMarked
from jetserver.nats_link import NatsLink, NatsUnavailable, SubscriptionHandle
from jetserver.replication import ControlPlane, LeaderState, ReplicationConfig, replica_at
from jetserver.replication.control import (
    server_down_event_of,
    server_down_of,
    server_heard_of,
    server_stopping_of,
)
from jetserver.replication.core import (
    ROLE_FOLLOWER,
    ROLE_NONE,
    Outcome,
    Plan,
    ReplicaCore,
)
from jetserver.replication.fetcher import FollowerFetcher
from jetserver.replication.ids import replica_index
from jetserver.replication.scrub import checkpointed_hw, scrub_and_truncate
from jetserver.replication.session import FetchSessions
from jetserver.security.peer import peer_security_of
from jetserver.storage import Log, StorageError

log = logging.getLogger(__name__)

SUBSCRIBE_CONFIRM_TIMEOUT_S = 5.0
"""Bound on confirming a new NATS subscription (a PING round trip)."""


class ReplicaRoles:
    """The role half of :class:`~jetserver.broker.partition.PartitionReplica`: the driver
    of its :class:`~jetserver.replication.core.ReplicaCore` for assignments."""

    # Fields and methods of PartitionReplica used here.
    stream: str
    partition: int
    subject: str
    log: Log
    link: NatsLink
    leader_epoch: int
    producers: ProducerTable
    server_id: str
    controller: ControlPlane | None
    queue_group: str
    replication_factor: int
    spec: StreamSpec | None
    replication: ReplicationConfig
    fetch_sessions: FetchSessions | None
    fsyncs: FsyncRunner
    _core: ReplicaCore[PendingAck]
    _closed: bool
    _stopping: bool
    _queue: collections.deque[Ingested]
    _queued_bytes: int
    _space: LazyEvent
    _request_flush: Callable[[], None]
    _fetcher: FollowerFetcher | None
    _sub: SubscriptionHandle | None
    _tg: TaskGroup | None
    _role_scope: anyio.CancelScope | None
    _role_done: anyio.Event | None
    _role_lock_: anyio.Lock | None
    _run_started: LazyEvent
    _replica_news: LazyEvent
    _news_wakers: set[anyio.Event] | None
    _isr_wake: LazyEvent
    _committed_floor: int
    on_message: Callable[[Msg], Awaitable[None]]
    accept: Callable[[str, str, bytes], bool]
    skip_copies: SkipMarked
    wake_waiters: Callable[[], None]
    _fields: Callable[..., dict[str, Any]]

    if TYPE_CHECKING:  # from Committer (broker/commit.py)

        async def _carry_out(self, out: Outcome[PendingAck]) -> None: ...

    _scrubbed: bool = False
    """The log was CRC-checked (or needs no check) since this process opened it."""

    def _init_roles(self) -> None:
        """The core, with the damage recovery reported (called once the fields are set)."""
        log_ = self.log
        report = log_.recovery
        self._core = ReplicaCore(
            me=self.server_id,
            clustered=self.controller is not None,
            durability=self.spec.durability if self.spec is not None else DURABILITY_FLUSHED,
            min_isr=self.spec.min_isr if self.spec is not None else 1,
            lag_max_s=self.replication.replica_lag_max_s,
            duplicate_window_s=(
                self.spec.duplicate_window_s
                if self.spec is not None
                else DEFAULT_DUPLICATE_WINDOW_S
            ),
            producers=self.producers,
            damaged=not report.ok,
            found_damage=bool(report.corrupt_files or report.unreadable_ranges),
        )
        self._committed_floor = max(log_.high_watermark, checkpointed_hw(log_))

    async def _scrub_at_open(self) -> None:
        """A replicated partition opened after an unclean shutdown (or after any, with
        ``replication.scrub_on_clean_start``): CRC-check the whole log and truncate at the
        first damaged record (see :mod:`~jetserver.replication.scrub`).

        Bit rot in a sealed segment can happen while the server is down after a clean stop
        too; finding it costs one CRC pass over the partition's files. Runs before the
        partition is visible (``run`` calls it before reporting started), so its HW never
        appears to move back.
        """
        log_ = self.log
        if (
            self._scrubbed
            or self.controller is None
            or self.replication_factor <= 1
            or (log_.recovery.clean_shutdown and not self.replication.scrub_on_clean_start)
        ):
            return
        self._scrubbed = True
        if await scrub_and_truncate(log_, self.stream, self.partition):
            self._core.damaged = True
            self._core.found_damage = True

    @property
    def role(self) -> str:
        """``single``, ``leader``, ``follower`` or ``none``."""
        return self._core.role

    @property
    def assignment(self) -> PartitionAssignment | None:
        """The last assignment applied (None: none yet, or a server alone)."""
        return self._core.assignment

    @property
    def leader_state(self) -> LeaderState | None:
        """The replication state while leading (None otherwise)."""
        return self._core.leader_state

    @property
    def fetcher(self) -> FollowerFetcher | None:
        """The fetch loop while following (None otherwise)."""
        return self._fetcher

    @property
    def durability(self) -> str:
        """The stream's durability setting."""
        return self._core.durability

    @property
    def min_isr(self) -> int:
        """The stream's minimum ISR for ALL acks."""
        return self._core.min_isr

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
                    extra=self._fields(
                        leader=assignment.leader, leader_epoch=assignment.leader_epoch
                    ),
                )

    async def _take(self, assignment: PartitionAssignment, addresses: Mapping[str, str]) -> bool:
        """Under the role lock; False if a stop came before the role was taken (none)."""
        core = self._core
        address = addresses.get(assignment.leader or "", "")
        plan = core.assign(assignment, address)
        if plan is Plan.KEEP:
            return True
        if plan is Plan.ADOPT_ISR:
            await self._carry_out(core.adopt_isr(assignment, self.log.high_watermark))
            self._isr_wake.set()  # new members: the ISR check's next time may be sooner
            return True
        if plan is Plan.LEAD:
            if not await self._become_leader(assignment):
                return False
        elif plan is Plan.STEP_ASIDE:
            await self._end_role(ROLE_NONE)
            # Leading with records missing would make the followers truncate to this
            # log. Step aside: they report this leader silent and an ISR member takes
            # over; this replica then follows it and fetches what it lost.
            log.warning(
                "not leading: recovery found damaged records; waiting for another ISR "
                "member to take over",
                extra=self._fields(
                    leader_epoch=assignment.leader_epoch, isr=",".join(assignment.isr)
                ),
            )
            return True
        elif plan is Plan.FENCED:
            await self._end_role(ROLE_NONE)  # the renewal (renew_leadership) goes on
            return True
        elif plan is Plan.FOLLOW:
            if not await self._become_follower(assignment, address):
                return False
        else:
            await self._end_role(ROLE_NONE)
        log.info(
            "assignment applied",
            extra=self._fields(
                role=core.role,
                leader=assignment.leader,
                leader_epoch=assignment.leader_epoch,
                isr=",".join(assignment.isr),
                leo=self.log.log_end_offset,
                hw=self.log.high_watermark,
            ),
        )
        return True

    async def _wait_for_run(self) -> bool:
        """True once :meth:`run` started; False if a stop (or the end of ``run``) came first."""
        if not self._run_started.is_set():
            await self._run_started.wait()
        return self._roles_open()

    def _roles_open(self) -> bool:
        """True while role tasks may start: :meth:`run` runs and no stop was asked."""
        return self._tg is not None and not (self._closed or self._stopping)

    @property
    def leading(self) -> bool:
        """True while records may be appended here (leader or single)."""
        return self._core.leading

    def _role_lock(self) -> anyio.Lock:
        if self._role_lock_ is None:  # created on first use: idle partitions hold none
            self._role_lock_ = anyio.Lock()
        return self._role_lock_

    def renew_leadership(self, epoch: int) -> None:
        """This replica gave up leading ``epoch`` after a failed fsync whose cut took back
        records its followers were sent (:meth:`ReplicaCore.cut`): end the role's tasks and
        ask the metadata, until it answers with a later epoch, to renew the leadership
        (ReportLeader from the leader itself). Followers reconcile with the new epoch and
        truncate what the cut took back."""
        if self._tg is not None:
            self._tg.start_soon(self._renew, epoch)

    async def _renew(self, epoch: int) -> None:
        log.warning(
            "fsync failed after followers were sent records the cut took back: this leader "
            "gave up its epoch and asks for a new one",
            extra=self._fields(leader_epoch=epoch, leo=self.log.log_end_offset),
        )
        async with self._role_lock():
            if self._core.fenced_epoch == epoch and self._core.role == ROLE_NONE:
                await self._end_role(ROLE_NONE)  # unsubscribe, stop the ISR task
        failures = 0
        while self.controller is not None and not (self._closed or self._stopping):
            a = self._core.assignment
            if a is None or a.leader_epoch > epoch or a.leader != self.server_id:
                return  # renewed (or moved): apply_assignment takes it from here
            await self.controller.report_leader_silent(
                self.stream, self.partition, epoch, self.server_id
            )
            failures += 1
            await anyio.sleep(self.replication.backoff_s(failures))

    async def _end_role(self, next_role: str) -> None:
        """Stop the current role's tasks, ingest and pending acks; switch to ``next_role``."""
        out = self._core.end_role(next_role)
        await self._unsubscribe()
        self._queue.clear()
        self._queued_bytes = 0
        self._space.set()
        scope, done = self._role_scope, self._role_done
        self._role_scope = self._role_done = None
        if scope is not None:
            scope.cancel()
        if done is not None:
            await done.wait()
        self._fetcher = None
        await self._carry_out(out)
        self.wake_waiters()

    def _start_role_task(self, fn: Callable[[], Any]) -> None:
        """Run ``fn`` until the role ends (cancelled by :meth:`_end_role`); only while
        :meth:`_roles_open` (its callers check that after their last await)."""
        assert self._tg is not None
        scope = anyio.CancelScope()
        done = anyio.Event()
        self._role_scope, self._role_done = scope, done

        async def runner() -> None:
            try:
                with scope:
                    await fn()
            except Exception:
                log.exception("replication task failed", extra=self._fields())
            finally:
                done.set()

        self._tg.start_soon(runner)

    async def _become_leader(self, a: PartitionAssignment) -> bool:
        """Lead ``a.leader_epoch``; False if a stop began meanwhile (in the thread calls)."""
        await self._end_role(ROLE_NONE)
        log_ = self.log
        await anyio.to_thread.run_sync(log_.epochs.assign, a.leader_epoch, log_.log_end_offset)
        rebuilt = ProducerTable()
        table: ProducerTable | None = rebuilt
        try:
            await anyio.to_thread.run_sync(
                lambda: rebuilt.rebuild(tail_records(log_, REBUILD_RECORDS))
            )
        except (StorageError, CodecError) as exc:
            log.warning(
                "cannot rebuild idempotent producer state", extra=self._fields(error=str(exc))
            )
            table = None
        self.leader_epoch = a.leader_epoch
        out = self._core.lead(
            a,
            leo=log_.log_end_offset,
            flushed=log_.flushed_offset,
            hw=log_.high_watermark,
            now=anyio.current_time(),
            producers=table,
        )
        await self._carry_out(out)
        if not self._roles_open():  # a stop came during the worker-thread calls above
            await self._end_role(ROLE_NONE)
            return False
        self._request_flush()  # flush whatever a previous role left unflushed
        self._start_role_task(self._isr_loop)
        await self._subscribe()
        if self._tg is None:  # run ended while subscribing: its end unsubscribed before
            await self._unsubscribe()
        return True

    async def _become_follower(self, a: PartitionAssignment, address: str) -> bool:
        """Follow ``a.leader`` (on a stopping server, outside the ISR: without fetching, see
        ``server_stopping_of``); False if this replica began stopping meanwhile."""
        await self._end_role(ROLE_FOLLOWER)
        rejoin = server_stopping_of(self.controller) and self.server_id not in a.isr
        if not self._roles_open() or rejoin:
            await self._end_role(ROLE_NONE)
            return self._roles_open()
        core = self._core
        core.follow(a, address)
        sessions = self.fetch_sessions
        session = sessions.acquire(address) if sessions is not None and address else None
        fetcher = FollowerFetcher(
            stream=self.stream,
            partition=self.partition,
            server_id=self.server_id,
            replica_id=replica_index(a.replicas, self.server_id),
            leader=a.leader,
            leader_address=address,
            leader_epoch=a.leader_epoch,
            log=self.log,
            durability=self.durability,
            config=self.replication,
            on_hw=self._follower_hw,
            request_flush=self._request_flush,
            controller=self.controller,
            committed_floor=self._committed_floor,
            damaged=core.damaged,
            on_whole=core.caught_up,
            security=peer_security_of(self.controller),
            server_heard=server_heard_of(self.controller),
            server_down=server_down_of(self.controller),
            server_down_event=server_down_event_of(self.controller),
            session=session,
            fsyncs=self.fsyncs,
        )
        self._fetcher = fetcher
        self.leader_epoch = a.leader_epoch

        async def run_fetcher() -> None:
            try:
                await fetcher.run()
            finally:
                if sessions is not None and session is not None:
                    sessions.release(session)

        self._start_role_task(run_fetcher)
        return True

    async def _follower_hw(self, hw: int) -> None:
        if hw > self.log.high_watermark:
            self.log.set_high_watermark(hw)
            self.wake_waiters()

    async def _subscribe(self) -> None:
        if self._sub is not None or is_internal(self.stream):
            return  # an internal stream takes no NATS messages (spec/security.md §2)
        self._sub = await self.link.subscribe(
            self.subject,
            self.on_message,
            queue=self.queue_group,
            sink=self.accept,
            skip=self.skip_copies,
            ingest_owner=self,
        )
        try:
            await self.link.flush(SUBSCRIBE_CONFIRM_TIMEOUT_S, ingest=True)
        except NatsUnavailable as exc:
            # nats-py replays the subscription once the link is back.
            log.warning("cannot confirm the subscription", extra=self._fields(error=str(exc)))

    async def _unsubscribe(self) -> None:
        sub, self._sub = self._sub, None
        if sub is not None:
            await sub.unsubscribe()

    async def _isr_loop(self) -> None:
        """Leader: propose ISR changes (lagging followers out, caught-up ones in)."""
        core = self._core
        interval = self.replication.isr_check_interval_s
        while True:
            with anyio.move_on_after(core.isr_check_wait_s(anyio.current_time(), interval)):
                await self._isr_wake.wait()
            self._isr_wake = LazyEvent()
            state = core.leader_state
            if state is None:
                return
            wanted = core.isr_proposal(anyio.current_time())
            if wanted is None:
                continue
            proposal, base = wanted
            accepted = False
            if self.controller is not None:
                log.info(
                    "proposing an ISR change",
                    extra=self._fields(isr=",".join(state.isr), proposed=",".join(proposal)),
                )
                accepted = await self.controller.propose_isr(
                    self.stream, self.partition, state.leader_epoch, proposal, partition_epoch=base
                )
            if core.leader_state is not state:
                return
            await self._carry_out(
                core.proposal_done(state, proposal, accepted, hw=self.log.high_watermark)
            )
            if not accepted:
                await anyio.sleep(self.replication.isr_check_interval_s)

    # ---------------------------------------------------------------- replica fetches

    def check_leader(self, leader_epoch: int) -> LeaderState:
        """The leader state if this replica leads in ``leader_epoch`` (-1: any epoch).

        Raises:
            ApiError: NOT_LEADER (details ``leader``, ``leader_epoch``).
        """
        state = self._core.leader_state
        if state is None or (leader_epoch >= 0 and leader_epoch != state.leader_epoch):
            a = self._core.assignment
            raise ApiError(
                ErrorCode.NOT_LEADER,
                f"this server does not lead {self.stream}/{self.partition} in epoch {leader_epoch}",
                {
                    "stream": self.stream,
                    "partition": self.partition,
                    "leader": a.leader if a is not None else None,
                    "leader_epoch": a.leader_epoch if a is not None else None,
                },
            )
        return state

    def follower_name(self, replica_id: int) -> str:
        """The server id of follower ``replica_id``.

        Raises:
            ApiError: INVALID_ARGUMENT if it is not a follower of this partition.
        """
        a = self._core.assignment
        name = replica_at(a.replicas, replica_id) if a is not None else None
        if name is None or name == self.server_id:
            raise ApiError(
                ErrorCode.INVALID_ARGUMENT,
                f"replica_id {replica_id} is not a follower of {self.stream}/{self.partition}",
                {"field": "replica_id"},
            )
        return name

    async def replica_fetched(self, follower: str, offset: int, flushed: int) -> None:
        """Leader: a replica fetch from ``follower`` at ``offset`` reporting ``flushed``."""
        out = self._core.replica_fetched(
            follower, offset, flushed, anyio.current_time(), hw=self.log.high_watermark
        )
        if out.wake_isr:
            self._isr_wake.set()
        await self._carry_out(out)

    def replica_has_news(self, follower: str, offset: int) -> bool:
        """True if a replica fetch at ``offset`` can be answered with records or a new HW."""
        state = self._core.leader_state
        if state is None or self._closed or self._stopping:
            return True
        return offset < self.log.log_end_offset or state.follower_needs_hw(follower)

    async def wait_replica_news(self, follower: str, offset: int, timeout_s: float) -> None:
        """Leader: wait up to ``timeout_s`` until :meth:`replica_has_news`."""
        with anyio.move_on_after(timeout_s):
            while not self.replica_has_news(follower, offset):
                await self._replica_news.wait()

    def _wake_replicas(self) -> None:
        event, self._replica_news = self._replica_news, LazyEvent()
        event.set()
        if self._news_wakers:
            for waker in self._news_wakers:
                waker.set()

    def add_news_waker(self, waker: anyio.Event) -> None:
        """Leader: set ``waker`` whenever parked replica fetches may have news (a fetch
        session parked on many partitions waits on one event)."""
        if self._news_wakers is None:
            self._news_wakers = set()
        self._news_wakers.add(waker)

    def remove_news_waker(self, waker: anyio.Event) -> None:
        """Undo :meth:`add_news_waker`."""
        if self._news_wakers is not None:
            self._news_wakers.discard(waker)
            if not self._news_wakers:
                self._news_wakers = None

    def serves_consumers(self) -> bool:
        """True if consumers may fetch here: this replica leads, or follows while in the
        ISR (read replicas: records below its own HW)."""
        return self._core.serves_consumers()
