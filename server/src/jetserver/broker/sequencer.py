"""The sequencer of a partition replica: its queue, and the append path.

Leader data path::

    Intake (NATS sink or callback, direct Produce) -> Sequencer queue -> Sequencer.run:
        parse, check, encode bodies, Log.append(batch) -> LEADER acks -> wake replica
        fetches (followers), then the committer's flusher (broker/commit.py)

A Produce request that finds the sequencer idle appends in its own task
(:meth:`Sequencer.append_now`), in the order it would have had in the queue.

Append preconditions (checked per message, just before it joins the batch it is appended
in) are in one place, :meth:`Sequencer.precondition_error`, which asks
:class:`~jetserver.broker.append_checks.AppendChecks`: ``Jet-Expected-Offset`` and
``Jet-Expected-Key-Offset``, from a plain message's header controls or a Produce message's
record controls (both Produce paths).

Task safety: event loop thread only; the sequencer is the log's single writer.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import struct
from collections.abc import Callable

import anyio
import attrs

from jetsdk.codec.envelope import COOKIE
from jetsdk.codec.error_codes import AckPolicy, ErrorCode
from jetsdk.codec.errors import CodecError
from jetsdk.codec.record import encode_body
from jetsdk.codec.record_controls import RecordControls
from jetsdk.codec.transcode import DirectRecord, envelope_record
from jetserver.broker.acks import JSON_ACK_MARK, AckRouter, PartitionAck
from jetserver.broker.append_batch import AppendBatch, Wanted, acks_after_append
from jetserver.broker.append_checks import AppendChecks, Refusal
from jetserver.broker.commit import Committer
from jetserver.broker.commit_group import IN_GROUP
from jetserver.broker.direct import (
    INVALID,
    NOT_LEADER,
    SHUTTING_DOWN,
    TOO_LARGE,
    DirectAckTo,
    DirectBatch,
    Result,
    fail_unappended,
    record_body,
)
from jetserver.broker.header_controls import Controls, read_controls
from jetserver.broker.ingested import Queued
from jetserver.broker.large_writes import LargeWrites, RoleEnded
from jetserver.broker.record_fields import RecordFields
from jetserver.broker.replica_base import ReplicaBase
from jetserver.config.server import IngestConfig
from jetserver.infra import hops
from jetserver.infra.lazy_event import LazyEvent
from jetserver.metadata.model import DURABILITY_FLUSHED
from jetserver.replication.core import ROLE_LEADER, ROLE_SINGLE
from jetserver.storage.clock import wall_ns
from jetserver.storage.epoch_writes import EPOCH_WRITES
from jetserver.storage.framing import Body, whole_bodies, whole_body
from jetserver.storage.fsync_runner import LARGE_WRITE_BYTES

log = logging.getLogger(__name__)

_U32 = struct.Struct(">I")
_UNSCOPED = contextlib.nullcontext()
_ALL = int(AckPolicy.ALL)
_POLICIES = {int(p): p for p in AckPolicy}
"""Ack policy by wire value (no EnumType.__call__ per request; checked when decoded)."""
DEFER_MAX_RECORDS = 16
"""Largest LEADER/NONE-acked request fsynced in its own after-work (else: the flusher's)."""
_new_tuple = tuple.__new__
"""Builds a NamedTuple from a tuple without its Python-level ``__new__`` (hot path)."""

__all__ = ["Sequencer"]


def _nothing() -> None:
    return None


@attrs.define(eq=False, repr=False)
class Sequencer:
    """The queue and the append path of one partition replica (module docstring)."""

    base: ReplicaBase
    """The replica's name, log, core and lifecycle (read only here)."""
    max_message_bytes: int
    """Largest message stored (value + key + headers)."""
    ingest: IngestConfig
    """Batching and backpressure settings."""
    acks: AckRouter
    """Where acks to NATS inboxes go."""
    committer: Committer
    """Flushes what is appended; carries out the core's outcome of an append."""
    wake_replicas: Callable[[], None] = _nothing
    """Wakes parked replica fetches (followers store appended records before the fsync)."""
    leader_epoch: int = 0
    """Epoch stamped on appended records (set by the role driver)."""
    compact: bool = False
    """The stream is compacted (``Jet-Expected-Key-Offset`` is allowed)."""
    checks: AppendChecks = attrs.Factory(AppendChecks)
    """The append preconditions and their key index."""
    messages_in: int = 0
    """Messages appended since start."""
    messages_rejected: int = 0
    """Messages refused (too large, bad fields, storage errors)."""
    _queue: collections.deque[Queued] | None = None
    """Made on first use: an idle partition holds no deque (760 bytes each, issue 34)."""
    _queued_bytes: int = 0
    _wake: LazyEvent = attrs.field(factory=LazyEvent)
    _space: LazyEvent = attrs.field(factory=LazyEvent)
    _appending: bool = False
    """A batch is being appended (:meth:`run` or :meth:`append_now`); the other waits."""
    _fields_cache: RecordFields = attrs.field(factory=RecordFields)
    _hold_flush: bool = False
    """:meth:`append_now` commits in its caller's task: the append leaves the flush to it."""
    _flush_held: bool = False
    """An append left its flush to :meth:`append_now`."""
    _epoch_noted: int = -1  # the epoch whose start is in the epoch cache (_note_epoch)
    _races_seen: int = 0
    """``checks.lost_races`` at the last :meth:`lost_race_since_commit`."""
    large: LargeWrites = attrs.field(factory=LargeWrites)
    """Its appends of a few large records, from a worker thread (a role's end waits)."""

    # ---------------------------------------------------------------- the queue

    def __repr__(self) -> str:
        return self.base.part_repr(self)

    @property
    def idle(self) -> bool:
        """True if nothing is queued or being appended (:meth:`append_now` may run)."""
        return not self._queue and not self._appending

    @property
    def has_room(self) -> bool:
        """True while the queue is below ``max_pending_bytes``."""
        return self._queued_bytes < self.ingest.max_pending_bytes

    async def wait_for_room(self) -> None:
        """Wait until the queue has room or the replica stops."""
        while self._queued_bytes >= self.ingest.max_pending_bytes and not self.base.life.stopping:
            self._space = LazyEvent() if self._space.is_set() else self._space
            await self._space.wait()

    def offer(self, item: Queued, size: int) -> None:
        """Queue one message of ``size`` bytes and wake :meth:`run`."""
        queue = self._queue
        if queue is None:
            queue = self._queue = collections.deque()
        queue.append(item)
        self._queued_bytes += size
        self._wake.set()

    def drop_queued(self) -> None:
        """Forget what is queued (the role ended: NATS publishers retry, direct requests
        are answered NOT_LEADER)."""
        if self._queue:
            fail_unappended(self._queue, NOT_LEADER)
            self._queue.clear()
        self._queued_bytes = 0
        self._space.set()

    def wake(self) -> None:
        """Wake :meth:`run` and the waits for room (a stop)."""
        self._wake.set()
        self._space.set()

    # ---------------------------------------------------------------- the loop

    async def run(self) -> None:
        """Append queued batches until the replica stops (draining the queue if asked)."""
        life = self.base.life
        while True:
            queue = self._queue
            if not queue or self._appending:
                if life.stopping and not self._appending and not queue:
                    return
                self._wake = LazyEvent()
                await self._wake.wait()
                continue
            if life.stopping and not life.drain:
                fail_unappended(queue, SHUTTING_DOWN)
                queue.clear()
                return
            batch: list[Queued] = []
            size = 0
            while queue and (not batch or size < self.ingest.max_batch_bytes):
                item = queue.popleft()
                batch.append(item)
                size += item.size if isinstance(item, DirectBatch) else len(item[2])
            self._queued_bytes -= size
            if self._queued_bytes < self.ingest.max_pending_bytes:
                self._space.set()
            self._appending = True
            try:
                await self._append_batch(batch)
            except Exception:
                # A bug must not stop the partition: the batch's publishers time out.
                log.exception("ingest batch failed", extra=self.base.fields(messages=len(batch)))
            finally:
                self._appending = False
            await anyio.lowlevel.checkpoint()

    async def append_now(self, batch: list[Queued], *, shield: bool = True) -> None:
        """Append ``batch`` in this task, as :meth:`run` would (the caller saw :attr:`idle`).

        A Produce request that finds its partition idle appends its messages itself (no
        sequencer wake-up, no wait for acks), and may commit in this task too
        (:meth:`_commit_in_task`). ``shield``: a cancel scope of the caller's (its timeout)
        must not cut the acks and HW move that follow an append short; False where the
        caller has none (a jet-port request in its own task, ``produce_then``)."""
        here, after = self._commit_in_task(batch)
        self._appending = True
        self._hold_flush = here or after
        try:
            if shield:
                with anyio.CancelScope(shield=True):
                    await self._append_batch(batch)
            else:  # (no null context: two Python calls per request)
                await self._append_batch(batch)
        except Exception:
            log.exception("ingest batch failed", extra=self.base.fields(messages=len(batch)))
        except BaseException:  # cancelled (its connection failed): the flusher commits
            if self._flush_held:
                self._flush_held = False
                self.committer.request_flush()
            raise
        finally:
            self._appending = False
            self._hold_flush = False
            if self._queue or self.base.life.stopping:
                self._wake.set()
        if self._flush_held:
            self._flush_held = False
            if here:
                with anyio.CancelScope(shield=True) if shield else _UNSCOPED:
                    await self.committer.commit_here(self.lost_race_since_commit)
            else:
                self.committer.defer_flush(start=self.base.core.role == ROLE_LEADER)

    def append_one_now(self, subject: str, record: DirectRecord) -> Result | None:
        """:meth:`append_now` of one direct message, no header controls and no producer id
        (an ALL ack at a replicated leader: the caller saw ``enough_replicas``), its outcome
        returned, not settled on a completion (broker/produce_one.py), with no await: the
        checks, append, commit and flush of :meth:`_take_direct` and :meth:`_append`; acks
        to NATS inboxes and a leadership end its commit leaves go in a task. None (nothing
        done): a large write (the general path's, from a worker thread)."""
        core = self.base.core
        if not core.leading:
            return NOT_LEADER
        subjects = self._fields_cache.subjects(subject, "")
        if subjects is None or record.size > self.max_message_bytes:
            self.messages_rejected += 1
            return INVALID if subjects is None else TOO_LARGE
        body = record_body(record, subjects)
        if len(body[0]) + len(body[1]) >= LARGE_WRITE_BYTES:  # FsyncRunner.is_large of one
            return None
        self._appending = True
        try:
            if hops.ENABLED:
                hops.mark("append.start")
            try:
                first, ts = self.base.log.append_one(body, wall_ns(), self._epoch_to_note())
            except Exception as exc:
                log.error("append failed", extra=self.base.fields(records=1, error=repr(exc)))
                self.messages_rejected += 1
                return (int(ErrorCode.STORAGE_ERROR), -1, -1)
            self.messages_in += 1
            if hops.ENABLED:
                hops.mark("append")
            self.checks.appended(
                self.leader_epoch, self.committer.sync_failures, first, ts, (body,)
            )
            committed = core.appended(first + 1, self.base.log.high_watermark)
            if committed is not None:  # durability "written": committed once appended
                messages = self.committer.carry_out_now(committed)  # (carry_out, 2 parts)
                if messages or committed.leadership_ended:  # (never the usual message)
                    self.committer.carry_out_rest_soon(messages, committed.leadership_ended)
            if hops.ENABLED:
                hops.mark("acked")
            if core.leader_state is not None:
                self.wake_replicas()
        finally:
            self._appending = False
            if self._queue or self.base.life.stopping:
                self._wake.set()
        if core.policy.durability == DURABILITY_FLUSHED:  # (leading: single or leader)
            self.committer.defer_flush(start=core.role == ROLE_LEADER)  # as append_now's
        else:
            self.committer.request_flush()
        return (0, first, ts)

    async def _write(self, bodies: list[Body]) -> tuple[int, int]:
        """``log.append`` of ``bodies``: on the loop, or a large write from a worker thread
        (:class:`LargeWrites`; RoleEnded if the role ended meanwhile)."""
        written = self._write_here(bodies)
        if written is not None:
            return written
        runner = self.committer.fsyncs
        return await self.large.append(runner, self.base, bodies, self.leader_epoch)

    def _write_here(self, bodies: list[Body]) -> tuple[int, int] | None:
        """``log.append`` of ``bodies`` on the loop, after noting a new leader epoch; None
        (nothing written) if the write is large (:meth:`_write` hands it to a thread)."""
        epoch = self._epoch_to_note()
        if self.committer.fsyncs.is_large(bodies):
            return None
        return self.base.log.append(bodies, wall_ns(), epoch)

    def _epoch_to_note(self) -> int:
        """:attr:`leader_epoch`, its start noted first if this is its first append."""
        if self.leader_epoch != self._epoch_noted:
            self._note_epoch()
        return self.leader_epoch

    def _note_epoch(self) -> None:
        """Before the first append of :attr:`leader_epoch`: its start in the epoch cache,
        the file written by a worker thread (epoch_writes, as a new leader's), not on the
        loop by the append (a new stream's 500 partitions: 500 files made and renamed)."""
        log_ = self.base.log
        log_.epochs.assign(self.leader_epoch, log_.log_end_offset, deferred=EPOCH_WRITES.add)
        self._epoch_noted = self.leader_epoch

    def lost_race_since_commit(self) -> bool:
        """True if a compare-and-set was refused here since the last call (writers race
        on this partition: :meth:`Committer.commit_here` keeps the loop free for their
        retries)."""
        lost = self.checks.lost_races
        if lost == self._races_seen:
            return False
        self._races_seen = lost
        return True

    def _commit_in_task(self, batch: list[Queued]) -> tuple[bool, bool]:
        """Whether ``batch``, one direct request on a server alone with durability
        ``flushed`` (the commit is the fsync), is committed in its own task: (here, after)
        = it waits for the commit anyway (an ALL ack: fsync and commit before answering,
        :meth:`Committer.commit_here`); it does not and is small (LEADER, NONE, up to
        :data:`DEFER_MAX_RECORDS`: the fsync is left to its after-work, once its answer
        is written, :meth:`Committer.defer_flush`). Any size and any ack in an open
        :class:`FsyncGroup` (a ProduceMany's sections, broker/commit_group.py): the fsync
        is left to the request, which fsyncs and commits its partitions together. A
        replicated leader's: (False, True), started at once (``defer_flush(start=True)``)."""
        item = batch[0] if len(batch) == 1 else None
        core = self.base.core
        if not (isinstance(item, DirectBatch) and core.policy.durability == DURABILITY_FLUSHED):
            return False, False
        if core.role != ROLE_SINGLE:
            return False, core.role == ROLE_LEADER
        group = IN_GROUP.get()
        if group is not None and group.join(self.committer):
            return False, True
        if item.policy == _ALL:
            return True, False
        return False, len(item.records) <= DEFER_MAX_RECORDS

    # ---------------------------------------------------------------- the append

    def precondition_error(
        self, body: bytes, controls: Controls | RecordControls, pending: list[bytes]
    ) -> Refusal | None:
        """The one place for append preconditions: why the message with record ``body`` and
        ``controls`` must not be appended after ``pending`` (the bodies of its batch before
        it), or None if it may (broker/append_checks.py)."""
        return self.checks.refusal(
            self.base.log,
            self.leader_epoch,
            self.compact,
            body,
            controls,
            pending,
            cuts=self.committer.sync_failures,
        )

    async def _publish_acks(self, items: list[tuple[str, PartitionAck]]) -> None:
        await self.acks.publish(self.base.stream, self.base.partition, items)

    async def _append_batch(self, batch: list[Queued]) -> None:
        core = self.base.core
        if not core.leading:
            # Queued before this replica stopped leading: NATS publishers retry; direct
            # requests are answered NOT_LEADER (they may ask the new leader at once).
            fail_unappended(batch, NOT_LEADER)
            return
        b = AppendBatch()
        limit = self.max_message_bytes
        cache = self._fields_cache
        plain_prefix = cache.plain_prefix
        for item in batch:
            if isinstance(item, DirectBatch):
                self._take_direct(b, item)
                continue
            subject, reply, data, nats_headers = item
            if not reply and not nats_headers and data[:4] != COOKIE:
                # Fast path: a plain message with nothing to ack (the bulk of cross-talk).
                if len(data) > limit:
                    self.messages_rejected += 1
                    continue
                prefix = plain_prefix.get(subject)
                if prefix is None:
                    prefix = cache.new_plain_prefix(subject)
                if prefix:
                    b.bodies.append(b"".join((prefix, _U32.pack(len(data)), data)))
                    b.wanted.append(None)
                    continue
            env = None
            if data[:4] == COOKIE:
                subjects = cache.subjects(subject, reply)
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
            who = _new_tuple(Wanted, (inbox, corr, policy, producer_id, producer_seq))
            if controls is not None and self._controls_refused(b, who, controls):
                continue
            producers = self.base.core.producers  # (Jet-Seq marks: broker/seq_marks.py)
            if self._refused(b, who, size, policy) or b.duplicate_or_skips(
                who, producers, nats_headers
            ):
                continue
            if body is None:  # a plain message
                try:
                    body = encode_body(data, key=key, subject=subject, reply=reply, headers=headers)
                except CodecError as exc:
                    self.messages_rejected += 1
                    b.error_ack(who, ErrorCode.INVALID_ARGUMENT, str(exc))
                    continue
            if controls is not None and self._precondition_failed(b, who, body, controls):
                continue
            b.bodies.append(body)
            b.wanted.append(who)
        await self._append(b)

    def _take_direct(self, b: AppendBatch, batch: DirectBatch) -> None:
        """Admit the messages of a direct Produce request into ``b``: their record bodies
        cut from the request's bytes (no envelope parsed), acked to its completion."""
        cache = self._fields_cache
        policy = _POLICIES[batch.policy]
        completion = batch.completion
        producers = self.base.core.producers
        start = batch.sequence_start  # (its first message's)
        for subject, record, index in zip(
            batch.subjects, batch.records, batch.indexes, strict=True
        ):
            to = _new_tuple(DirectAckTo, (completion, index))
            who = _new_tuple(Wanted, (to, "", policy, record.producer_id, record.producer_seq))
            first, start = start, False
            subjects = cache.subjects(subject, "")
            if subjects is None:  # a subject over its limit (the Produce service checked)
                self.messages_rejected += 1
                b.error_ack(who, ErrorCode.INVALID_ARGUMENT, "invalid subject")
                continue
            controls = record.controls
            if controls is not None and self._controls_refused(b, who, controls):
                continue
            if (
                self._refused(b, who, record.size, policy)
                or b.out_of_order(who, producers, first)
                or b.duplicate(who, producers)
            ):
                continue
            body = record_body(record, subjects)
            if controls is not None and self._precondition_failed(b, who, body, controls):
                continue
            b.bodies.append(body)
            b.wanted.append(who)

    def _controls_refused(
        self, b: AppendBatch, who: Wanted, controls: Controls | RecordControls
    ) -> bool:
        """True if the header controls settle the message before it is stored: invalid
        (answered INVALID_ARGUMENT) or a ``Nats-Msg-Id`` already seen (answered as that
        duplicate). The same on both ingest paths."""
        if controls.error:
            self.messages_rejected += 1
            b.error_ack(who, ErrorCode.INVALID_ARGUMENT, controls.error)
            return True
        if controls.msg_id is not None:
            core = self.base.core
            window_ns = int(core.duplicate_window_s * 1e9)
            seen = b.seen_msg_id(controls.msg_id, core.producers, wall_ns(), window_ns)
            if seen is not None:
                b.dups.append((who, *seen))
                return True
        return False

    def _precondition_failed(
        self, b: AppendBatch, who: Wanted, body: Body, controls: Controls | RecordControls
    ) -> bool:
        """True (after its error ack) if the message may not join ``b``; otherwise its
        ``Nats-Msg-Id`` is noted as in this batch."""
        b.split_from, pending = len(b.bodies), whole_bodies(b.bodies, b.split_from)  # for CAS
        refused = self.precondition_error(whole_body(body), controls, pending)
        if refused is not None:
            self.messages_rejected += 1
            code, text, offset = refused
            b.error_ack(who, code, text, offset)
            return True
        if controls.msg_id is not None:
            b.in_batch[controls.msg_id] = len(b.bodies)
            b.msg_ids.append((len(b.bodies), controls.msg_id))
        return False

    def _refused(self, b: AppendBatch, who: Wanted, size: int, policy: AckPolicy) -> bool:
        """True (after its error ack) if a message of ``size`` bytes must not be stored:
        too large, or an ALL ack with too few replicas in sync."""
        limit = self.max_message_bytes
        if size > limit:
            self.messages_rejected += 1
            text = f"message of {size} bytes exceeds max_message_bytes {limit}"
            b.error_ack(who, ErrorCode.MESSAGE_TOO_LARGE, text)
            return True
        if policy == AckPolicy.ALL and not self.base.core.enough_replicas():
            self.messages_rejected += 1
            b.error_ack(who, ErrorCode.NOT_ENOUGH_REPLICAS, self.base.core.isr_text())
            return True
        return False

    async def _append(self, b: AppendBatch) -> None:
        """Append the admitted bodies of ``b``; then acks, duplicates' acks, the flush."""
        core = self.base.core
        log_ = self.base.log
        bodies = b.bodies
        wanted = b.wanted
        dups = b.dups
        first, ts = -1, -1
        if bodies:
            if hops.ENABLED:
                hops.mark("append.start")
            try:
                first, ts = await self._write(bodies)
            except Exception as exc:
                code = ErrorCode.NOT_LEADER if type(exc) is RoleEnded else ErrorCode.STORAGE_ERROR
                log.error(
                    "append failed", extra=self.base.fields(records=len(bodies), error=repr(exc))
                )
                self.messages_rejected += len(bodies)
                for maybe in wanted:
                    if maybe is not None:
                        b.error_ack(maybe, code, str(exc))
                for who, index, _o, _t in dups:
                    if index is not None:
                        b.error_ack(who, code, str(exc))
                dups = [d for d in dups if d[1] is None]
                wanted = []
            else:
                self.messages_in += len(bodies)
                if hops.ENABLED:
                    hops.mark("append")
                cuts = self.committer.sync_failures
                self.checks.appended(self.leader_epoch, cuts, first, ts, bodies)
                committed = core.appended(first + len(bodies), log_.high_watermark)
                if committed is not None:  # durability "written": committed once appended
                    await self.committer.carry_out(committed)
                acks_after_append(b.now, wanted, first, ts, log_.high_watermark, core)
                for index, msg_id in b.msg_ids:
                    core.producers.record_msg_id(msg_id, first + index, ts)
                if core.leader_state is not None:  # followers store them meanwhile
                    self.wake_replicas()
                if self._hold_flush:
                    self._flush_held = True  # append_now commits it in the request's task
                else:
                    self.committer.request_flush()
        for who, index, offset, stamp in dups:
            if index is not None:
                offset, stamp = first + index, ts
            b.success_ack(
                who, offset, stamp, core, log_.high_watermark, ErrorCode.DUPLICATE_SEQUENCE
            )
        if b.now:
            await self._publish_acks(b.now)
