"""The fsyncs of a ``written`` partition: in a worker thread, with no word back to the loop
unless one failed.

With durability ``written`` (one replica) a record is committed, answered and readable once
written; its fsync follows at once, outside the commit path (spec/cluster.md,
"Durability"). The committer's flusher task used to wait for that fsync's result on the
event loop to learn a commit that changes nothing there (the HW and the ALL acks moved at
the append): per message at light load, a wake-up of the flusher task, the worker
thread's hand-back through the loop's self-pipe (often a wake-up of an idle loop of its
own) and the flusher's step after it (``python -m bench cost``).

:class:`FlushBehind` runs them in a worker thread (:meth:`FsyncThreads.submit`) and keeps
them in series: a :meth:`FlushBehind.kick` while one runs makes the thread fsync again
when it ends (one fsync covers everything appended before it, the log's group commit).
The loop hears of it only:

- when an fsync failed: ``on_failure`` is called on the loop, which hands the partition to
  its flusher (the cut back to the last good sync, spec/storage.md "fsync errors");
- when it waits for the thread to be done (:meth:`FlushBehind.wait_idle`, before the log
  closes).

Task safety: :meth:`kick` and :meth:`wait_idle` on the event loop thread; the state the
worker thread shares is under a lock.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable

from jetserver.infra import hops
from jetserver.storage import Log
from jetserver.storage.fsync_threads import THREADS, FsyncThreads

__all__ = ["FlushBehind"]


class FlushBehind:
    """fsyncs of one log in a worker thread, one at a time (module docstring)."""

    __slots__ = (
        "_again",
        "_due",
        "_lock",
        "_log",
        "_loop",
        "_on_failure",
        "_running",
        "_threads",
        "_waiters",
        "fsyncs",
    )

    def __init__(
        self,
        log_: Log,
        loop: asyncio.AbstractEventLoop,
        on_failure: Callable[[BaseException], None],
        threads: FsyncThreads = THREADS,
    ) -> None:
        self._log = log_
        self._loop = loop
        self._on_failure = on_failure
        """Called on the loop with the error of a failed fsync (then nothing runs here
        until the next :meth:`kick`)."""
        self._threads = threads
        self._lock = threading.Lock()
        self._running = False
        """A job is queued or runs in a worker thread."""
        self._again = False
        """Kicked while running: fsync once more before ending."""
        self._waiters: list[asyncio.Future[None]] = []
        self._due = False
        """:meth:`kick_soon` scheduled a kick that has not run yet."""
        self.fsyncs = 0
        """fsyncs run (counted in the worker thread)."""

    @property
    def running(self) -> bool:
        """A job is queued or runs."""
        return self._running

    def kick_soon(self) -> bool:
        """:meth:`kick` one loop turn from now, once what the append set going ran: its
        request's answer and NATS copy (written in its turn), a tailing FetchStream's
        answer (pushed in its turn) and a parked Fetch it woke (ready before this kick in
        the next turn). A worker thread woken at once takes the GIL from the loop thread
        at each of their system calls, and the loop thread must wait to take it back
        (futex calls per message, ``python -m bench cost``). Two turns from now, as
        before tailing answers were pushed, cost a loop turn per message. False if a
        kick is already due."""
        if self._due:
            return False
        self._due = True
        self._loop.call_soon(self.kick)
        return True

    def kick(self) -> bool:
        """Have what is appended fsynced; True if that started a job (none was running).
        (Also :meth:`kick_soon`'s callback: no call of its own to clear the flag.)"""
        self._due = False
        with self._lock:
            if self._running:
                self._again = True
                return False
            self._running = True
        self._threads.submit(self._work)
        return True

    async def wait_idle(self) -> None:
        """Return once no job runs (the log may close then)."""
        with self._lock:
            if not self._running:
                return
            done = self._loop.create_future()
            self._waiters.append(done)
        await done

    def _work(self) -> None:
        """In a worker thread: fsync until no kick came during the last one."""
        while True:
            error: BaseException | None = None
            if hops.ENABLED:
                hops.mark("behind_fsync.start")
            try:
                self._log.flush()
            except BaseException as exc:  # the loop's to handle (the cut back)
                error = exc
            if hops.ENABLED:
                hops.mark("behind_fsync.end")
            with self._lock:
                self.fsyncs += 1
                again = self._again and error is None
                self._again = False
                if not again:
                    self._running = False
                    waiters, self._waiters = self._waiters, []
            if again:
                continue
            with contextlib.suppress(RuntimeError):  # the loop closed: nobody waits
                if error is not None:
                    self._loop.call_soon_threadsafe(self._on_failure, error)
                for done in waiters:
                    self._loop.call_soon_threadsafe(_finish, done)
            return


def _finish(done: asyncio.Future[None]) -> None:
    if not done.done():
        done.set_result(None)
