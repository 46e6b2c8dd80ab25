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

The fsyncs are spaced: one starts at least :data:`MIN_GAP_S` after the previous one
started (a kick sooner than that sets a loop timer; every kick until it fires is covered by
its fsync). An idle partition's first kick fsyncs at once; a log about to close fsyncs at
once (:meth:`FlushBehind.wait_idle`). At 500 messages a second one fsync per message was
500 fsyncs a second, and on the shared VM they made its virtual CPUs stall (a real-time
probe per CPU woke 2.4-3.1 ms late at the median, about 9 times a second, often on both
CPUs at once; ``bench tail``): the outliers of ``written`` at 500 msg/s (over 3x p50,
``bench tail`` at real-time priority, interleaved runs) were 142-314 per 10,000 messages
with an fsync per message, 86-138 with a gap of 10 ms, 10-56 with 50 ms (20-44 with no
fsyncs at all); p50 1.40 ms with 10 ms against 1.05 ms with 50 ms (docs/latency.md,
2026-11-30, helper tail). The price is the loss window of ``written`` (spec/cluster.md,
"Durability"): a power loss may take the records written since the last fsync started,
up to MIN_GAP_S plus one fsync's time, where it took those of one fsync's time. A
sustained load whose fsyncs take longer than the gap is not slowed: the next fsync starts
when one ends, as before.

Task safety: :meth:`kick` and :meth:`wait_idle` on the event loop thread; the state the
worker thread shares is under a lock.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import threading
import time
from collections.abc import Callable

from jetserver.infra import hops
from jetserver.storage import Log
from jetserver.storage.fsync_threads import THREADS, FsyncThreads

__all__ = ["MIN_GAP_S", "FlushBehind"]

MIN_GAP_S = 0.05
"""The least time from one fsync's start to the next one's (module docstring): at most 20
fsyncs a second per partition while it is written to slower than its fsyncs take."""


class FlushBehind:
    """fsyncs of one log in a worker thread, one at a time (module docstring)."""

    __slots__ = (
        "_again",
        "_due",
        "_gap",
        "_lock",
        "_log",
        "_loop",
        "_on_failure",
        "_running",
        "_started",
        "_threads",
        "_timer",
        "_waiters",
        "fsyncs",
    )

    def __init__(
        self,
        log_: Log,
        loop: asyncio.AbstractEventLoop,
        on_failure: Callable[[BaseException], None],
        threads: FsyncThreads = THREADS,
        min_gap_s: float = MIN_GAP_S,
    ) -> None:
        self._log = log_
        self._loop = loop
        self._on_failure = on_failure
        """Called on the loop with the error of a failed fsync (then nothing runs here
        until the next :meth:`kick`)."""
        self._threads = threads
        self._lock = threading.Lock()
        self._running = False
        """A job is queued, runs in a worker thread, or waits for its timer."""
        self._again = False
        """Kicked while running: fsync once more before ending."""
        self._waiters: list[asyncio.Future[None]] = []
        self._due = False
        """:meth:`kick_soon` scheduled a kick that has not run yet."""
        self.fsyncs = 0
        """fsyncs run (counted in the worker thread)."""
        self._gap = min_gap_s
        self._started = -math.inf
        """``time.monotonic()`` when the last fsync started (set by the worker thread,
        under the lock; read on the loop while no job runs, or after it posted back)."""
        self._timer: asyncio.TimerHandle | None = None
        """The loop timer of a kick that came sooner than the gap (:meth:`kick`)."""

    @property
    def running(self) -> bool:
        """A job is queued, runs, or waits for its timer."""
        return self._running

    @property
    def waiting(self) -> bool:
        """An fsync is asked for and waits for the gap after the last one to pass."""
        return self._timer is not None

    def kick_soon(self) -> bool:
        """:meth:`kick` one loop turn from now, once what the append set going ran: its
        request's answer and NATS copy (written in its turn), a tailing FetchStream's
        answer (pushed in its turn) and a parked Fetch it woke (ready before this kick in
        the next turn). A worker thread woken at once takes the GIL from the loop thread
        at each of their system calls, and the loop thread must wait to take it back
        (futex calls per message, ``python -m bench cost``). Two turns from now, as
        before tailing answers were pushed, cost a loop turn per message.

        False if a kick is already due, or an fsync waits for its timer (it covers what
        is appended until it starts), or one runs (it is asked to run once more, now:
        that wakes no thread). At 500 messages a second nearly every append finds one
        of these, and its kick was a loop callback for nothing."""
        if self._due or self._timer is not None:
            return False
        with self._lock:
            if self._running:
                self._again = True
                return False
        self._due = True
        self._loop.call_soon(self.kick)
        return True

    def kick(self) -> bool:
        """Have what is appended fsynced; True if that started a job (none was running):
        at once, or by a loop timer when the last fsync started less than the gap ago.
        (Also :meth:`kick_soon`'s callback: no call of its own to clear the flag.)"""
        self._due = False
        with self._lock:
            if self._running:  # (also while its timer waits: that fsync covers this)
                self._again = True
                return False
            self._running = True
        self._start_after_gap()
        return True

    def _start_after_gap(self) -> None:
        """On the loop, for a job already marked running: submit it, now or by a timer."""
        wait = self._started + self._gap - time.monotonic()
        if wait > 0:
            self._timer = self._loop.call_later(wait, self._submit)
        else:
            self._submit()

    def _submit(self) -> None:
        self._timer = None
        self._threads.submit(self._work)

    async def wait_idle(self) -> None:
        """Return once no job runs (the log may close then): an fsync waiting for the gap
        starts now, and so does every one from here on."""
        self._gap = 0.0
        if self._timer is not None:
            self._timer.cancel()
            self._submit()
        with self._lock:
            if not self._running:
                return
            done = self._loop.create_future()
            self._waiters.append(done)
        await done

    def _work(self) -> None:
        """In a worker thread: fsync until no kick came during the last one; one that came
        sooner than the gap after its start goes back to the loop for its timer."""
        while True:
            with self._lock:
                self._again = False  # kicks from here on are covered, or ask again
            error: BaseException | None = None
            started = time.monotonic()
            if hops.ENABLED:
                hops.mark("behind_fsync.start")
            try:
                self._log.flush()
            except BaseException as exc:  # the loop's to handle (the cut back)
                error = exc
            if hops.ENABLED:
                hops.mark("behind_fsync.end")
            waiters: list[asyncio.Future[None]] = []
            with self._lock:
                self.fsyncs += 1
                self._started = started
                again = self._again and error is None
                later = again and time.monotonic() < started + self._gap
                if not again:
                    self._running = False
                    waiters, self._waiters = self._waiters, []
            if again and not later:
                continue
            with contextlib.suppress(RuntimeError):  # the loop closed: nobody waits
                if later:  # still running: the loop submits it again after the gap
                    self._loop.call_soon_threadsafe(self._start_after_gap)
                if error is not None:
                    self._loop.call_soon_threadsafe(self._on_failure, error)
                for done in waiters:
                    self._loop.call_soon_threadsafe(_finish, done)
            return


def _finish(done: asyncio.Future[None]) -> None:
    if not done.done():
        done.set_result(None)
