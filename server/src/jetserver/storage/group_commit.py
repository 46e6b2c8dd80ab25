"""Group commit: one fsync covers every record appended before it started."""

from __future__ import annotations

import threading
from collections.abc import Callable


class GroupCommit:
    """Tracks the flushed offset and lets concurrent flush callers share fsyncs.

    A caller whose target is not yet flushed either starts an fsync (if none is running) or
    waits for the running one; when that one ends it returns if it was covered, or else one
    of the waiters starts the next fsync, which covers all of them.

    Thread-safety: every method may be called from any thread.
    """

    def __init__(self, flushed_offset: int) -> None:
        self._cond = threading.Condition(threading.Lock())
        self._flushed = flushed_offset
        self._running = False
        self._generation = 0  # bumped by clamp(): an fsync that straddles it proves nothing
        self._fsyncs = 0

    @property
    def flushed_offset(self) -> int:
        """Every offset below this is on disk."""
        return self._flushed

    @property
    def fsync_count(self) -> int:
        """fsyncs issued by :meth:`flush`."""
        return self._fsyncs

    def flush(
        self,
        target: Callable[[], int],
        begin: Callable[[], tuple[int, Callable[[], None]]],
    ) -> int:
        """Block until ``flushed_offset >= target()``; return the flushed offset.

        ``target`` is re-evaluated on every wake-up (it may raise to abort, e.g. when the
        log is closed). ``begin`` takes a snapshot under the log's lock and returns
        ``(offset covered, sync)``; ``sync()`` does the fsync outside any lock.
        """
        while True:
            with self._cond:
                while True:
                    wanted = target()
                    if self._flushed >= wanted:
                        return self._flushed
                    if not self._running:
                        break
                    self._cond.wait(timeout=1.0)
                self._running = True
                generation = self._generation
            covered = -1
            try:
                covered, sync = begin()
                sync()
            finally:
                with self._cond:
                    self._running = False
                    if covered >= 0:
                        self._fsyncs += 1
                        if generation == self._generation and covered > self._flushed:
                            self._flushed = covered
                    self._cond.notify_all()

    def advance(self, offset: int) -> None:
        """Everything below ``offset`` became durable another way (a segment roll)."""
        with self._cond:
            if offset > self._flushed:
                self._flushed = offset
            self._cond.notify_all()

    def clamp(self, offset: int) -> None:
        """The log was truncated to ``offset``: nothing at or above it is flushed."""
        with self._cond:
            self._generation += 1
            if self._flushed > offset:
                self._flushed = offset
            self._cond.notify_all()

    def reset(self, offset: int) -> None:
        """The log restarted at ``offset`` (everything below it is gone)."""
        with self._cond:
            self._generation += 1
            self._flushed = offset
            self._cond.notify_all()

    def wake(self) -> None:
        """Wake waiters so they re-check (used when the log closes)."""
        with self._cond:
            self._cond.notify_all()
