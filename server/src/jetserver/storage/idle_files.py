"""The active segment files of idle logs, closed until they are used again (issue 34).

A partition's active segment used to hold its descriptor for as long as the log was open:
a server with N partitions held N files however idle they were, so the open-file limit
(20,000 hard on the dev VM, which a process cannot raise) capped the partitions a server
could hold. :class:`IdleFiles` keeps the logs whose active segment file is open and
*parks* (closes) it when the log is idle: nothing appended since the last sweep, every
record fsynced, no fsync running, no reader holding it, and the log's writer not in it.
The next append reopens it (:meth:`~jetserver.storage.files.SharedFile.unpark`: one
attribute check on the append path), as does the next read or fsync (their lease).

It also bounds the open active files (``budget``): opening one more beyond it parks the
least recently opened idle ones first. Only a working set of busy logs larger than the
budget goes beyond it (the server refuses new partitions then, see
:func:`jetserver.infra.resources.check_room`).

Thread-safety: every method may be called from any thread. Lock order: the registry's
lock, then a log's writer lock (only tried, never waited for), then a file's lock. A
reopen calls :meth:`IdleFiles.opened` with no file lock held.
"""

from __future__ import annotations

import threading
from typing import Protocol

UNBOUNDED = 1 << 40
"""The budget of a registry nobody bounded (a library's logs: parked by sweeps only)."""


class IdleCandidate(Protocol):
    """What :class:`IdleFiles` needs of a log (its
    :class:`~jetserver.storage.log_state.LogState`)."""

    @property
    def appended_bytes(self) -> int:
        """A running count that moves with every append (the log's activity)."""
        ...

    def park_idle_file(self) -> bool:
        """Close the active segment's descriptor if the log is idle; True if the log
        holds no active file now (parked, or the log is closed)."""
        ...


class IdleFiles:
    """The logs holding an open active segment file, least recently opened first."""

    def __init__(self, budget: int = UNBOUNDED, *, park_opened: bool = False) -> None:
        if budget < 1:
            raise ValueError(f"budget must be >= 1, got {budget}")
        self._budget = budget
        self._park_opened = park_opened
        self._open: dict[IdleCandidate, int] = {}
        """log -> its activity at the last sweep (-1: not swept since it opened)."""
        self._lock = threading.Lock()
        self._logs = 0
        """Logs open (opened ``fresh`` and not forgotten since)."""
        self.parks = 0
        """Active files parked so far (each costs one open if its log is used again)."""

    @property
    def budget(self) -> int:
        """The most active files kept open while their logs are idle."""
        return self._budget

    def configure(self, budget: int, *, park_opened: bool) -> None:
        """Set the bound (parking idle files at once if it is exceeded) and whether a
        log's file is parked as soon as the log opens idle (a server: its partitions
        mostly are, and a restart then never holds a file per partition)."""
        if budget < 1:
            raise ValueError(f"budget must be >= 1, got {budget}")
        with self._lock:
            self._budget = budget
            self._park_opened = park_opened
            self._shed(None, budget)

    def __len__(self) -> int:
        """Active files open now (as far as the registry knows)."""
        return len(self._open)

    @property
    def parked(self) -> int:
        """Open logs whose active file is parked now (closed until the log is used)."""
        return max(self._logs - len(self._open), 0)

    def opened(self, log: IdleCandidate, *, fresh: bool = False) -> None:
        """``log`` holds its active file open (it was just opened or reopened); beyond
        the budget, the least recently opened idle files are parked. ``fresh``: the log
        was just opened (with ``park_opened``, parked at once if idle)."""
        with self._lock:
            if fresh:
                self._logs += 1
            if fresh and self._park_opened and log.park_idle_file():
                self._open.pop(log, None)
                self.parks += 1
                return
            self._open.pop(log, None)
            self._open[log] = -1
            if len(self._open) > self._budget:
                self._shed(log, self._budget)

    def forget(self, log: IdleCandidate) -> None:
        """``log`` was closed (it was :meth:`opened` ``fresh``)."""
        with self._lock:
            self._open.pop(log, None)
            self._logs -= 1

    def make_room(self, files: int) -> int:
        """Park up to ``files`` idle files, least recently opened first (whatever their
        last sweep saw); return how many were parked (fewer: the rest are busy)."""
        with self._lock:
            return self._shed(None, max(len(self._open) - files, 0))

    def sweep(self) -> int:
        """Park the files of the logs that appended nothing since the last sweep (and
        are flushed and unused); return how many were parked. Costs one check per open
        active file, none per parked one."""
        parked = 0
        with self._lock:
            for log, seen in list(self._open.items()):
                activity = log.appended_bytes
                if activity != seen:
                    self._open[log] = activity
                elif log.park_idle_file():
                    del self._open[log]
                    parked += 1
            self.parks += parked
        return parked

    def _shed(self, keep: IdleCandidate | None, most: int) -> int:
        """Park the least recently opened idle files (not ``keep``'s) until at most
        ``most`` are open; a busy one becomes the most recent (lock held)."""
        parked = 0
        tries = len(self._open)
        while len(self._open) > most and tries > 0:
            tries -= 1
            log = next(iter(self._open))
            seen = self._open.pop(log)
            if log is not keep and log.park_idle_file():
                parked += 1
            else:
                self._open[log] = seen
        self.parks += parked
        return parked


ACTIVE_FILES = IdleFiles()
"""The process's registry of open active segment files (a server sets its budget from
the open-file limit, :func:`jetserver.infra.resources.size_file_budget`)."""
