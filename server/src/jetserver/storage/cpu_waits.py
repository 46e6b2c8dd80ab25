"""How long the event-loop thread waited for a CPU: what a slow-looking fsync on the loop
may have been instead of a slow disk.

The slow-fsync back-off (:class:`jetserver.storage.fsync_runner.FsyncRunner`) sends every
fsync to worker threads for :data:`~jetserver.storage.fsync_runner.SLOW_BACKOFF_S` after
one on the loop took longer than :data:`~jetserver.storage.fsync_runner.SLOW_FSYNC_S`. A
loop thread preempted during or right after its ``fdatasync`` (a loaded machine: the other
processes' work) looks the same by the wall clock, and the back-off then moved ten
seconds of fsyncs to threads for a disk that was fine. Linux counts each thread's time
runnable but not running (``/proc/thread-self/schedstat``, its second field, in ns):
:class:`LoopSyscalls` reads it seldom (a reading every :data:`REFRESH_S` at most, before a
loop fsync; one more only after a slow-looking one), so the check costs no system call
for most fsyncs. What it subtracts is the waits since that reading (at most
:data:`REFRESH_S` before the fsync): a bound on the waits inside it, which errs toward
"not the disk" under CPU load only. Elsewhere than Linux: no waits (the wall clock, as
before).

Task safety: one thread (the event loop's); a reading taken on another thread reopens
the file for that one.
"""

from __future__ import annotations

import io
import os
import threading
from collections.abc import Callable

__all__ = ["REFRESH_S", "LoopSyscalls", "thread_cpu_wait_s"]

REFRESH_S = 0.05
"""The reading a slow-looking fsync is compared with is at most this old (seconds) when
that fsync starts."""

_SCHEDSTAT = "/proc/thread-self/schedstat"
_local = threading.local()


def thread_cpu_wait_s() -> float:
    """The calling thread's total wait for a CPU so far, in seconds (0.0 where the kernel
    does not tell)."""
    try:
        f: io.FileIO | None = _local.schedstat
    except AttributeError:
        f = _local.schedstat = _open()  # (closed with the thread's locals)
    return 0.0 if f is None else int(os.pread(f.fileno(), 64, 0).split()[1]) / 1e9


def _open() -> io.FileIO | None:
    try:
        return open(_SCHEDSTAT, "rb", buffering=0)  # (kept open, the thread's)
    except OSError:
        return None


class LoopSyscalls:
    """A loop fsync's system call timed alone, and the loop thread's waits for a CPU
    around it (module docstring)."""

    __slots__ = ("_clock", "_read", "_read_at", "_waited", "syscall_s")

    def __init__(self, clock: Callable[[], float], read: Callable[[], float] | None = None) -> None:
        self._clock = clock
        """The runner's clock (seconds)."""
        self._read = read
        """The thread's waits so far (seconds); None: :func:`thread_cpu_wait_s`."""
        self._read_at = float("-inf")
        self._waited = 0.0
        self.syscall_s = 0.0
        """The last :meth:`timed` call's time."""

    def mark(self, now: float) -> None:
        """Before an fsync on the loop (``now``: the clock's): read the thread's waits if
        the last reading is older than :data:`REFRESH_S`."""
        self.syscall_s = 0.0  # (none made: not slow)
        if now - self._read_at > REFRESH_S:
            self._waited = (self._read or thread_cpu_wait_s)()
            self._read_at = now

    def timed(self, sync: Callable[[int], None], fd: int) -> None:
        """``sync(fd)``: the fsync's system call (:meth:`Log.flush_unless_busy
        <jetserver.storage.Log.flush_unless_busy>`), its time kept in :attr:`syscall_s`."""
        start = self._clock()
        try:
            sync(fd)
        finally:
            self.syscall_s = self._clock() - start

    def net(self) -> tuple[float, float]:
        """After a slow-looking fsync: (its system call's time, the thread's waits for a
        CPU since the last :meth:`mark` reading, which this reading replaces)."""
        waited = (self._read or thread_cpu_wait_s)()
        since, self._waited = waited - self._waited, waited
        return self.syscall_s, max(0.0, since)
