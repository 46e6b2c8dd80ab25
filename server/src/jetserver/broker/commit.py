"""The commit half of a partition replica: group commit (fsync) and what follows it.

:class:`Committer` is mixed into :class:`~jetserver.broker.partition.PartitionReplica`
(which holds the fields declared here). When records are appended and no fsync of the
partition is running, :meth:`Committer.request_flush` starts one at once on a thread of a
shared fsync pool (no task wakes up first); its completion comes back to the event loop
as a plain callback, which tells the replica's
:class:`~jetserver.replication.core.ReplicaCore` and does what it says: the high watermark
to set (single server: the flushed offset; leader: per the ISR), whom to wake, the ALL
acks to send (:meth:`Committer._carry_out_now`). Records appended during an fsync are
covered by the next one, started as soon as that one ends (group commit).

Task safety: event loop thread (Log.flush runs in a worker thread, which the storage engine
allows concurrently with the single writer).
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import anyio
from anyio.abc import TaskGroup

from jetsdk.codec.error_codes import ErrorCode
from jetserver import hops
from jetserver.broker.acks import AckRouter, PendingAck
from jetserver.replication.core import Outcome, ReplicaCore
from jetserver.storage import Log, SyncFailedError

log = logging.getLogger(__name__)

FLUSH_RETRY_S = 1.0
"""Pause before retrying after a failed fsync."""

FSYNC_THREADS = 32
"""Threads of the fsync pool shared by every partition of the process (fsyncs of
different partitions run in parallel; one partition has at most one running)."""

__all__ = ["FLUSH_RETRY_S", "FSYNC_THREADS", "Committer", "PendingAck"]

_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()


def fsync_pool() -> ThreadPoolExecutor:
    """The process's fsync pool (created on first use)."""
    global _pool
    if _pool is None:
        with _pool_lock:
            if _pool is None:
                _pool = ThreadPoolExecutor(FSYNC_THREADS, thread_name_prefix="jet-fsync")
    return _pool


class Committer:
    """The commit half of :class:`~jetserver.broker.partition.PartitionReplica`."""

    # Fields and methods of PartitionReplica used here.
    stream: str
    partition: int
    on_leadership_end: Callable[[str, int], None] | None
    log: Log
    _core: ReplicaCore[PendingAck]
    wake_waiters: Callable[[], None]
    _wake_replicas: Callable[[], None]
    acks: AckRouter
    _fields: Callable[..., dict[str, Any]]
    sync_failures: int
    stop: Callable[..., None]

    _tg: TaskGroup | None
    _flush_running: bool
    _flush_again: bool
    _flush_idle: anyio.Event | None

    def request_flush(self) -> None:
        """Records were appended (or a role change left some unflushed): fsync them.

        Starts an fsync now if none is running, else one right after the running one.
        """
        if self._flush_running:
            self._flush_again = True
        elif self._tg is not None:
            self._start_flush()

    def _start_flush(self) -> None:
        self._flush_running = True
        self._flush_again = False
        if hops.ENABLED:
            hops.mark("fsync.start")
        call_soon = asyncio.get_running_loop().call_soon_threadsafe
        # The callback runs in this task's context, where anyio knows its event loop.
        context = contextvars.copy_context()
        future = fsync_pool().submit(self.log.flush, self.log.log_end_offset)
        future.add_done_callback(lambda f: call_soon(self._flush_done, f, context=context))

    def _flush_done(self, future: Future[int]) -> None:
        """Back on the event loop after an fsync (a callback, not a task)."""
        if hops.ENABLED:
            hops.mark("fsync.end")
        exc = future.exception()
        if exc is None:
            log_ = self.log
            try:
                self._carry_out_now(
                    self._core.flushed(
                        future.result(), leo=log_.log_end_offset, hw=log_.high_watermark
                    )
                )
            except Exception:
                log.exception("commit after fsync failed", extra=self._fields())
            self._next_flush()
        elif self._tg is None:  # stopping: _finish flushes once more and reports
            self._next_flush()
        else:
            try:
                self._tg.start_soon(self._flush_failed, exc)
            except Exception:  # a bug: say so; the next append asks for a flush again
                log.exception("cannot handle a failed flush", extra=self._fields())
                self._flush_running = False

    def _next_flush(self) -> None:
        self._flush_running = False
        if self._flush_again and self._tg is not None:
            self._start_flush()
        elif self._flush_idle is not None:
            self._flush_idle.set()
            self._flush_idle = None

    async def _flush_failed(self, exc: BaseException) -> None:
        try:
            if isinstance(exc, SyncFailedError):
                await self._recover_unsynced(exc)
            else:
                log.error("flush failed; retrying", extra=self._fields(error=repr(exc)))
                await self._fail_pending_all(ErrorCode.STORAGE_ERROR, f"flush failed: {exc}")
                await anyio.sleep(FLUSH_RETRY_S)
        finally:
            self._flush_again = True
            self._next_flush()

    async def _wait_flush_idle(self) -> None:
        """Return once no fsync started by :meth:`request_flush` is running."""
        while self._flush_running:
            if self._flush_idle is None:
                self._flush_idle = anyio.Event()
            await self._flush_idle.wait()

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
        out = self._core.cut(end, f"fsync failed, the record is not stored (retry): {exc}")
        log.error(
            "fsync failed: cut the log back to its last good sync; the records above it "
            "must come again from their producers or the leader",
            extra=self._fields(error=repr(exc), flushed=cut_from, leo_was=leo, leo=end),
        )
        await self._carry_out(out)

    async def _commit(self, flushed: int) -> None:
        """The log is fsynced up to ``flushed``: the core moves the HW and acks."""
        log_ = self.log
        await self._carry_out(
            self._core.flushed(flushed, leo=log_.log_end_offset, hw=log_.high_watermark)
        )

    async def _carry_out(self, out: Outcome[PendingAck]) -> None:
        """Do what the core decided: set the HW, wake waiters, send the acks."""
        messages = self._settle(out)
        if messages:
            await self.acks.send(messages)

    def _carry_out_now(self, out: Outcome[PendingAck]) -> None:
        """:meth:`_carry_out` from a callback: acks that must go through NATS are sent by a
        task (in-process ones are handed over now)."""
        messages = self._settle(out)
        if messages and self._tg is not None:
            self._tg.start_soon(self.acks.send, messages)

    def _settle(self, out: Outcome[PendingAck]) -> list[tuple[str, bytes]]:
        """The synchronous part of carrying out ``out``; returns the ack messages still to
        publish through NATS."""
        if out.hw is not None and out.hw > self.log.high_watermark:
            if hops.ENABLED:
                hops.mark("hw")
            self.log.set_high_watermark(out.hw)
            self.wake_waiters()
        if out.wake_replicas:
            self._wake_replicas()
        messages: list[tuple[str, bytes]] = []
        if out.acks:
            messages = self.acks.deliver(
                self.stream,
                self.partition,
                [
                    (p.inbox, p.ack)
                    if code == ErrorCode.NONE
                    else (p.inbox, p.ack._replace(error_code=code, error_message=text))
                    for p, code, text in out.acks
                ],
            )
        if out.leadership_ended and self.on_leadership_end is not None:
            self.on_leadership_end(self.stream, self.partition)
        return messages

    async def _fail_pending_all(self, code: ErrorCode, message: str) -> None:
        await self._carry_out(self._core.fail_all(code, message))
