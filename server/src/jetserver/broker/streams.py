"""The streams this server holds: metadata operations and their side effects.

:class:`StreamManager` turns metadata into running partitions: it opens each partition's log
(recovering it), starts its tasks, and subscribes it to its NATS subject (in the stream's
load-balance queue group, if any).

Two modes:

- **Single server** (no ``[cluster]``): the metadata is ``metadata.json``
  (:class:`~jetserver.metadata.store.MetadataStore`);
  :class:`~jetserver.broker.local_streams.LocalStreams` creates and deletes streams there and
  has this manager open, subscribe and close their partitions. This server leads every
  partition.
- **Cluster**: the metadata is replicated by Raft; CreateStream/DeleteStream are handled by
  :mod:`jetserver.cluster.forwarding`. Every server calls :meth:`StreamManager.reconcile`
  with each new replicated state: it opens the partitions this server holds a replica of,
  hands each its assignment (``PartitionReplica.apply_assignment``: lead, subscribing to
  NATS, or follow), closes replicas it no longer holds, and removes the data of streams
  that no longer exist. Assignments are applied per partition by a task of their own,
  latest first, in order, so a slow follower never delays the other partitions.

Files: :mod:`~jetserver.broker.stream_files`; periodic work: :mod:`~jetserver.broker.housekeeping`.
Task safety: event loop thread only; create, delete and reconcile are serialized by
:attr:`StreamManager.lock`.
"""

from __future__ import annotations

import logging
import shutil
from collections.abc import Callable
from pathlib import Path

import anyio
import attrs
from anyio.abc import TaskGroup

from jetserver.broker.acks import AckRouter
from jetserver.broker.gc_pause import collector_paused, release_frozen
from jetserver.broker.housekeeping import run_housekeeping
from jetserver.broker.isr_sweep import IsrSweep
from jetserver.broker.nats_port import SUBSCRIBE_CONFIRM_TIMEOUT_S, NatsPort, NatsUnavailable
from jetserver.broker.offline import OfflinePartitions
from jetserver.broker.open_many import open_many
from jetserver.broker.partition import PartitionReplica
from jetserver.broker.pending_opens import PendingOpens
from jetserver.broker.reconcile_scope import ReconcileScope
from jetserver.broker.replica_lookup import PARTITION_READY_TIMEOUT_S, ReplicaLookup
from jetserver.broker.replica_tasks import ReplicaTasks
from jetserver.broker.role_burst import ROLE_BURST_MIN, RoleBurst
from jetserver.broker.role_summary import RoleSummary
from jetserver.broker.running import (
    MetadataView,
    RunningPartition,
    Wanted,
    new_replica,
    queue_group,
)
from jetserver.broker.services import ReplicaServices
from jetserver.broker.stream_files import (
    DELETED_SUFFIX,
    STREAMS_DIR,
    LogCloser,
    MarkerSync,
    OpenJobs,
    remove_unknown_stream_dirs,
)
from jetserver.config.server import ServerConfig
from jetserver.errors import stream_not_found
from jetserver.infra import hops
from jetserver.infra.lazy_event import LazyEvent
from jetserver.logs import fields
from jetserver.metadata.model import MetadataState, PartitionAssignment, StreamMeta
from jetserver.metadata.reserved import is_internal
from jetserver.replication.control import ControlPlane
from jetserver.replication.core import ROLE_LEADER
from jetserver.replication.producers import ProducerTable
from jetserver.replication.session_pool import FetchSessions
from jetserver.security.peer import peer_security_of
from jetserver.storage import Log
from jetserver.storage.fsync_runner import FsyncRunner
from jetserver.storage.space import DiskSpace

log = logging.getLogger(__name__)

APPLY_RETRY_S = 1.0
"""Pause before applying an assignment again after ``apply_assignment`` failed."""


@attrs.define(eq=False)
class StreamManager:
    """Streams and partitions of this server (see the module docstring for the two modes)."""

    config: ServerConfig
    """Server configuration."""
    store: MetadataView
    """The metadata: a :class:`MetadataStore` (single server) or the metadata Raft member."""
    link: NatsPort
    """NATS link for subscriptions and acks."""
    controller: ControlPlane | None = None
    """Cluster mode: the :class:`jetserver.cluster.Controller` handed to replicas."""
    acks: AckRouter = attrs.field(
        init=False, default=attrs.Factory(lambda self: AckRouter(self.link), takes_self=True)
    )
    """Where the replicas send acks (the Produce service registers its inbox here)."""
    _tg: TaskGroup | None = None
    _replica_tasks: ReplicaTasks = attrs.field(factory=ReplicaTasks)
    """The replicas' ``run`` tasks (plain asyncio tasks: 2.7 KB less per partition)."""
    _running: dict[tuple[str, int], RunningPartition] = attrs.field(factory=dict)
    lock: anyio.Lock = attrs.field(factory=lambda: anyio.Lock(fast_acquire=True))
    """Serializes create, delete and reconcile. Taken without a pass of the loop when
    free: a failover's reconcile waited one there, behind the thousands of tasks the death
    of a server wakes (after the three from the applied entry to the reconcile: the state's
    dispatch, its watcher, the reconciler)."""
    leadership_listeners: list[Callable[[str, int], None]] = attrs.field(factory=list)
    """Called with (stream, partition) when a local replica stops leading."""
    offline: OfflinePartitions = attrs.field(factory=OfflinePartitions)
    """Partitions whose replica here cannot open, and why."""
    pending: PendingOpens = attrs.field(factory=PendingOpens)
    """A server alone: the partitions it has not opened yet (opened after ready)."""
    fetch_sessions: FetchSessions | None = None
    """Cluster mode: the follower replicas' fetch sessions to leader servers (set by
    :meth:`start`)."""
    fsyncs: FsyncRunner = attrs.field(factory=FsyncRunner)  # [storage] fsync_on_loop
    disk: DiskSpace | None = None  # free space: the floor of client writes (None: none)
    lookup: ReplicaLookup = attrs.field(init=False)
    """Which local replica serves a request (and whether it may)."""
    _markers: MarkerSync = attrs.field(
        init=False, default=attrs.Factory(lambda self: MarkerSync(self.data_dir), takes_self=True)
    )
    role_summary: RoleSummary = attrs.field(factory=RoleSummary)
    """One INFO line per burst of role changes (cluster mode)."""
    _replica_services: ReplicaServices | None = attrs.field(init=False, default=None)
    _scope: ReconcileScope = attrs.field(init=False)
    """Which partitions each reconcile examines (those whose assignment changed)."""
    _burst: RoleBurst | None = None
    """The last burst of role changes handed out (its pause ends at stop if it never ran)."""

    def __attrs_post_init__(self) -> None:
        self.lookup = ReplicaLookup(
            self.store, self._running, self.offline, self.config, self.pending
        )
        self._scope = ReconcileScope(self.server_id)

    def _services(self) -> ReplicaServices:
        """What the replicas share (made once, after :meth:`start` set the fetch sessions)."""
        if self._replica_services is None:
            self._replica_services = ReplicaServices(
                link=self.link,
                acks=self.acks,
                server_id=self.server_id,
                controller=self.controller if self.clustered else None,
                replication=self.config.replication,
                fetch_sessions=self.fetch_sessions,
                fsyncs=self.fsyncs,
                isr_sweep=IsrSweep(self.config.replication.isr_check_interval_s),
                on_leadership_end=self._leadership_ended,
            )
        return self._replica_services

    def _leadership_ended(self, stream: str, partition: int) -> None:
        for listener in self.leadership_listeners:
            listener(stream, partition)

    @property
    def data_dir(self) -> Path:
        """The server's data directory."""
        return Path(self.config.server.data_dir)

    @property
    def server_id(self) -> str:
        """This server's id."""
        return self.config.server.id

    @property
    def clustered(self) -> bool:
        """True if this server is a member of a cluster (metadata under Raft)."""
        return self.config.cluster.enabled

    # ------------------------------------------------------------------ lookups

    def stream(self, name: str) -> StreamMeta:
        """The stream called ``name``.

        Raises:
            ApiError: STREAM_NOT_FOUND.
        """
        meta = self.store.state.streams.get(name)
        if meta is None:
            raise stream_not_found(name)
        return meta

    def streams(self) -> list[StreamMeta]:
        """Every stream, by name."""
        return sorted(self.store.state.streams.values(), key=lambda m: m.name)

    def replica(self, name: str, partition: int) -> PartitionReplica:
        """:meth:`ReplicaLookup.replica`.

        Raises:
            ApiError: STREAM_NOT_FOUND, PARTITION_NOT_FOUND, PARTITION_OFFLINE, UNAVAILABLE.
        """
        return self.lookup.replica(name, partition)

    def leader_replica(self, name: str, partition: int) -> PartitionReplica | None:
        """:meth:`ReplicaLookup.leader_replica`.

        Raises:
            ApiError: STREAM_NOT_FOUND, PARTITION_NOT_FOUND, NOT_LEADER, UNAVAILABLE.
        """
        return self.lookup.leader_replica(name, partition)

    async def wait_partition_ready(
        self, name: str, partition: int, timeout_s: float = PARTITION_READY_TIMEOUT_S
    ) -> bool:
        """:meth:`ReplicaLookup.wait_partition_ready`."""
        return await self.lookup.wait_partition_ready(name, partition, timeout_s)

    def local_replica(self, name: str, partition: int) -> PartitionReplica | None:
        """The local replica if open, else None (no error)."""
        running = self._running.get((name, partition))
        return None if running is None else running.replica

    # ------------------------------------------------------------------ lifecycle

    async def start(self, tg: TaskGroup) -> None:
        """Start the server-wide tasks and finish interrupted deletes. The replicas open
        later: in a cluster by :meth:`reconcile` once this server's restart is registered,
        alone by :meth:`~jetserver.broker.local_streams.LocalStreams.open_all`."""
        self._tg = tg
        tg.start_soon(self._replica_tasks.guard)
        tg.start_soon(run_housekeeping, self._running, self.config.storage)
        if self.clustered and self.fetch_sessions is None:
            self.fetch_sessions = FetchSessions(
                self.config.replication, tg, peer_security_of(self.controller)
            )
        if self.clustered:
            tg.start_soon(self.role_summary.run)
            if self.controller is not None:
                tg.start_soon(self._services().isr_sweep.run, self.controller)
        root = self.data_dir / STREAMS_DIR
        root.mkdir(parents=True, exist_ok=True)
        for leftover in root.glob(f"*{DELETED_SUFFIX}"):
            log.info("removing data of a deleted stream", extra=fields(path=str(leftover)))
            await anyio.to_thread.run_sync(shutil.rmtree, leftover, True)

    def open_pending(self) -> None:
        """Open what :meth:`start` left pending, once ready (not competing with the start)."""
        if self.pending and self._tg is not None:
            self._tg.start_soon(self.pending.run, self._open_pending)

    async def confirm_subscriptions(self) -> None:
        """Round-trip to NATS so the new subscriptions are active before we answer: a
        message published after CreateStream returns is then captured."""
        try:
            await self.link.flush(SUBSCRIBE_CONFIRM_TIMEOUT_S, ingest=True)
        except NatsUnavailable as exc:
            # Subscriptions are replayed by nats-py once the link is back.
            log.warning("cannot confirm subscriptions", extra=fields(error=str(exc)))

    async def open_partitions(
        self,
        wanted: list[tuple[StreamMeta, PartitionAssignment]],
        *,
        subscribe: bool,
        errors: list[Exception] | None = None,
    ) -> int:
        """:func:`~jetserver.broker.open_many.open_many`, each replica then started
        (``subscribe``: single server, subscribed as leader; else: cluster, its assignment
        applier started). One that cannot open is offline (or its error appended to
        ``errors``). Returns how many opened."""

        def failed(meta: StreamMeta, a: PartitionAssignment, exc: Exception) -> None:
            if errors is None:
                self.offline.failed(meta.name, a.partition, exc)
            else:
                errors.append(exc)

        async def then(running: RunningPartition, a: PartitionAssignment) -> None:
            if subscribe:
                await self._subscribe_leader(running, a)
            else:
                assert self._tg is not None
                self._tg.start_soon(self._applier, running)

        jobs = OpenJobs(self.data_dir, self.config)
        held = len(self._running) + len(wanted)
        return await open_many(wanted, jobs, self._start_replica, then, failed, held)

    async def _open_pending(self, batch: list[tuple[StreamMeta, PartitionAssignment]]) -> None:
        """Open and subscribe partitions of :attr:`pending` (those of a stream deleted or
        replaced meanwhile: not), with their streams' current metadata."""
        async with self.lock:
            streams = self.store.state.streams
            current = [streams.get(m.name) for m, _a in batch]
            await self.open_partitions(
                [
                    (now, now.partitions[a.partition])
                    for (m, a), now in zip(batch, current, strict=True)
                    if now is not None and now.stream_id == m.stream_id
                ],
                subscribe=True,
            )

    async def _subscribe_leader(
        self, running: RunningPartition, assignment: PartitionAssignment
    ) -> None:
        replica = running.replica
        if not is_internal(replica.stream):  # internal: no NATS messages (security.md §2)
            running.sub = await self.link.subscribe(
                replica.subject,
                replica.on_message,
                queue=running.queue,
                sink=replica.accept,
                skip=replica.skip_copies,
                ingest_owner=replica,
            )
        running.applied = (assignment, ())
        running.ready.set()

    async def _start_replica(
        self,
        meta: StreamMeta,
        assignment: PartitionAssignment,
        log_: Log,
        producers: ProducerTable,
    ) -> RunningPartition:
        """Start the replica of an opened log (on the event loop)."""
        assert self._tg is not None
        p = assignment.partition
        replica = new_replica(
            meta,
            assignment,
            log_,
            producers,
            config=self.config,
            services=self._services(),
            disk=self.disk,
        )
        await self._replica_tasks.start(replica.run(), replica.life, replica.stop_undrained)
        self.offline.opened(meta.name, p)
        running = RunningPartition(replica, stream_id=meta.stream_id, queue=queue_group(meta))
        self._running[(meta.name, p)] = running
        # DEBUG, its fields built only then: one INFO line per partition was ~30 % of a
        # restart's event-loop time at thousands; start logs one line ("partitions opened").
        if log.isEnabledFor(logging.DEBUG):
            where = {"subject": replica.subject, "queue": running.queue or None}
            at = {"log_start": log_.log_start_offset, "hw": log_.high_watermark}
            at["leo"] = log_.log_end_offset
            log.debug("partition open", extra=fields(stream=meta.name, partition=p, **where, **at))
        return running

    # ------------------------------------------------------------------ cluster mode

    async def reconcile(self, state: MetadataState, *, collect: bool) -> None:
        """Make this server's replicas match ``state`` (cluster mode; idempotent).

        Opens the partitions this server holds a replica of, hands every replica its
        current assignment (in its own task, see the module docstring), closes replicas
        it no longer holds (or of an older incarnation of the stream), and with
        ``collect`` removes the data of streams that are not in ``state`` (only pass it
        once the state is known to be current: a server restarting replays an older
        state first).
        """
        async with self.lock:
            plan = self._scope.plan(state, collect=collect)  # only what changed: see there
            for key, running in plan.stale(self._running):
                await self._close_partition(key, running)
            if plan.collect:  # asked, and a stream gone (or a full scan)
                await remove_unknown_stream_dirs(self.data_dir, state)
            new = plan.to_open(self._running)
            if new:  # opened in batches (each replica's applier starts as it opens)
                await self.open_partitions(new, subscribe=False)
            woken = plan.retarget(self._running)
            if hops.ENABLED:
                hops.mark(f"reconcile.woken.{len(woken)}")
            # A failover (many role changes), or a few new partitions' first roles on a
            # server holding many (their objects frozen after: see gc_pause).
            held = len(self._running)
            many = len(woken) >= ROLE_BURST_MIN or (bool(new) and held >= ROLE_BURST_MIN)
            if woken and many and self._tg is not None:
                burst = RoleBurst(len(woken), on_stall=self.role_summary.stalled, held=held)
                for opened in woken:
                    if opened.burst is not None:
                        opened.burst.applied()  # it is in this burst now
                    opened.burst = burst
                burst.pause_collector()  # before the woken appliers run: see role_burst
                self._burst = burst
                self._tg.start_soon(burst.collector_paused)
            self._scope.done(plan, self._running)

    async def _close_partition(self, key: tuple[str, int], running: RunningPartition) -> None:
        await self._stop_running(key, running)
        release_frozen()
        log.info("partition closed", extra=fields(stream=key[0], partition=key[1]))

    async def _stop_running(self, key: tuple[str, int], running: RunningPartition) -> None:
        """Forget ``running``, end its applier, unsubscribe it and stop it, undrained."""
        self._running.pop(key, None)
        if running.scope is not None:
            running.scope.cancel()
        if running.sub is not None:
            await running.sub.unsubscribe()
            running.sub = None
        running.replica.stop(drain=False)
        await running.replica.wait_stopped()

    async def _applier(self, running: RunningPartition) -> None:
        """Hand the replica each new assignment, in order, until it is closed."""
        with anyio.CancelScope() as scope:
            running.scope = scope
            while not running.replica.closed:
                target = running.wanted
                if target is None or target == running.applied:
                    running.wake = LazyEvent()
                    if running.wanted == running.applied:
                        await running.wake.wait()
                    continue
                started = anyio.current_time()
                if hops.ENABLED:
                    hops.mark("apply.start")
                try:
                    await self._apply(running, target)
                except Exception:
                    log.exception(
                        "applying an assignment failed; retrying",
                        extra=fields(
                            stream=running.replica.stream, partition=running.replica.partition
                        ),
                    )
                    await anyio.sleep(APPLY_RETRY_S)
                    continue
                running.applied = target
                running.ready.set()
                replica, assignment = running.replica, target[0]
                if hops.ENABLED:
                    hops.mark(f"apply.end.{replica.role}")
                led = None
                if replica.role == ROLE_LEADER:
                    led = (replica.stream, replica.partition, assignment.leader_epoch)
                self.role_summary.applied(replica.role, started, anyio.current_time(), led)
                burst, running.burst = running.burst, None
                if burst is not None:
                    burst.applied()

    async def _apply(self, running: RunningPartition, target: Wanted) -> None:
        assignment, replica_addresses = target
        await running.replica.apply_assignment(assignment, dict(replica_addresses))

    async def stop(self) -> bool:
        """Stop ingest (unsubscribe), append what was queued, flush, checkpoint, close logs
        (in batches; the clean-shutdown markers synced once); True if every log was flushed
        up to its end (a clean stop)."""
        await self.pending.close()  # no more opens (an open under way ends first)
        running = list(self._running.values())
        if self._burst is not None:
            self._burst.resume_collector()
        for r in running:
            if r.scope is not None:
                r.scope.cancel()
        for r in running:
            if r.sub is not None:
                await r.sub.unsubscribe()
                r.sub = None
        closer = LogCloser(sync_marker=False)  # one file-system sync below, not 2 fsyncs each
        for r in running:
            r.replica.closer = closer.close
            r.replica.stop(drain=True)
        with collector_paused(len(running)):
            for r in running:
                await r.replica.wait_stopped()
        self._running.clear()
        self._scope.forget()  # a reconcile after this one opens every replica again
        await self._markers.after()  # every clean-shutdown marker durable
        return all(r.replica.log.flushed_offset >= r.replica.log.log_end_offset for r in running)

    def wake_all(self) -> None:
        """Wake every fetch waiting on any partition (shutdown)."""
        for r in self._running.values():
            r.replica.wake_waiters()

    # ------------------------------------------------------------------ operations

    async def stop_stream(self, meta: StreamMeta) -> None:
        """Stop every local partition of ``meta`` (a deleted stream), undrained, and forget
        them (pending opens, offline reasons); the caller removes the data."""
        name = meta.name
        self.pending.drop_stream(name)
        for p in range(meta.spec.partitions):
            self.offline.opened(name, p)
            running = self._running.get((name, p))
            if running is not None:
                await self._stop_running((name, p), running)
