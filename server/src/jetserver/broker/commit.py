"""The commit half of a partition replica: group commit (fsync) and what follows it.

:class:`Committer` is mixed into :class:`~jetserver.broker.partition.PartitionReplica`
(which holds the fields declared here). Its flusher task waits until records were
appended, fsyncs them (one fsync covers everything appended so far) on the event loop or
in a worker thread as :class:`~jetserver.fsync_runner.FsyncRunner` decides,
then tells the replica's :class:`~jetserver.replication.core.ReplicaCore`, which says what
follows: the high watermark to set (single server: the flushed offset; leader: per the
ISR), the ALL acks to send, whom to wake (:meth:`Committer._carry_out`). Records appended
during an fsync are covered by the next one (group commit).

Task safety: event loop thread (Log.flush runs in a worker thread, which the storage engine
allows concurrently with the single writer).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

import anyio

from jetsdk.codec.error_codes import ErrorCode
from jetserver import hops
from jetserver.broker.acks import AckRouter, PendingAck
from jetserver.fsync_runner import FsyncRunner
from jetserver.lazy_event import LazyEvent
from jetserver.metadata.model import DURABILITY_FLUSHED
from jetserver.replication.core import Outcome, ReplicaCore
from jetserver.storage import Log, SyncFailedError

log = logging.getLogger(__name__)

FLUSH_RETRY_S = 1.0
"""Pause before retrying after a failed fsync."""

__all__ = ["FLUSH_RETRY_S", "Committer", "PendingAck"]


class Committer:
    """The commit half of :class:`~jetserver.broker.partition.PartitionReplica`."""

    # Fields and methods of PartitionReplica used here.
    stream: str
    partition: int
    on_leadership_end: Callable[[str, int], None] | None
    log: Log
    _core: ReplicaCore[PendingAck]
    fsyncs: FsyncRunner
    _dirty: anyio.Event
    wake_waiters: Callable[[], None]
    _wake_replicas: Callable[[], None]
    acks: AckRouter
    _fields: Callable[..., dict[str, Any]]
    sync_failures: int
    stop: Callable[..., None]
    _hw_moved: LazyEvent
    _closed: bool
    _copies_tail: asyncio.Future[None] | None
    renew_leadership: Callable[[int], None]

    def copies_turn(self) -> tuple[asyncio.Future[None] | None, asyncio.Future[None]]:
        """A place in this partition's order of NATS copies, taken right after an append
        (so in append order): the previous holder's future (None: nothing pending before)
        and this one's, which its holder must finish once its copies went or were given
        up, so that a later request's copies never overtake these."""
        prev = self._copies_tail
        mine: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._copies_tail = mine
        return (None if prev is None or prev.done() else prev), mine

    async def wait_committed(self, end: int, failures: int, timeout_s: float) -> bool:
        """Wait until the HW reaches ``end``: True then; False (at once when seen) if
        :attr:`sync_failures` is no longer ``failures`` (an fsync failed since the caller
        read it: its cut may have taken records below ``end``), the log ends below
        ``end``, the replica closed, or ``timeout_s`` passed."""
        log_ = self.log
        deadline = time.monotonic() + timeout_s
        while True:
            if self.sync_failures != failures:
                return False
            if log_.high_watermark >= end:
                return True
            left = deadline - time.monotonic()
            if self._closed or log_.log_end_offset < end or left <= 0:
                return False
            await self._hw_moved.wait_within(left)

    async def _flusher(self) -> None:
        while True:
            await self._dirty.wait()
            self._dirty = anyio.Event()
            target = self.log.log_end_offset
            try:
                if hops.ENABLED:
                    hops.mark("fsync.start")
                # On the loop only where the fsync stands between a record and its
                # readers; with ``written``/``replicated`` it is background work.
                flushed = await self.fsyncs.flush(
                    self.log, target, on_loop=self._core.durability == DURABILITY_FLUSHED
                )
                if hops.ENABLED:
                    hops.mark("fsync.end")
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
        so no append, duplicate check or ack interleaves. No consumer read past the HW. A
        replica whose followers were sent none of the records cut keeps its role: the
        records that come next at the cut offsets diverge from nothing. A leader whose
        followers were sent some gives up its epoch in the same step and asks for the next
        one (:meth:`ReplicaCore.cut`).
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
        out = self._core.cut(end, f"fsync failed, the record is not stored (retry): {exc}")
        log.error(
            "fsync failed: cut the log back to its last good sync; the records above it "
            "must come again from their producers or the leader",
            extra=self._fields(error=repr(exc), flushed=cut_from, leo_was=leo, leo=end),
        )
        await self._carry_out(out)
        if out.renew_epoch is not None:
            self.renew_leadership(out.renew_epoch)

    async def _commit(self, flushed: int) -> None:
        """The log is fsynced up to ``flushed``: the core moves the HW and acks."""
        log_ = self.log
        await self._carry_out(
            self._core.flushed(flushed, leo=log_.log_end_offset, hw=log_.high_watermark)
        )

    async def _carry_out(self, out: Outcome[PendingAck]) -> None:
        """Do what the core decided: set the HW, answer the acks of this server's Produce
        requests, wake waiters and replica fetches, then send the acks that go through
        NATS. In that order: a producer's answer is the commit's latency, and a woken
        replica fetch answered first (the new HW, on its own) would run ahead of it."""
        moved = False
        if out.hw is not None and out.hw > self.log.high_watermark:
            if hops.ENABLED:
                hops.mark("hw")
            self.log.set_high_watermark(out.hw)
            moved = True
        messages = (
            self.acks.route(
                self.stream,
                self.partition,
                [
                    (p.inbox, p.ack)
                    if code == ErrorCode.NONE
                    else (p.inbox, p.ack._replace(error_code=code, error_message=text))
                    for p, code, text in out.acks
                ],
            )
            if out.acks
            else None
        )
        if moved:
            self.wake_waiters()
        if out.wake_replicas:
            self._wake_replicas()
        if messages:
            await self.acks.send(messages)
        if out.leadership_ended and self.on_leadership_end is not None:
            self.on_leadership_end(self.stream, self.partition)

    async def _fail_pending_all(self, code: ErrorCode, message: str) -> None:
        await self._carry_out(self._core.fail_all(code, message))
