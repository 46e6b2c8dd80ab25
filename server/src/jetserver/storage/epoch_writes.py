"""New leaders' leader-epoch checkpoints written in worker threads (:class:`EpochWrites`).

Every new leader records its epoch in the partition's epoch cache, and the cache's file is
rewritten (spec/storage.md §5: a tmp file and a rename, no fsync). On the event loop that
was the largest part of a failover's role changes: the 500 new leaders of a survivor at
3,000 partitions spent 1.1-3.2 s of its loop in those writes (a file created and renamed
each, 0.9 ms of system CPU on the dev VM's ext4, more under load), and at 10,000 partitions
a survivor takes about 1,700 leaderships at once. Here the loop changes the cache in memory
(followers ask the leader about its epochs from there) and hands the cache over; up to
:data:`~jetserver.storage.fsync_threads.FSYNC_LANES` jobs of
:data:`~jetserver.storage.fsync_threads.THREADS` write the queued caches' files, each job one cache
after the other, while the loop goes on. Nothing waits for a write: a crash before it
leaves the file without the new epoch, which the spec allows for a new epoch (recovery adds
the epochs the records carry, §9); the log's close writes what is still pending.

One cache's writes never overtake each other (:class:`LeaderEpochCache` serializes them and
each writes the entries as they are when it starts), so a later truncation's durable write
is not undone by an older queued one.

The jobs of changes made on an event loop start at the end of the loop's turn (a callback
queued by the turn's first change), not at each change: a failover's new leaders take their
roles in a few turns, and a job started per change woke a worker thread per role change
whenever the workers had drained the queue meanwhile (a thread's wake-up and its taking of
the GIL, in 13 % of the wall-clock samples of a loaded survivor's burst, py-spy, 3,000
partitions, load 16). Now a turn's changes start at most ``lanes`` jobs together.

Task safety: :meth:`EpochWrites.add` from any thread; the writes run in worker threads.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import threading
from collections.abc import Callable

from jetserver.logs import fields
from jetserver.storage import LeaderEpochCache
from jetserver.storage.fsync_threads import FSYNC_LANES, THREADS

__all__ = ["EPOCH_WRITES", "EpochWrites"]

log = logging.getLogger(__name__)


class EpochWrites:
    """A queue of epoch caches whose new entries are to be written, drained by at most
    ``lanes`` jobs at once handed to ``submit`` (module docstring)."""

    __slots__ = ("_lock", "_queue", "_queued", "_running", "_starting", "lanes", "submit")

    def __init__(
        self,
        submit: Callable[[Callable[[], object]], None] = THREADS.submit,
        lanes: int = FSYNC_LANES,
    ) -> None:
        self.submit = submit
        """Runs a job in a worker thread, nothing handed back (``FsyncThreads.submit``)."""
        self.lanes = lanes
        self._lock = threading.Lock()
        self._queue: collections.deque[LeaderEpochCache] = collections.deque()
        self._queued: set[int] = set()
        """ids of the queued caches (a cache changed twice before its write goes once)."""
        self._running = 0
        self._starting: asyncio.AbstractEventLoop | None = None
        """The event loop at whose turn's end jobs are to start (:meth:`_start`); a change
        on another loop, or on none, does not count on it (that loop may have ended)."""

    @property
    def queued(self) -> int:
        """Caches waiting for a job."""
        with self._lock:
            return len(self._queue)

    def add(self, cache: LeaderEpochCache) -> None:
        """Have ``cache``'s pending change written by a worker thread (the ``deferred`` of
        :meth:`LeaderEpochCache.assign`)."""
        with self._lock:
            if id(cache) in self._queued:
                return
            self._queued.add(id(cache))
            self._queue.append(cache)
            if self._running >= self.lanes:
                return  # a running job takes it
            try:
                loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
            except RuntimeError:  # not on an event loop: at once
                loop = None
            if loop is not None and self._starting is loop:
                return  # the turn's end starts the jobs
            self._starting = loop
        if loop is None:
            self._start()
        else:
            loop.call_soon(self._start)

    def _start(self) -> None:
        """Start jobs for what is queued: one per cache, up to the free lanes."""
        with self._lock:
            self._starting = None
            jobs = min(self.lanes - self._running, len(self._queue))
            self._running += max(jobs, 0)
        for _ in range(jobs):
            self.submit(self._drain)

    def _next(self) -> LeaderEpochCache | None:
        with self._lock:
            if not self._queue:
                self._running -= 1
                return None
            cache = self._queue.popleft()
            self._queued.discard(id(cache))
            return cache

    def _drain(self) -> None:
        """A job: write queued caches until none is left."""
        while (cache := self._next()) is not None:
            try:
                cache.write_pending()
            except OSError as exc:  # the entries are right in memory; the close writes them
                log.warning(
                    "cannot write a leader-epoch checkpoint",
                    extra=fields(error=str(exc)),
                )


EPOCH_WRITES = EpochWrites()
"""The process's queue of epoch-checkpoint writes (every server of a process shares it)."""
