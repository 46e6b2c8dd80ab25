"""An fsync in a worker thread that the event loop waits for, up to a bound.

The loop fsync (:meth:`FsyncRunner.flush_probed
<jetserver.storage.fsync_runner.FsyncRunner.flush_probed>`) blocks the loop for the whole
system call: a disk whose fsync never returns stops every partition of the server. The
thread hand-off (:meth:`FsyncRunner.sync_in_thread_then
<jetserver.storage.fsync_runner.FsyncRunner.sync_in_thread_then>`) keeps the loop free,
but its end comes back through a loop wake-up. :func:`sync_waiting` is in between: the
fsync and its end in the group commit run in a thread of the split syncs' lane
(:data:`~jetserver.storage.fsync_threads.SYNCS`) while the loop waits for them on a lock
(the GIL released, so the thread runs at once), up to ``wait_s``; then the loop goes on
as after a loop fsync, with no wake-up to come back. If the fsync has not ended by then
(a stalled or hung disk), the loop stops waiting and the fsync's end comes later, in the
loop's I/O phase (:mod:`jetserver.storage.loop_waker`), as the thread hand-off's: the
loop is blocked for at most ``wait_s``, once.

Task safety: :func:`sync_waiting` on the event loop thread; the job in a worker thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
from collections.abc import Callable

from jetserver.infra import hops
from jetserver.storage import Log, durability_trace
from jetserver.storage.errors import StorageError
from jetserver.storage.files import fdatasync
from jetserver.storage.fsync_threads import SYNCS
from jetserver.storage.group_commit import PendingSync
from jetserver.storage.loop_waker import waker_of

__all__ = ["LATE", "Then", "sync_waiting"]

LATE = -2
""":func:`sync_waiting`'s answer when the fsync did not end within its bound."""

Then = Callable[[int, BaseException | None], None]


class _Waited:
    """One fsync the loop waits for (:func:`sync_waiting`)."""

    __slots__ = (
        "_ended",
        "_late",
        "_log",
        "_loop",
        "_over",
        "_pending",
        "_state",
        "_sync",
        "_waker",
    )

    def __init__(
        self,
        log_: Log,
        pending: PendingSync,
        loop: asyncio.AbstractEventLoop,
        sync: Callable[[int], None],
    ) -> None:
        self._log = log_
        self._pending = pending
        self._sync = sync
        self._loop = loop
        self._waker = waker_of(loop)  # (made on the loop's thread, for a late end)
        self._ended = threading.Lock()
        self._ended.acquire()  # released by the job once the fsync ended
        self._state = threading.Lock()
        self._late: Then | None = None
        """(Under ``_state``) the loop stopped waiting: the outcome goes to it."""
        self._over: tuple[int, BaseException | None] | None = None
        """(Under ``_state``) the outcome: the flushed offset or -1 and the error."""

    def run(self) -> None:
        """The job (a worker thread): the fsync, its end in the group commit, the outcome
        handed to the loop, waiting or not."""
        pending = self._pending
        error: BaseException | None = None
        try:
            self._sync(pending.fd)
        except BaseException as exc:  # (the log's to record: poisoned)
            error = exc
        flushed = -1
        try:
            flushed = self._log.end_sync(pending, error)
            if flushed < pending.covered:  # the log was cut back meanwhile
                error = StorageError("the log was truncated during its fsync")
        except BaseException as exc:  # (SyncFailedError: the fsync failed)
            error = exc
        outcome = (flushed if error is None else -1, error)
        with self._state:
            self._over = outcome
            late = self._late
        self._ended.release()
        if late is None:
            return
        if self._waker is not None:
            self._waker.call(late, *outcome)
            return
        with contextlib.suppress(RuntimeError):  # the loop closed: nobody waits
            self._loop.call_soon_threadsafe(late, *outcome)

    def wait(self, wait_s: float, late: Then) -> int:
        """The flushed offset once the fsync ended within ``wait_s``; :data:`LATE` if not
        (``late(flushed, error)`` is called on the loop when it ends).

        Raises:
            SyncFailedError, StorageError: the fsync failed.
        """
        if not self._ended.acquire(timeout=wait_s):
            with self._state:
                if self._over is None:
                    self._late = late
                    return LATE
        over = self._over
        assert over is not None  # (set before the release)
        flushed, error = over
        if error is not None:
            raise error
        return flushed


def sync_waiting(
    log_: Log,
    loop: asyncio.AbstractEventLoop,
    wait_s: float,
    late: Then,
    sync: Callable[[int], None] | None = None,
) -> int | None:
    """The fsync of ``log_`` to its LEO in a thread of the split syncs' lane, the loop
    waiting for its end up to ``wait_s`` (module docstring): the flushed offset; None,
    nothing done, if another fsync of the log runs; :data:`LATE` if it did not end in
    time: then ``late(flushed, None)`` or ``late(-1, error)`` is called on the loop when it
    does (``late`` must not raise). ``sync``: the system call on the descriptor (None:
    fdatasync, traced when the durability trace is on).

    Raises:
        SyncFailedError, StorageError, LogClosedError: as :meth:`Log.flush_unless_busy`.
    """
    pending = log_.begin_sync()
    if pending is None or isinstance(pending, int):
        return pending
    if sync is None:
        traced = durability_trace.TRACE is not None or hops.ENABLED
        sync = fdatasync if traced else os.fdatasync
    waited = _Waited(log_, pending, loop, sync)
    SYNCS.submit(waited.run)
    return waited.wait(wait_s, late)
