"""Worker threads for the fsyncs that leave the event loop (:class:`FsyncThreads`).

``anyio.to_thread.run_sync`` costs about 110 Python calls, 16 ``getpid`` system calls
(Python 3.11's ``asyncio.get_running_loop`` checks the pid on every call) and two extra
event-loop turns per call: a checkpoint before the work is handed over and another after
its result is back (``python -m bench cost``, a fsynced partition whose fsyncs went to
threads: one per message at 500 msg/s). Here a call is a job on a queue and one loop
callback for its result.

A worker counts itself idle *before* it hands its result back, so the next job, which that
result usually causes, finds it idle instead of starting another thread (the flaw of
``concurrent.futures.ThreadPoolExecutor``, whose worker marks itself idle only after the
result's callback ran; tried on 2026-11-28: 4.1 -> 7.2 context switches per message).

As with anyio's ``run_sync``, a caller cancelled while its job runs still waits for the job
to end before its cancellation goes on (an fsync's outcome is the committer's to see).

:meth:`FsyncThreads.submit` hands a job over without any result coming back (the fsyncs of
``written`` partitions, :mod:`jetserver.flush_behind`): no loop wake-up at all.

Task safety: :meth:`FsyncThreads.run` from event-loop threads, :meth:`FsyncThreads.submit`
from any; workers are daemon threads.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import queue
import threading
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["MAX_THREADS", "THREADS", "FsyncThreads"]

log = logging.getLogger(__name__)

T = TypeVar("T")

MAX_THREADS = 40
"""Most worker threads (anyio's default limit for ``to_thread``): beyond, jobs queue."""


class _Job:
    """One call: run in a worker thread, settled on its loop."""

    __slots__ = ("args", "ended", "fn", "future", "loop")

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop | None,
        fn: Callable[..., Any],
        args: tuple[Any, ...],
    ) -> None:
        self.loop = loop
        """None: nobody waits (:meth:`FsyncThreads.submit`)."""
        self.future: asyncio.Future[Any] | None = None if loop is None else loop.create_future()
        self.fn = fn
        self.args = args
        self.ended = False


class FsyncThreads:
    """Worker threads started as needed, never more than ``max_threads``; a worker waits
    for jobs for the life of the process (daemon threads, as many as were ever busy at
    once)."""

    __slots__ = ("_idle", "_jobs", "_lock", "_queued", "_threads", "max_threads")

    def __init__(self, max_threads: int = MAX_THREADS) -> None:
        self.max_threads = max_threads
        self._jobs: queue.SimpleQueue[_Job] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._idle = 0
        """Workers not running a job."""
        self._queued = 0
        """Jobs not taken by a worker yet."""
        self._threads = 0

    @property
    def threads(self) -> int:
        """Worker threads started."""
        return self._threads

    async def run(
        self, fn: Callable[..., T], *args: Any, loop: asyncio.AbstractEventLoop | None = None
    ) -> T:
        """``fn(*args)`` in a worker thread: its result, or its exception raised here.
        ``loop``: the running loop, if the caller knows it (looking it up costs a getpid
        system call on Python 3.11)."""
        if loop is None:
            loop = asyncio.get_running_loop()
        job = _Job(loop, fn, args)
        future = job.future
        assert future is not None  # a job with a loop has one
        self._put(job)
        try:
            result: T = await future
        except asyncio.CancelledError:
            while not job.ended:  # as anyio's run_sync: the job ends before this does
                job.future = loop.create_future()
                with contextlib.suppress(asyncio.CancelledError):
                    await job.future
            raise
        return result

    def submit(self, fn: Callable[[], object]) -> None:
        """``fn()`` in a worker thread, and nothing handed back: no future, no loop
        callback (no wake-up of the event loop; ``fn`` tells whom it must itself). An
        exception it raises is logged. From any thread."""
        self._put(_Job(None, fn, ()))

    def _put(self, job: _Job) -> None:
        with self._lock:
            self._queued += 1
            start = self._queued > self._idle and self._threads < self.max_threads
            if start:
                self._threads += 1
                self._idle += 1
        self._jobs.put(job)
        if start:
            threading.Thread(target=self._work, name="jet-fsync", daemon=True).start()

    def _work(self) -> None:
        while True:
            job = self._jobs.get()
            with self._lock:
                self._queued -= 1
                self._idle -= 1
            try:
                result, error = job.fn(*job.args), None
            except BaseException as exc:  # handed to the caller, as run_sync does
                result, error = None, exc
            with self._lock:  # idle before the result can cause the next job
                self._idle += 1
            if job.loop is None:
                if error is not None:
                    log.error("a background fsync job failed", exc_info=error)
                continue
            with contextlib.suppress(RuntimeError):  # the loop closed: nobody waits
                job.loop.call_soon_threadsafe(_settle, job, result, error)


def _settle(job: _Job, result: Any, error: BaseException | None) -> None:
    job.ended = True
    future = job.future
    if future is None or future.done():
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)


THREADS = FsyncThreads()
"""The process's fsync threads (every server of a process shares them)."""
