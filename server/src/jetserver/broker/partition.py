"""One partition replica on this server: its parts, composed around a ReplicaCore.

A :class:`PartitionReplica` owns the partition's log and builds, once, the objects that
do its work, each holding only its own state and narrow references to what it uses:

- :class:`~jetserver.replication.core.ReplicaCore` (replication/core.py): every decision
  (role, leader state, HW, pending ALL acks, producers); no I/O. The replication
  simulation (tests/replication) drives the same core.
- :class:`~jetserver.broker.ingest_side.Intake`: the entry points (NATS sink and callback,
  direct Produce).
- :class:`~jetserver.broker.sequencer.Sequencer`: the queue and the append path (the
  log's single writer, and the one place for append preconditions).
- :class:`~jetserver.broker.commit.Committer`: the flusher (group commit), the HW, ALL acks,
  the HW waits.
- :class:`~jetserver.broker.roles.RoleDriver`: assignments, the leader's NATS subscription
  and ISR proposals, the follower's fetcher.
- :class:`~jetserver.broker.replica_news.ReplicaNews`: the leader's side of replica
  fetches (who may fetch, wake-ups).
- :class:`~jetserver.broker.lifecycle.Lifecycle`: running, stopping, closed (written here
  only, read by the parts).

Each part gets the references they all share (stream, partition, log, core, lifecycle) as
one frozen :class:`~jetserver.broker.replica_base.ReplicaBase`.

Leader data path::

    Intake -> Sequencer: Log.append(batch) -> LEADER acks -> wake replica fetches,
        then Committer: Log.flush() (one fsync covers every record appended so far)
        -> high watermark -> ALL acks -> wake fetch waiters

Roles (spec/cluster.md, "Replication"):

- **single** (a server without a cluster: the stream manager subscribes the replica and
  never calls :meth:`PartitionReplica.apply_assignment`): committed means flushed, so the
  high watermark is the flushed offset.
- **leader**, **follower**, **none**: see :mod:`jetserver.broker.roles`.

The methods here are the replica's public face (the stream manager, the fetch and Produce
services, metrics); each hands its work to the part that owns it.

Task safety: event loop thread only; other threads only run Log.flush / Log.compact /
checkpointing, which the storage engine allows beside the single writer (the sequencer).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from typing import Any

import anyio
import attrs
from anyio.abc import TaskStatus
from nats.aio.msg import Msg

from jetserver.broker.acks import PendingAck
from jetserver.broker.commit import Committer
from jetserver.broker.direct import DirectBatch
from jetserver.broker.ingest_side import Intake
from jetserver.broker.lifecycle import Lifecycle
from jetserver.broker.nats_port import SkipMarked
from jetserver.broker.one_target import OneTarget
from jetserver.broker.part_tasks import PartTasks
from jetserver.broker.replica_base import ReplicaBase
from jetserver.broker.replica_news import NewsWaker, ReplicaNews
from jetserver.broker.roles import RoleDriver, new_core
from jetserver.broker.sequencer import Sequencer
from jetserver.broker.services import ReplicaServices
from jetserver.config.server import IngestConfig, StorageConfig
from jetserver.metadata.model import PartitionAssignment, StreamSpec
from jetserver.replication import LeaderState
from jetserver.replication.core import ReplicaCore
from jetserver.replication.fetcher import FollowerFetcher
from jetserver.replication.producers import ProducerTable
from jetserver.storage import Log, LogClosedError

log = logging.getLogger(__name__)

__all__ = ["PartitionReplica"]


@attrs.define(eq=False, repr=False)
class PartitionReplica:
    """The replica of one partition on this server (see the module docstring).

    Lifecycle: ``await tg.start(replica.run)``; in a cluster ``await
    replica.apply_assignment(assignment, addresses)`` on every metadata change (in order;
    before ``run`` it waits, after :meth:`stop` it does nothing); ``replica.stop()`` and
    ``await replica.wait_stopped()`` to close it (it unsubscribes, closes its log)."""

    stream: str
    """Stream name."""
    partition: int
    """Partition number."""
    subject: str
    """The NATS subject this partition listens on."""
    log: Log
    """The partition's log (owned: closed by :meth:`run` on exit)."""
    services: ReplicaServices
    """The server's link, ack router, control plane, fetch sessions and fsync runner,
    shared by its replicas."""
    max_message_bytes: int
    """Largest message stored (value + key + headers); changed by
    :meth:`set_max_message_bytes` only."""
    ingest: IngestConfig
    """Batching and backpressure settings."""
    storage: StorageConfig
    """Checkpoint and maintenance intervals."""
    first_epoch: int = attrs.field(default=0, alias="leader_epoch")
    """Epoch stamped on appended records until an assignment says otherwise."""
    compact: bool = False
    """Run key compaction in maintenance."""
    queue_group: str = ""
    """NATS queue group of the subscription (load-balance groups)."""
    replication_factor: int = 1
    """Replicas of the partition."""
    spec: StreamSpec | None = None
    """The stream's settings (durability, min ISR); None: defaults."""
    producers: ProducerTable = attrs.field(factory=ProducerTable)
    """Idempotent producers found in the log tail at open (then owned by the core)."""
    closer: Callable[[Log], Awaitable[None]] | None = None
    """Closes the log at the end instead of a worker-thread call of its own: a server's stop
    closes logs in batches, the clean-shutdown markers synced once (StreamManager.stop)."""
    life: Lifecycle = attrs.field(init=False, factory=Lifecycle)
    """Running, stopping, closed (written here only)."""
    core: ReplicaCore[PendingAck] = attrs.field(init=False)
    """The replica's decisions."""
    base: ReplicaBase = attrs.field(init=False)
    """What its parts share (name, log, core, lifecycle)."""
    committer: Committer = attrs.field(init=False)
    """Group commit, the HW, ALL acks."""
    sequencer: Sequencer = attrs.field(init=False)
    """The queue and the append path."""
    intake: Intake = attrs.field(init=False)
    """Where messages enter."""
    news: ReplicaNews = attrs.field(init=False)
    """The leader's side of replica fetches."""
    roles: RoleDriver = attrs.field(init=False)
    """Assignments and the role's tasks."""
    one_target: OneTarget | None = attrs.field(init=False, default=None)
    """What the one-step Produce path checked of it for its stream's current metadata
    (broker/one_target.py; None: not yet, or found for other metadata)."""
    _checkpointed_hw: int = attrs.field(init=False, default=-1)

    def __repr__(self) -> str:
        return self.base.part_repr(self)

    def __attrs_post_init__(self) -> None:
        # What the checkpoint file holds: an idle partition is not checkpointed again.
        ckpt = self.log.checkpointed_high_watermark
        self._checkpointed_hw = -1 if ckpt is None else ckpt
        life, services = self.life, self.services
        core = self.core = new_core(
            self.log,
            server_id=services.server_id,
            clustered=services.controller is not None,
            spec=self.spec,
            replication=services.replication,
            producers=self.producers,
        )
        base = self.base = ReplicaBase(self.stream, self.partition, self.log, core, life)
        news = self.news = ReplicaNews(base, services.server_id)
        committer = self.committer = Committer(
            base,
            fsyncs=services.fsyncs,
            acks=services.acks,
            wake_replicas=news.wake,
            stop_replica=self.stop,
            renew_leadership=self.renew_leadership,
            on_leadership_end=services.on_leadership_end,
        )
        sequencer = self.sequencer = Sequencer(
            base,
            max_message_bytes=self.max_message_bytes,
            ingest=self.ingest,
            acks=services.acks,
            committer=committer,
            wake_replicas=news.wake,
            leader_epoch=self.first_epoch,
            compact=self.compact,
        )
        intake = self.intake = Intake(
            base,
            sequencer=sequencer,
            direct_ok=None if self.queue_group else self.replication_factor == 1,
        )
        self.roles = RoleDriver(
            base,
            subject=self.subject,
            committer=committer,
            sequencer=sequencer,
            intake=intake,
            owner=self,
            services=services,
            queue_group=self.queue_group,
            replication_factor=self.replication_factor,
        )

    # ---------------------------------------------------------------- lifecycle

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Run sequencer and flusher until :meth:`stop`; then flush, checkpoint the HW and
        close the log (also when cancelled). HW checkpoints and maintenance meanwhile come
        from the server's one housekeeping task (:mod:`jetserver.broker.housekeeping`)."""
        life = self.life
        tasks = PartTasks(self._task_failed)  # no task group held while idle (issue 34)
        try:
            await self.roles.scrub_at_open()
            life.tg = tasks  # role tasks may start (apply_assignment waits until then)
            life.run_started.set()
            task_status.started()
            await self.sequencer.run()
        finally:
            with anyio.CancelScope(shield=True):
                await tasks.close()  # the parts' tasks end first, as a task group's did
            life.tg = None
            life.run_started.set()  # an apply_assignment waiting for run: it is over
            with anyio.CancelScope(shield=True):
                await self._finish()
        tasks.raise_failure()

    def _task_failed(self) -> None:
        """A task of a part raised (a bug): stop, then ``run`` raises its error."""
        self.stop(drain=False)

    def stop_undrained(self) -> None:
        """:meth:`stop` without draining (kept per replica while it runs: as a bound
        method it costs 64 bytes, a ``partial`` with its keyword 330, issue 34)."""
        self.stop(drain=False)

    def stop(self, *, drain: bool = True) -> None:
        """Ask :meth:`run` to end (``drain``: what is queued is appended first); new
        messages are refused from now on; :meth:`run` unsubscribes and closes the log."""
        life = self.life
        life.stopping = True
        life.drain = drain
        life.run_started.set()  # apply_assignment stops waiting for run: none will come
        self.sequencer.wake()
        self.committer.waits.wake()
        self.news.wake()

    async def wait_stopped(self) -> None:
        """Return once :meth:`run` has closed the log."""
        await self.life.stopped.wait()

    async def _finish(self) -> None:
        life = self.life
        try:
            self.roles.leave_isr_sweep()
            await self.roles.unsubscribe()
            if not life.closed:
                await self.committer.final_flush()
                try:
                    # In a worker thread: its fsyncs (indexes, the HW checkpoint, the
                    # clean-shutdown marker) would hold the event loop, thousands of
                    # partitions in a row at a server's stop.
                    if self.closer is not None:
                        await self.closer(self.log)
                    else:
                        await anyio.to_thread.run_sync(self.log.close)
                except Exception:
                    log.exception("closing the log failed", extra=self.base.fields())
        finally:
            life.closed = True
            self.committer.waits.wake()
            life.stopped.set()

    # ---------------------------------------------------------------- state

    @property
    def closed(self) -> bool:
        """True once the partition stopped (deleted or shutting down)."""
        return self.life.closed

    @property
    def high_watermark(self) -> int:
        """First offset not yet committed."""
        return int(self.log.high_watermark)

    @property
    def leader_epoch(self) -> int:
        """Epoch stamped on appended records."""
        return self.sequencer.leader_epoch

    @property
    def leading(self) -> bool:
        """True while records may be appended here (leader or single)."""
        return self.core.leading

    @property
    def role(self) -> str:
        """``single``, ``leader``, ``follower`` or ``none``."""
        return self.core.role

    @property
    def assignment(self) -> PartitionAssignment | None:
        """The last assignment applied (None: none yet, or a server alone)."""
        return self.core.assignment

    @property
    def leader_state(self) -> LeaderState | None:
        """The replication state while leading (None otherwise)."""
        return self.core.leader_state

    @property
    def fetcher(self) -> FollowerFetcher | None:
        """The fetch loop while following (None otherwise)."""
        return self.roles.fetcher

    def serves_consumers(self) -> bool:
        """True if consumers may fetch here: this replica leads, or follows while in the
        ISR (read replicas: records below its own HW)."""
        return self.core.serves_consumers()

    # ---------------------------------------------------------------- counters

    @property
    def messages_in(self) -> int:
        """Messages appended since start."""
        return self.sequencer.messages_in

    @property
    def messages_rejected(self) -> int:
        """Messages refused (too large, bad fields, storage errors)."""
        return self.sequencer.messages_rejected

    @property
    def produce_direct(self) -> int:
        """Produce messages appended without NATS."""
        return self.intake.produce_direct

    @property
    def produce_inline(self) -> int:
        """Of those, the messages appended in their request's own task."""
        return self.intake.produce_inline

    @property
    def copies_skipped(self) -> int:
        """NATS copies of messages stored directly here, not stored again."""
        return self.intake.copies_skipped

    @property
    def skip_copies(self) -> SkipMarked:
        """The subscription filter that drops stored copies before parsing."""
        return self.intake.skip_copies

    @property
    def sync_failures(self) -> int:
        """fsyncs of this partition's log that failed."""
        return self.committer.sync_failures

    @property
    def fetch_waiters(self) -> int:
        """Fetches parked waiting for the HW to move."""
        return self.committer.waits.fetch_waiters

    # ---------------------------------------------------------------- ingest

    def set_max_message_bytes(self, limit: int) -> None:
        """Refuse messages above ``limit`` from the next batch on (UpdateStream: the
        stream's new ``max_message_bytes``); stored records stay."""
        self.max_message_bytes = limit
        self.sequencer.max_message_bytes = limit

    def accept(self, subject: str, reply: str, data: bytes) -> bool:
        """NATS sink: :meth:`Intake.accept`."""
        return self.intake.accept(subject, reply, data)

    async def on_message(self, msg: Msg) -> None:
        """NATS callback: :meth:`Intake.on_message`."""
        await self.intake.on_message(msg)

    def takes_direct(self, policy: int) -> bool:
        """:meth:`Intake.takes_direct`."""
        return self.intake.takes_direct(policy)

    def appends_at_once(self, policy: int) -> bool:
        """:meth:`Intake.appends_at_once`."""
        return self.intake.appends_at_once(policy)

    def ingest_direct(
        self,
        batch: DirectBatch,
        *,
        shield: bool = True,
        entered: Callable[[], None] | None = None,
    ) -> Coroutine[Any, Any, bool]:
        """:meth:`Intake.ingest_direct` (its coroutine: no frame of this method's own to
        create and resume on each message's way; likewise below)."""
        return self.intake.ingest_direct(batch, shield=shield, entered=entered)

    # ---------------------------------------------------------------- commit

    def wait_for_hw_above(
        self, offset: int, timeout_s: float, stop: Callable[[], bool] | None = None
    ) -> Coroutine[Any, Any, None]:
        """:meth:`HwWaits.wait_for_hw_above`."""
        return self.committer.waits.wait_for_hw_above(offset, timeout_s, stop)

    def wake_waiters(self) -> None:
        """Wake every fetch waiting on this partition."""
        self.committer.waits.wake()

    def wait_committed(
        self, end: int, failures: int, timeout_s: float
    ) -> Coroutine[Any, Any, bool]:
        """:meth:`Committer.wait_committed`."""
        return self.committer.wait_committed(end, failures, timeout_s)

    def commit_deferred(self) -> Coroutine[Any, Any, None]:
        """:meth:`Committer.commit_deferred`."""
        return self.committer.commit_deferred()

    def copies_turn(self) -> int:
        """:meth:`Committer.copies_turn`."""
        return self.committer.copies_turn()

    # ---------------------------------------------------------------- roles

    async def apply_assignment(
        self, assignment: PartitionAssignment, addresses: Mapping[str, str]
    ) -> None:
        """:meth:`RoleDriver.apply_assignment`.

        Raises:
            StorageError: the epoch cache or the log could not be written (retry).
        """
        await self.roles.apply_assignment(assignment, addresses)

    def renew_leadership(self, epoch: int) -> None:
        """:meth:`RoleDriver.renew_leadership`."""
        self.roles.renew_leadership(epoch)

    def check_leader(self, leader_epoch: int) -> LeaderState:
        """:meth:`ReplicaNews.check_leader`.

        Raises:
            ApiError: NOT_LEADER.
        """
        return self.news.check_leader(leader_epoch)

    def follower_name(self, replica_id: int) -> str:
        """:meth:`ReplicaNews.follower_name`.

        Raises:
            ApiError: INVALID_ARGUMENT.
        """
        return self.news.follower_name(replica_id)

    async def replica_fetched(
        self, follower: str, offset: int, flushed: int, poll_s: float = 0.0
    ) -> None:
        """:meth:`RoleDriver.replica_fetched`."""
        await self.roles.replica_fetched(follower, offset, flushed, poll_s)

    def replica_has_news(self, follower: str, offset: int, parked_s: float) -> bool:
        """:meth:`ReplicaNews.has_news`."""
        return self.news.has_news(follower, offset, parked_s)

    def replica_poll_ended(self, follower: str, now: float) -> None:
        """:meth:`ReplicaNews.poll_ended`."""
        self.news.poll_ended(follower, now)

    def replica_hw_news_due_s(self, follower: str, parked_s: float) -> float | None:
        """:meth:`ReplicaNews.hw_news_due_s`."""
        return self.news.hw_news_due_s(follower, parked_s)

    def add_news_waker(self, waker: NewsWaker) -> None:
        """:meth:`ReplicaNews.add_waker`."""
        self.news.add_waker(waker)

    def remove_news_waker(self, waker: NewsWaker) -> None:
        """:meth:`ReplicaNews.remove_waker`."""
        self.news.remove_waker(waker)

    # ---------------------------------------------------------------- maintenance

    @property
    def hw_moved_since_checkpoint(self) -> bool:
        """True if the HW moved since it was last checkpointed (housekeeping)."""
        return self.log.high_watermark != self._checkpointed_hw

    def checkpointed(self, hw: int) -> None:
        """The HW ``hw`` (or a later one) was checkpointed."""
        self._checkpointed_hw = hw

    async def run_maintenance(self) -> None:
        """Apply retention now, then compaction if the stream is compacted."""
        try:
            deleted = self.log.enforce_retention()
            if deleted:
                log.info("retention deleted segments", extra=self.base.fields(segments=deleted))
            if self.compact:
                report = await anyio.to_thread.run_sync(self.log.compact)
                log.debug("compacted", extra=self.base.fields(report=str(report)))
        except Exception as exc:
            if isinstance(exc, LogClosedError) and self.life.ending:
                return  # a stop began while compaction ran in its thread: expected
            log.warning("maintenance failed", extra=self.base.fields(error=repr(exc)))
