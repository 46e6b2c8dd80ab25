"""Group commit: one fsync covers every record appended before it started."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

import attrs

from jetserver.storage.errors import SyncFailedError
from jetserver.storage.files import FileLease

if TYPE_CHECKING:
    from jetserver.storage.segment import Segment

COVERED = -1
""":meth:`GroupCommit.try_start`: nothing to fsync (flushed up to the offset asked for)."""
BUSY = -2
""":meth:`GroupCommit.try_start`: another fsync runs (it may cover the offset asked for)."""
Timed = Callable[[Callable[[int], None], int], None] | None
"""``timed(fdatasync, fd)``: makes an fsync's system call for a caller that times it alone
(:meth:`Log.flush_unless_busy <jetserver.storage.Log.flush_unless_busy>`); None: not timed."""


@attrs.define(slots=True, eq=False)
class PendingSync:
    """An fsync begun by :meth:`Log.begin_sync <jetserver.storage.Log.begin_sync>`, to
    run elsewhere and end with :meth:`Log.end_sync <jetserver.storage.Log.end_sync>`."""

    fd: int
    """The active segment file's descriptor (held open by :attr:`lease`)."""
    covered: int
    """The LEO when it began: what it makes durable."""
    appended: int
    """The log's appended bytes when it began."""
    lease: FileLease
    """Keeps :attr:`fd` open until the fsync ended."""
    generation: int
    """:meth:`GroupCommit.try_start`'s."""
    segment: Segment
    """The segment (its path for the error, made only then: a Path costs ~35 lines)."""


class GroupCommit:
    """Tracks the flushed offset and lets concurrent flush callers share fsyncs.

    A caller whose target is not yet flushed either starts an fsync (if none is running) or
    waits for the running one; when that one ends it returns if it was covered, or else one
    of the waiters starts the next fsync, which covers all of them.

    The flushed offset moves only after an fsync returned without error. Once an fsync
    failed, the log is *poisoned*: Linux may have dropped the dirty pages of the failed
    writeback (and reports the error once), so neither what that fsync covered nor anything
    appended after it can be made durable by a later fsync. Every flush that needs more than
    the flushed offset then raises :class:`SyncFailedError` until :meth:`reset` or
    :meth:`clamp` (the log was cut back to what is on disk) clears the poison.

    Thread-safety: every method may be called from any thread. A lock guards the state; the
    condition for waiters is created (under the lock) when a caller first has to wait: a
    ``threading.Condition`` costs about 0.8 KB, and an idle partition's log never waits
    (issue 34, item 3: memory per idle partition).
    """

    __slots__ = ("_cond", "_failed", "_flushed", "_fsyncs", "_generation", "_lock", "_running")

    def __init__(self, flushed_offset: int) -> None:
        self._lock = threading.Lock()
        self._cond: threading.Condition | None = None
        self._flushed = flushed_offset
        self._running = False
        self._generation = 0  # bumped by clamp(): an fsync that straddles it proves nothing
        self._fsyncs = 0
        self._failed: str | None = None

    @property
    def flushed_offset(self) -> int:
        """Every offset below this is on disk."""
        return self._flushed

    @property
    def fsync_count(self) -> int:
        """fsyncs issued by :meth:`flush`."""
        return self._fsyncs

    @property
    def failure(self) -> str | None:
        """Why the log is poisoned (an fsync failed and it was not cut back yet), or None."""
        return self._failed

    def flush(
        self,
        target: Callable[[], int],
        begin: Callable[[], tuple[int, Callable[[], None]]],
        *,
        wait: bool = True,
    ) -> int | None:
        """Block until ``flushed_offset >= target()``; return the flushed offset.

        ``target`` is re-evaluated on every wake-up (it may raise to abort, e.g. when the
        log is closed). ``begin`` takes a snapshot under the log's lock and returns
        ``(offset covered, sync)``; ``sync()`` does the fsync outside any lock.
        With ``wait=False`` it never waits for another caller's fsync: it returns None
        instead (it still runs its own fsync, which blocks for that fsync's duration).

        Raises:
            SyncFailedError: this fsync or an earlier one failed (the log is poisoned).
        """
        while True:
            with self._lock:
                while True:
                    wanted = target()
                    if self._flushed >= wanted:
                        return self._flushed
                    if self._failed is not None:
                        raise SyncFailedError(self._failed)
                    if not self._running:
                        break
                    if not wait:
                        return None
                    if self._cond is None:
                        self._cond = threading.Condition(self._lock)
                    self._cond.wait(timeout=1.0)
                self._running = True
                generation = self._generation
            synced = -1
            try:
                covered, sync = begin()
                try:
                    sync()
                except BaseException as exc:
                    with self._lock:
                        # Recorded even when a clamp() ran during the fsync: the pages
                        # the failed writeback dropped may lie below the clamp point.
                        self._failed = (
                            f"fsync failed ({exc}); records from offset {self._flushed} "
                            "on are not known to be on disk"
                        )
                    if isinstance(exc, Exception) and not isinstance(exc, SyncFailedError):
                        raise SyncFailedError(str(exc)) from exc
                    raise
                synced = covered
            finally:
                with self._lock:
                    self._running = False
                    if synced >= 0:
                        self._fsyncs += 1
                        if generation == self._generation and synced > self._flushed:
                            self._flushed = synced
                    self._notify()

    def try_start(self, wanted: int) -> int:
        """:meth:`flush`'s start without blocking, for a caller that runs the fsync itself
        elsewhere (a worker thread) and ends it with :meth:`finish` (the log's
        :meth:`~jetserver.storage.Log.begin_sync`): the generation to hand to
        :meth:`finish` (>= 0, an fsync now counted as running), :data:`COVERED` if
        ``flushed_offset >= wanted`` already, :data:`BUSY` if another fsync runs.

        Raises:
            SyncFailedError: an earlier fsync failed (the log is poisoned).
        """
        with self._lock:
            if self._flushed >= wanted:
                return COVERED
            if self._failed is not None:
                raise SyncFailedError(self._failed)
            if self._running:
                return BUSY
            self._running = True
            return self._generation

    def finish(self, generation: int, covered: int, error: BaseException | None) -> int:
        """End an fsync :meth:`try_start` started: it covered every offset below
        ``covered`` (-1: it never ran, nothing proven) or failed with ``error`` (the log
        is poisoned, as in :meth:`flush`); the flushed offset returned.

        Raises:
            SyncFailedError: ``error`` was given.
        """
        with self._lock:
            self._running = False
            if error is not None:
                self._failed = (
                    f"fsync failed ({error}); records from offset {self._flushed} "
                    "on are not known to be on disk"
                )
            elif covered >= 0:
                self._fsyncs += 1
                if generation == self._generation and covered > self._flushed:
                    self._flushed = covered
            self._notify()
            flushed = self._flushed
        if error is not None:
            raise SyncFailedError(str(error)) from error
        return flushed

    def _notify(self) -> None:
        """Wake the waiters (the lock held)."""
        if self._cond is not None:
            self._cond.notify_all()

    def advance(self, offset: int) -> None:
        """Everything below ``offset`` became durable another way (a segment roll)."""
        with self._lock:
            if self._failed is None and offset > self._flushed:
                self._flushed = offset
            self._notify()

    def fail(self, reason: str) -> None:
        """An fsync outside :meth:`flush` failed (a roll, a truncation): poison the log."""
        with self._lock:
            self._failed = reason
            self._notify()

    def clamp(self, offset: int) -> None:
        """The log was truncated to ``offset`` (at most the flushed offset after a failed
        fsync, so the poison is cleared then): nothing at or above it is flushed."""
        with self._lock:
            self._generation += 1
            if self._flushed > offset:
                self._flushed = offset
            if self._failed is not None and offset <= self._flushed:
                self._failed = None
            self._notify()

    def rebase(self, offset: int) -> None:
        """The log was (re)loaded from disk and is flushed up to ``offset``; a poison stays."""
        with self._lock:
            self._generation += 1
            self._flushed = offset
            self._notify()

    def reset(self, offset: int) -> None:
        """The log restarted at ``offset`` (everything below it is gone)."""
        with self._lock:
            self._generation += 1
            self._flushed = offset
            self._failed = None
            self._notify()

    def wake(self) -> None:
        """Wake waiters so they re-check (used when the log closes)."""
        with self._lock:
            self._notify()
