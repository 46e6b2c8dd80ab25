"""The commit half of a partition replica: group commit (fsync) and what follows it.

:class:`Committer` is mixed into :class:`~jetserver.broker.partition.PartitionReplica`
(which holds the fields declared here). Its flusher task waits until records were
appended, fsyncs them in a worker thread (one fsync covers everything appended so far),
then moves the high watermark (single server: to the flushed offset; leader: per the ISR),
sends the ALL acks the HW passed and wakes parked fetches. Records appended during an
fsync are covered by the next one (group commit).

Task safety: event loop thread (Log.flush runs in a worker thread, which the storage engine
allows concurrently with the single writer).
"""

from __future__ import annotations

import collections
import logging
from collections.abc import Callable
from typing import Any, NamedTuple

import anyio

from jetsdk.codec.error_codes import ErrorCode
from jetserver.broker.acks import PartitionAck
from jetserver.broker.producers import ProducerTable
from jetserver.broker.roles import ROLE_SINGLE
from jetserver.replication import LeaderState
from jetserver.storage import Log, SyncFailedError

log = logging.getLogger(__name__)

FLUSH_RETRY_S = 1.0
"""Pause before retrying after a failed fsync."""


class PendingAck(NamedTuple):
    """An ALL ack waiting for the flush that covers its offset."""

    offset: int
    """The record's offset."""
    inbox: str
    """Where the ack goes."""
    ack: PartitionAck
    """The ack."""


class Committer:
    """The commit half of :class:`~jetserver.broker.partition.PartitionReplica`."""

    # Fields and methods of PartitionReplica used here.
    stream: str
    partition: int
    on_leadership_end: Callable[[str, int], None] | None
    log: Log
    _dirty: anyio.Event
    _role: str
    _leader_state: LeaderState | None
    _pending_all: collections.deque[PendingAck]
    _pending_unordered: bool
    wake_waiters: Callable[[], None]
    _wake_replicas: Callable[[], None]
    _publish_acks: Callable[[list[tuple[str, PartitionAck]]], Any]
    _isr_text: Callable[[], str]
    _fields: Callable[..., dict[str, Any]]
    producers: ProducerTable
    sync_failures: int
    stop: Callable[..., None]

    async def _flusher(self) -> None:
        while True:
            await self._dirty.wait()
            self._dirty = anyio.Event()
            target = self.log.log_end_offset
            try:
                flushed = await anyio.to_thread.run_sync(self.log.flush, target)
            except SyncFailedError as exc:
                await self._recover_unsynced(exc)
                self._dirty.set()
                continue
            except Exception as exc:
                log.error("flush failed; retrying", extra=self._fields(error=repr(exc)))
                await self._fail_pending_all(ErrorCode.STORAGE_ERROR, f"flush failed: {exc}")
                await anyio.sleep(FLUSH_RETRY_S)
                self._dirty.set()
                continue
            await self._commit(flushed)

    async def _recover_unsynced(self, exc: Exception) -> None:
        """An fsync failed: cut the log back to its last good sync (spec/storage.md,
        "fsync errors"), forget what the cut removed, fail the ALL acks waiting for it.

        The cut, the producer table and the pending acks change with no await in between,
        so no append, duplicate check or ack interleaves. The replica keeps its role: no
        follower holds anything above the leader's flushed offset and no consumer read
        past the HW, so the records that come next at the cut offsets diverge from nothing.
        """
        log_ = self.log
        if log_.sync_failure is None:
            return
        self.sync_failures += 1
        cut_from = log_.flushed_offset
        leo = log_.log_end_offset
        try:
            end = log_.recover_unsynced()
        except Exception as again:
            log.critical(
                "fsync failed and the log cannot be cut back to disk; stopping the partition",
                extra=self._fields(error=repr(again), first_error=repr(exc)),
            )
            self.stop(drain=False)
            return
        self.producers.forget_from(end)
        if self._leader_state is not None:
            self._leader_state.on_cut(end)
        lost = [p for p in self._pending_all if p.offset >= end]
        self._pending_all = collections.deque(p for p in self._pending_all if p.offset < end)
        log.error(
            "fsync failed: cut the log back to its last good sync; the records above it "
            "must come again from their producers or the leader",
            extra=self._fields(error=repr(exc), flushed=cut_from, leo_was=leo, leo=end),
        )
        text = f"fsync failed, the record is not stored (retry): {exc}"
        failed = [
            (p.inbox, p.ack._replace(error_code=ErrorCode.STORAGE_ERROR, error_message=text))
            for p in lost
        ]
        if failed:
            await self._publish_acks(failed)

    async def _commit(self, flushed: int) -> None:
        """The log is fsynced up to ``flushed``: move the HW (single: to ``flushed``; leader:
        per the ISR), ack ALL, wake fetches."""
        state = self._leader_state
        if state is not None:
            state.on_append(self.log.log_end_offset)
            moved = state.on_flush(flushed)
            self._wake_replicas()
            if moved:
                await self._advance_hw()
            return
        if self._role != ROLE_SINGLE:
            return
        if flushed > self.log.high_watermark:
            self.log.set_high_watermark(flushed)
            self.wake_waiters()
        await self._ack_committed(flushed, True)

    async def _advance_hw(self) -> None:
        """Leader: apply the HW of the leader state, ack what it committed."""
        state = self._leader_state
        if state is None:
            return
        if state.hw > self.log.high_watermark:
            self.log.set_high_watermark(state.hw)
            self.wake_waiters()
        self._wake_replicas()
        await self._ack_committed(self.log.high_watermark, state.committed_on_enough())

    async def _ack_committed(self, hw: int, enough: bool) -> None:
        """Send the pending ALL acks below ``hw`` (as NOT_ENOUGH_REPLICAS unless ``enough``)."""
        done: list[PendingAck] = []
        while self._pending_all and self._pending_all[0].offset < hw:
            done.append(self._pending_all.popleft())
        if self._pending_unordered:
            keep = collections.deque[PendingAck]()
            for p in self._pending_all:
                if p.offset < hw:
                    done.append(p)
                else:
                    keep.append(p)
            self._pending_all = keep
            self._pending_unordered = any(a.offset > b.offset for a, b in zip(keep, list(keep)[1:]))
        if not done:
            return
        if enough:
            await self._publish_acks([(p.inbox, p.ack) for p in done])
            return
        text = (
            "committed on fewer than min_isr replicas (the ISR shrank before the record "
            f"committed); it may not survive a failure. {self._isr_text()}"
        )
        failed = [
            (
                p.inbox,
                p.ack._replace(error_code=ErrorCode.NOT_ENOUGH_REPLICAS, error_message=text),
            )
            for p in done
        ]
        await self._publish_acks(failed)

    async def _fail_pending_all(self, code: ErrorCode, message: str) -> None:
        failed = [
            (p.inbox, p.ack._replace(error_code=code, error_message=message))
            for p in self._pending_all
        ]
        self._pending_all.clear()
        if failed:
            await self._publish_acks(failed)
        if code == ErrorCode.NOT_LEADER and self.on_leadership_end is not None:
            self.on_leadership_end(self.stream, self.partition)
