"""One partition replica on this server: ingest, sequencer, flusher, acks, HW, and its role.

Leader data path::

    NATS sink (accept) or callback (on_message) -> queue -> sequencer task: parse, encode bodies,
        Log.append(batch) -> LEADER acks -> wake replica fetches (followers), then the flusher
    flusher task (started by the first append): Log.flush() (one fsync covers every record
        appended so far) -> high watermark -> ALL acks -> wake fetch waiters (broker/commit.py)

Roles (spec/cluster.md, "Replication"):

- **single** (a server without a cluster: the stream manager subscribes the replica and
  never calls :meth:`PartitionReplica.apply_assignment`): committed means flushed, so the
  high watermark is the flushed offset.
- **leader** (``apply_assignment`` names this server): records its epoch's start in the
  epoch cache, rebuilds the idempotent-producer table from the log tail, subscribes to NATS,
  and keeps a :class:`~jetserver.replication.LeaderState`: replica fetches
  (:meth:`replica_fetched`) and its own flushes move the HW (min over the ISR); ALL acks go
  out once the HW passes the record; ISR changes are proposed to the controller.
- **follower**: unsubscribed; a :class:`~jetserver.replication.fetcher.FollowerFetcher`
  reconciles by leader epoch and fetches from the leader; consumers may read below its HW
  while it is in the ISR (read replicas).
- **none**: holds the log only (not a replica, or before the first assignment).

Task safety: event loop thread only; other threads only run Log.flush / Log.compact /
checkpointing, which the storage engine allows beside the single writer (the sequencer).
"""

from __future__ import annotations

import asyncio
import collections
import logging
import struct
import time
from collections.abc import Awaitable, Callable
from typing import Any, NamedTuple

import anyio
import attrs
from anyio.abc import TaskGroup, TaskStatus

from jetsdk.codec.envelope import COOKIE
from jetsdk.codec.error_codes import AckPolicy, ErrorCode
from jetsdk.codec.errors import CodecError
from jetsdk.codec.record import encode_body
from jetsdk.codec.transcode import DirectRecord, RecordControls, direct_record, envelope_record
from jetserver import hops
from jetserver.broker.acks import JSON_ACK_MARK, AckRouter, PartitionAck, PendingAck
from jetserver.broker.commit import Committer
from jetserver.broker.header_controls import Controls, read_controls
from jetserver.broker.ingest_side import IngestSide
from jetserver.broker.ingested import Ingested
from jetserver.broker.producers import ProducerTable
from jetserver.broker.record_fields import RecordFields
from jetserver.broker.roles import ReplicaRoles
from jetserver.broker.stored_copy import stored_skip, stored_value
from jetserver.config import IngestConfig, StorageConfig
from jetserver.fsync_runner import FsyncRunner
from jetserver.lazy_event import LazyEvent
from jetserver.logs import fields
from jetserver.metadata.model import StreamSpec
from jetserver.nats_fast import SkipMarked
from jetserver.nats_link import NatsLink, SubscriptionHandle
from jetserver.replication import ControlPlane, ReplicationConfig
from jetserver.replication.core import ReplicaCore
from jetserver.replication.fetcher import FollowerFetcher
from jetserver.replication.session import FetchSessions
from jetserver.storage import Log
from jetserver.storage.clock import wall_ns

log = logging.getLogger(__name__)

_U32 = struct.Struct(">I")
_LEADER = int(AckPolicy.LEADER)
_ALL = int(AckPolicy.ALL)
_new_tuple = tuple.__new__
"""Builds a NamedTuple from a tuple without its Python-level ``__new__`` (hot path)."""


class _Wanted(NamedTuple):
    """Who asked for an ack of one message, and how (a tuple: built per message)."""

    inbox: str
    corr: str
    policy: AckPolicy
    producer_id: int | None
    producer_seq: int


@attrs.define(eq=False)
class PartitionReplica(IngestSide, ReplicaRoles, Committer):
    """The replica of one partition on this server (see the module docstring for roles).

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
    link: NatsLink
    """NATS link for the subscription."""
    acks: AckRouter
    """Where acks go."""
    max_message_bytes: int
    """Largest message stored (value + key + headers)."""
    ingest: IngestConfig
    """Batching and backpressure settings."""
    storage: StorageConfig
    """Checkpoint and maintenance intervals."""
    leader_epoch: int = 0
    """Epoch stamped on appended records."""
    compact: bool = False
    """Run key compaction in maintenance."""
    server_id: str = ""
    """This server's id (cluster mode)."""
    controller: ControlPlane | None = None
    """Where ISR changes and silent leaders go (cluster mode; None on a server alone)."""
    queue_group: str = ""
    """NATS queue group of the subscription (load-balance groups)."""
    replication_factor: int = 1
    """Replicas of the partition."""
    spec: StreamSpec | None = None
    """The stream's settings (durability, min ISR); None: defaults."""
    replication: ReplicationConfig = attrs.field(factory=ReplicationConfig)
    """Replication timings."""
    fetch_sessions: FetchSessions | None = None
    """The server's fetch sessions, shared by followers (None: each runs its own)."""
    fsyncs: FsyncRunner = attrs.field(factory=FsyncRunner)
    """Where this partition's fsyncs run (one per server, shared by its partitions)."""
    on_leadership_end: Callable[[str, int], None] | None = None
    """Called with (stream, partition) when this replica stops leading, after its pending
    ALL acks were failed with NOT_LEADER (the Produce service then answers at once the
    requests still waiting for this partition)."""

    producers: ProducerTable = attrs.field(factory=ProducerTable)
    """Idempotent producers found in the log tail at open (then owned by the core)."""
    _queue: collections.deque[Ingested] = attrs.field(factory=collections.deque)
    _fields_cache: RecordFields = attrs.field(factory=RecordFields)
    _queued_bytes: int = 0
    _wake: LazyEvent = attrs.field(factory=LazyEvent)
    _space: LazyEvent = attrs.field(factory=LazyEvent)
    _dirty: anyio.Event = attrs.field(init=False)
    """Set to have the flusher fsync (made with the flusher: :meth:`_request_flush`)."""
    _flushing: bool = False
    """The flusher task runs (started by the first :meth:`_request_flush`)."""
    _hw_moved: LazyEvent = attrs.field(factory=LazyEvent)
    _stopping: bool = False
    _closed: bool = False
    _drain: bool = True
    _appending: bool = False
    """A batch is being appended (by the sequencer, or by a Produce request in its own task:
    :meth:`_append_now`); the other waits."""
    _checkpointed_hw: int = -1
    _stopped: LazyEvent = attrs.field(factory=LazyEvent)
    messages_in: int = 0
    """Messages appended since start."""
    messages_rejected: int = 0
    """Messages refused (too large, bad fields, storage errors)."""
    produce_direct: int = 0
    """Produce messages queued by :meth:`ingest_direct` (appended without NATS)."""
    produce_inline: int = 0
    """Of those, the messages appended in their request's own task (:meth:`_append_now`)."""
    _copies_skipped: int = 0
    _copies_tail: asyncio.Future[None] | None = None  # see Committer.copies_turn
    skip_copies: SkipMarked = attrs.field(init=False)
    """The subscription filter that drops stored copies before parsing."""
    sync_failures: int = 0
    """fsyncs of this partition's log that failed (each followed by a cut back to disk)."""
    closer: Callable[[Log], Awaitable[None]] | None = None
    """Closes the log at the end instead of a worker-thread call of its own: a server's stop
    closes logs in batches, the clean-shutdown markers synced once (StreamManager.stop)."""
    fetch_waiters: int = 0
    """Fetches parked waiting for the HW to move."""
    _core: ReplicaCore[PendingAck] = attrs.field(init=False)
    _fetcher: FollowerFetcher | None = None
    _sub: SubscriptionHandle | None = None
    _tg: TaskGroup | None = None
    _role_scope: anyio.CancelScope | None = None
    _role_done: anyio.Event | None = None
    _role_lock_: anyio.Lock | None = None
    _run_started: LazyEvent = attrs.field(factory=LazyEvent)
    _replica_news: LazyEvent = attrs.field(factory=LazyEvent)
    _news_wakers: set[anyio.Event] | None = None
    _isr_wake: LazyEvent = attrs.field(factory=LazyEvent)
    _committed_floor: int = 0
    _stored_value: bytes = b""
    _direct_ok: bool | None = None
    """True: Produce appends directly (one replica); False: for ALL acks only (replicated);
    None: never (a load-balance group)."""

    def __attrs_post_init__(self) -> None:
        # What the checkpoint file holds: an idle partition is not checkpointed again.
        ckpt = self.log.recovery.hw_checkpoint
        self._checkpointed_hw = -1 if ckpt is None else ckpt
        self._init_roles()
        self._stored_value = stored_value(self.stream, self.partition)
        self.skip_copies = stored_skip(self.stream, self.partition)
        self._direct_ok = None if self.queue_group else self.replication_factor == 1

    # ---------------------------------------------------------------- read side

    @property
    def closed(self) -> bool:
        """True once the partition stopped (deleted or shutting down)."""
        return self._closed

    @property
    def high_watermark(self) -> int:
        """First offset not yet committed."""
        return int(self.log.high_watermark)

    async def wait_for_hw_above(self, offset: int, timeout_s: float) -> None:
        """Return when the HW passes ``offset``, the partition stops, or ``timeout_s`` passes."""
        self.fetch_waiters += 1
        try:
            deadline = time.monotonic() + timeout_s
            while self.log.high_watermark <= offset and not self._closed and not self._stopping:
                left = deadline - time.monotonic()
                if left <= 0 or not await self._hw_moved.wait_within(left):
                    return
        finally:
            self.fetch_waiters -= 1

    def wake_waiters(self) -> None:
        """Wake every fetch waiting on this partition (HW move, stop, shutdown)."""
        event, self._hw_moved = self._hw_moved, LazyEvent()
        event.set()

    # ---------------------------------------------------------------- lifecycle

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Run sequencer and flusher until :meth:`stop`; then flush, checkpoint the HW and
        close the log (also when cancelled). HW checkpoints and maintenance meanwhile come
        from the server's one housekeeping task (:mod:`jetserver.broker.housekeeping`)."""
        try:
            async with anyio.create_task_group() as tg:
                await self._scrub_at_open()
                self._tg = tg  # role tasks may start (apply_assignment waits until then)
                self._run_started.set()
                task_status.started()
                await self._sequencer()
                tg.cancel_scope.cancel()
        finally:
            self._tg = None
            self._run_started.set()  # an apply_assignment waiting for run: it is over
            with anyio.CancelScope(shield=True):
                await self._finish()

    def _request_flush(self) -> None:
        """Have the flusher fsync what was appended. The flusher task starts on the first
        request: an idle partition has none (a task is about 4 KB; a server holds thousands
        of idle partitions). Not running (``run`` ended): nothing to do, its end flushed."""
        if not self._flushing:
            if self._tg is None:
                return
            self._flushing = True
            self._dirty = anyio.Event()
            self._tg.start_soon(self._flusher)
        self._dirty.set()

    def stop(self, *, drain: bool = True) -> None:
        """Ask :meth:`run` to end (``drain``: what is queued is appended first); new
        messages are refused from now on; :meth:`run` unsubscribes and closes the log."""
        self._stopping = True
        self._drain = drain
        self._run_started.set()  # apply_assignment stops waiting for run: none will come
        self._wake.set()
        self._space.set()
        self.wake_waiters()
        self._wake_replicas()

    async def wait_stopped(self) -> None:
        """Return once :meth:`run` has closed the log."""
        await self._stopped.wait()

    async def _finish(self) -> None:
        try:
            await self._unsubscribe()
            if not self._closed:
                try:
                    log_ = self.log
                    if log_.sync_failure is None and log_.flushed_offset >= log_.log_end_offset:
                        flushed = log_.flushed_offset  # nothing to flush: no thread round trip
                    else:
                        flushed = await anyio.to_thread.run_sync(log_.flush)
                    await self._commit(flushed)
                except Exception:
                    log.exception("final flush failed", extra=self._fields())
                await self._fail_pending_all(ErrorCode.SHUTTING_DOWN, "partition stopped")
                try:
                    # In a worker thread: its fsyncs (indexes, the HW checkpoint, the
                    # clean-shutdown marker) would hold the event loop, thousands of
                    # partitions in a row at a server's stop.
                    if self.closer is not None:
                        await self.closer(self.log)
                    else:
                        await anyio.to_thread.run_sync(self.log.close)
                except Exception:
                    log.exception("closing the log failed", extra=self._fields())
        finally:
            self._closed = True
            self.wake_waiters()
            self._stopped.set()

    # ---------------------------------------------------------------- sequencer

    async def _sequencer(self) -> None:
        while True:
            if not self._queue or self._appending:
                if self._stopping and not self._appending and not self._queue:
                    return
                self._wake = LazyEvent()
                await self._wake.wait()
                continue
            if self._stopping and not self._drain:
                self._queue.clear()
                return
            batch: list[Ingested] = []
            size = 0
            while self._queue and (not batch or size < self.ingest.max_batch_bytes):
                item = self._queue.popleft()
                batch.append(item)
                size += len(item[2])
            self._queued_bytes -= size
            if self._queued_bytes < self.ingest.max_pending_bytes:
                self._space.set()
            self._appending = True
            try:
                await self._append_batch(batch)
            except Exception:
                # A bug must not stop the partition: the batch's publishers time out.
                log.exception("ingest batch failed", extra=self._fields(messages=len(batch)))
            finally:
                self._appending = False
            await anyio.lowlevel.checkpoint()

    async def _append_now(self, batch: list[Ingested]) -> None:
        """Append ``batch`` in the calling task, as the sequencer would (the caller checked
        that nothing is queued or being appended, so the order is the same).

        A Produce request that finds its partition idle appends its messages itself: the
        sequencer's wake-up and the request's wait for its acks are two event-loop turns
        on the way to the ack, each about 0.1 ms on the 2-core dev VM at light load (``python
        -m bench latency``: ``sink -> append`` and ``acked -> resp.produce``). Shielded: a
        request cancelled meanwhile (its connection closed) must not cut the acks and the
        HW move that follow an append short."""
        self._appending = True
        try:
            with anyio.CancelScope(shield=True):
                await self._append_batch(batch)
        except Exception:
            log.exception("ingest batch failed", extra=self._fields(messages=len(batch)))
        finally:
            self._appending = False
            if self._queue or self._stopping:
                self._wake.set()

    async def _publish_acks(self, items: list[tuple[str, PartitionAck]]) -> None:
        await self.acks.publish(self.stream, self.partition, items)

    async def _append_batch(self, batch: list[Ingested]) -> None:
        if not self._core.leading:
            return  # queued before this replica stopped leading: its publishers retry
        bodies: list[bytes] = []
        wanted: list[_Wanted | None] = []  # one per body (None: no ack, no producer)
        now: list[tuple[str, PartitionAck]] = []  # acks to send after this batch
        dups: list[tuple[_Wanted, int | None, int, int]] = []  # (who, batch index, offset, ts)
        in_batch: dict[tuple[int, int] | bytes, int] = {}  # producer (id, seq) or msg id
        msg_ids: list[tuple[int, bytes]] = []  # (batch index, Nats-Msg-Id) of plain messages
        limit = self.max_message_bytes
        plain_prefix = self._fields_cache.plain_prefix
        for subject, reply, data, nats_headers in batch:
            if not reply and not nats_headers and data[:4] != COOKIE:
                # Fast path: a plain message with nothing to ack (the bulk of cross-talk).
                if len(data) > limit:
                    self.messages_rejected += 1
                    continue
                prefix = plain_prefix.get(subject)
                if prefix is None:
                    prefix = self._fields_cache.new_plain_prefix(subject)
                if prefix:
                    bodies.append(b"".join((prefix, _U32.pack(len(data)), data)))
                    wanted.append(None)
                    continue
            env = None
            if isinstance(nats_headers, DirectRecord):
                # A Produce message appended directly: its record from the request's bytes.
                subjects = self._fields_cache.subjects(subject, reply)
                if subjects is not None:
                    env = direct_record(nats_headers, subjects)
                nats_headers = None
            elif data[:4] == COOKIE:
                subjects = self._fields_cache.subjects(subject, reply)
                if subjects is not None:
                    # The record body straight from the envelope's bytes (no decoding into
                    # objects); None: not a valid envelope, so a plain message.
                    env = envelope_record(data, subjects)
            producer_id: int | None = None
            producer_seq = 0
            body: bytes | None = None
            headers: tuple[tuple[str, bytes], ...] = ()
            key: bytes | None = None
            controls: Controls | RecordControls | None = None
            if env is not None:
                body, size, inbox, corr, policy, producer_id, producer_seq, controls = env
                if not inbox:
                    policy = AckPolicy.NONE
            else:
                corr = ""
                headers = nats_headers or ()
                inbox = JSON_ACK_MARK + reply if reply else ""  # a plain request: JSON ack
                policy = AckPolicy.LEADER if reply else AckPolicy.NONE
                if headers and (controls := read_controls(headers)) is not None:
                    headers, asked, key = controls.headers, controls.policy, controls.key
                    if reply and asked is not None:
                        policy = asked
                size = len(data) + len(key or b"") + sum(len(n) + len(v) for n, v in headers)
            who = _new_tuple(_Wanted, (inbox, corr, policy, producer_id, producer_seq))
            if controls is not None:
                if controls.error:
                    self.messages_rejected += 1
                    self._error_ack(now, who, ErrorCode.INVALID_ARGUMENT, controls.error)
                    continue
                if controls.msg_id is not None:
                    seen = self._seen_msg_id(controls.msg_id, in_batch)
                    if seen is not None:
                        dups.append((who, *seen))
                        continue
            if size > limit:
                self.messages_rejected += 1
                text = f"message of {size} bytes exceeds max_message_bytes {limit}"
                self._error_ack(now, who, ErrorCode.MESSAGE_TOO_LARGE, text)
                continue
            if policy == AckPolicy.ALL and not self._core.enough_replicas():
                self.messages_rejected += 1
                self._error_ack(now, who, ErrorCode.NOT_ENOUGH_REPLICAS, self._core.isr_text())
                continue
            if producer_id is not None:
                stored = self._core.producers.lookup(producer_id, producer_seq)
                if stored is not None:
                    dups.append((who, None, stored[0], stored[1]))
                    continue
                index = in_batch.get((producer_id, producer_seq))
                if index is not None:
                    dups.append((who, index, -1, -1))
                    continue
                in_batch[(producer_id, producer_seq)] = len(bodies)
            if body is None:  # a plain message
                try:
                    body = encode_body(data, key=key, subject=subject, reply=reply, headers=headers)
                except CodecError as exc:
                    self.messages_rejected += 1
                    self._error_ack(now, who, ErrorCode.INVALID_ARGUMENT, str(exc))
                    continue
            if controls is not None:  # a plain message's or a Produce message's
                expected = controls.expected_offset
                if expected is not None and expected != self.log.log_end_offset + len(bodies):
                    self.messages_rejected += 1
                    got = self.log.log_end_offset + len(bodies)
                    text = f"expected offset {expected}, but the next offset is {got}"
                    self._error_ack(now, who, ErrorCode.WRONG_EXPECTED_OFFSET, text)
                    continue
                if controls.msg_id is not None:
                    in_batch[controls.msg_id] = len(bodies)
                    msg_ids.append((len(bodies), controls.msg_id))
            bodies.append(body)
            wanted.append(who)
        first, ts = -1, -1
        if bodies:
            try:
                first, ts = self.log.append(bodies, wall_ns(), self.leader_epoch)
            except Exception as exc:
                log.error("append failed", extra=self._fields(records=len(bodies), error=repr(exc)))
                self.messages_rejected += len(bodies)
                for maybe in wanted:
                    if maybe is not None:
                        self._error_ack(now, maybe, ErrorCode.STORAGE_ERROR, str(exc))
                for who, index, _o, _t in dups:
                    if index is not None:
                        self._error_ack(now, who, ErrorCode.STORAGE_ERROR, str(exc))
                dups = [d for d in dups if d[1] is None]
                wanted = []
            else:
                self.messages_in += len(bodies)
                if hops.ENABLED:
                    hops.mark("append")
                committed = self._core.appended(first + len(bodies), self.log.high_watermark)
                if committed is not None:  # durability "written": committed once appended
                    await self._carry_out(committed)
                self._acks_after_append(now, wanted, first, ts)
                for index, msg_id in msg_ids:
                    self._core.producers.record_msg_id(msg_id, first + index, ts)
                if self._core.leader_state is not None:  # followers store them meanwhile
                    self._wake_replicas()
                self._request_flush()
        for who, index, offset, stamp in dups:
            if index is not None:
                offset, stamp = first + index, ts
            self._success_ack(now, who, offset, stamp, ErrorCode.DUPLICATE_SEQUENCE)
        if now:
            await self._publish_acks(now)

    def _acks_after_append(
        self,
        out: list[tuple[str, PartitionAck]],
        wanted: list[_Wanted | None],
        first: int,
        ts: int,
    ) -> None:
        """:meth:`_success_ack` for each appended message (``wanted[i]`` at ``first + i``),
        inlined (this runs per message) and recording idempotent producers."""
        hw = self.log.high_watermark
        core = self._core
        producers = core.producers
        offset = first - 1
        for who in wanted:
            offset += 1
            if who is None:
                continue
            inbox, corr, policy, producer_id, producer_seq = who
            if producer_id is not None:
                producers.record(producer_id, producer_seq, offset, ts)
            if policy == _LEADER:
                out.append((inbox, _new_tuple(PartitionAck, (offset, ts, corr, policy, 0, ""))))
            elif policy == _ALL:
                ack = _new_tuple(PartitionAck, (offset, ts, corr, policy, 0, ""))
                if offset < hw:
                    out.append((inbox, ack))
                    continue
                core.add_pending(PendingAck(offset, inbox, ack))

    def _seen_msg_id(
        self, msg_id: bytes, in_batch: dict[tuple[int, int] | bytes, int]
    ) -> tuple[int | None, int, int] | None:
        """Where a plain message with ``msg_id`` is already stored, as a ``dups`` entry's
        tail ``(batch index or None, offset, timestamp)``; None if it is new."""
        window_ns = int(self._core.duplicate_window_s * 1e9)
        stored = self._core.producers.lookup_msg_id(msg_id, wall_ns(), window_ns)
        if stored is not None:
            return None, stored[0], stored[1]
        index = in_batch.get(msg_id)
        return (index, -1, -1) if index is not None else None

    def _error_ack(
        self, out: list[tuple[str, PartitionAck]], who: _Wanted, code: ErrorCode, text: str
    ) -> None:
        if who.policy != AckPolicy.NONE:
            out.append((who.inbox, PartitionAck(-1, -1, who.corr, who.policy, code, text)))

    def _success_ack(
        self,
        out: list[tuple[str, PartitionAck]],
        who: _Wanted,
        offset: int,
        ts: int,
        code: ErrorCode = ErrorCode.NONE,
    ) -> None:
        """LEADER: ack now; ALL: once the HW passes ``offset`` (now if it already has)."""
        if who.policy == AckPolicy.NONE:
            return
        text = "" if code == ErrorCode.NONE else f"already stored at offset {offset}"
        ack = PartitionAck(offset, ts, who.corr, who.policy, code, text)
        if who.policy == AckPolicy.ALL and offset >= self.log.high_watermark:
            self._core.add_pending(PendingAck(offset, who.inbox, ack))
        else:
            out.append((who.inbox, ack))

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
                log.info("retention deleted segments", extra=self._fields(segments=deleted))
            if self.compact:
                report = await anyio.to_thread.run_sync(self.log.compact)
                log.debug("compacted", extra=self._fields(report=str(report)))
        except Exception as exc:
            log.warning("maintenance failed", extra=self._fields(error=repr(exc)))

    def _fields(self, **extra: Any) -> dict[str, Any]:
        return fields(stream=self.stream, partition=self.partition, **extra)
