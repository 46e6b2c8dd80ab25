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

:meth:`FsyncThreads.call` hands a job over with a loop callback for its outcome (no future,
no task to wake). :meth:`FsyncThreads.submit` hands a job over without any result coming
back (the fsyncs of ``written`` partitions, :mod:`jetserver.storage.flush_behind`): no loop wake-up
at all.

Task safety: :meth:`FsyncThreads.run` and :meth:`FsyncThreads.call` from event-loop
threads, :meth:`FsyncThreads.submit` from any; workers are daemon threads.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from jetserver.storage.loop_waker import LoopWaker, waker_of

__all__ = ["FSYNC_LANES", "MAX_THREADS", "SYNCS", "THREADS", "FsyncThreads"]

log = logging.getLogger(__name__)

T = TypeVar("T")

MAX_THREADS = 40
"""Most worker threads (anyio's default limit for ``to_thread``): beyond, jobs queue."""
FSYNC_LANES = 8
"""Most threads that fsync one batch of files at once, each its share in turn (a loop turn's
partition fsyncs, :mod:`jetserver.storage.fsync_runner`; a batch of new partitions' directories,
``broker.stream_files.sync_directories``): a disk commits fsyncs that run at once together,
one after the other each on its own (ext4 on the dev VM's virtio disk, 2026-11-28: append
to 4 files, then their fdatasyncs one after the other in one thread took 7.4-9.6 ms p50, at
once in 4 threads 0.53-0.62 ms, one file's alone 0.23-0.34 ms; 32 directory fsyncs 49-73 ms
one after the other, 5-13 ms in 8 threads)."""


class _Job:
    """One call: run in a worker thread, settled on its loop."""

    __slots__ = ("args", "ended", "fn", "future", "loop", "then", "waker")

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop | None,
        fn: Callable[..., Any],
        args: tuple[Any, ...],
        then: Callable[[Any, BaseException | None], None] | None = None,
    ) -> None:
        self.loop = loop
        """None: nobody waits (:meth:`FsyncThreads.submit`)."""
        self.then = then
        """Called on ``loop`` with the outcome instead of settling a future
        (:meth:`FsyncThreads.call`)."""
        self.future: asyncio.Future[Any] | None = (
            None if loop is None or then is not None else loop.create_future()
        )
        self.fn = fn
        self.args = args
        self.ended = False
        self.waker: LoopWaker | None = None
        """Hands the outcome to :attr:`then` from the loop's I/O phase (:meth:`FsyncThreads.
        call`); None: ``call_soon_threadsafe``."""


class _Worker:
    """An idle worker's wake-up: a lock held while it waits, released to hand it a job."""

    __slots__ = ("job", "wake")

    def __init__(self) -> None:
        self.wake = threading.Lock()
        self.wake.acquire()
        self.job: _Job | None = None


class FsyncThreads:
    """Worker threads started as needed, never more than ``max_threads``; a worker waits
    for jobs for the life of the process (daemon threads, as many as were ever busy at
    once).

    A job goes straight to the worker that became idle last (a stack: its caches are the
    warmest), woken by its own lock, so exactly one thread wakes per job. Workers waiting
    on one shared queue woke each other in turn for every job (``perf stat`` of a server
    with two idle workers, fsyncs in threads at 500 msg/s: about twice the futex calls
    and context switches per message of one)."""

    __slots__ = ("_idle", "_lock", "_pending", "_threads", "max_threads", "name")

    def __init__(self, max_threads: int = MAX_THREADS, name: str = "jet-fsync") -> None:
        self.max_threads = max_threads
        self.name = name
        """Its threads' name."""
        self._lock = threading.Lock()
        self._idle: list[_Worker] = []
        """Idle workers, the last one to become idle at the end."""
        self._pending: collections.deque[_Job] = collections.deque()
        """Jobs waiting for a worker (all ``max_threads`` busy)."""
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

    def call(
        self,
        loop: asyncio.AbstractEventLoop,
        then: Callable[[Any, BaseException | None], None],
        fn: Callable[..., Any],
        *args: Any,
    ) -> None:
        """``fn(*args)`` in a worker thread, then ``then(result, None)`` or ``then(None,
        error)`` as a callback on ``loop`` (not called if the loop closed meanwhile). No
        future and no task: the loop turn that reads the worker's wake-up runs ``then``
        itself, where :meth:`run` settles a future whose awaiting task steps one turn later
        (:mod:`jetserver.storage.fsync_runner`'s batches: the task that awaited it was a task
        created, started and woken per fsync handed to a thread). ``then`` must not raise.
        From the event loop thread."""
        job = _Job(loop, fn, args, then)
        job.waker = waker_of(loop)
        self._put(job)

    def submit(self, fn: Callable[[], object]) -> None:
        """``fn()`` in a worker thread, and nothing handed back: no future, no loop
        callback (no wake-up of the event loop; ``fn`` tells whom it must itself). An
        exception it raises is logged. From any thread."""
        self._put(_Job(None, fn, ()))

    def _put(self, job: _Job) -> None:
        worker = None
        start = False
        with self._lock:
            if self._idle:
                worker = self._idle.pop()
                worker.job = job
            elif self._threads < self.max_threads:
                self._threads += 1
                start = True
            else:
                self._pending.append(job)
        if worker is not None:
            worker.wake.release()
        elif start:
            threading.Thread(target=self._work, args=(job,), name=self.name, daemon=True).start()

    def _next(self, worker: _Worker) -> _Job | None:
        """A pending job, or None after ``worker`` joined the idle ones (it must wait)."""
        with self._lock:
            if self._pending:
                return self._pending.popleft()
            self._idle.append(worker)
            return None

    def _work(self, first: _Job) -> None:
        worker = _Worker()
        job: _Job | None = first
        while True:
            if job is None:
                worker.wake.acquire()  # released by _put, with the job set
                job, worker.job = worker.job, None
                assert job is not None
            try:
                result, error = job.fn(*job.args), None
            except BaseException as exc:  # handed to the caller, as run_sync does
                result, error = None, exc
            done, job = job, self._next(worker)  # idle before the result can cause the next
            if done.loop is None:
                if error is not None:
                    log.error("a background fsync job failed", exc_info=error)
                continue
            if done.waker is not None:
                done.waker.call(_settle, done, result, error)
                continue
            with contextlib.suppress(RuntimeError):  # the loop closed: nobody waits
                done.loop.call_soon_threadsafe(_settle, done, result, error)


def _settle(job: _Job, result: Any, error: BaseException | None) -> None:
    job.ended = True
    if job.then is not None:
        job.then(result, error)
        return
    future = job.future
    if future is None or future.done():
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)


THREADS = FsyncThreads()
"""The process's fsync threads (every server of a process shares them)."""
SYNCS = FsyncThreads(name="jet-sync")
"""The threads of the split syncs (:meth:`FsyncRunner.sync_in_thread_then
<jetserver.storage.fsync_runner.FsyncRunner.sync_in_thread_then>`: an fsync whose group
commit the loop began): a lane of their own. A job of :data:`THREADS` may wait in a log's
group commit for that log's split sync (a lane's ``Log.flush``); a split sync's job waits
for nothing but the disk, so it never stands behind such a job (all
:data:`MAX_THREADS` of them waiting, or any one, were the pool ever bounded lower)."""
