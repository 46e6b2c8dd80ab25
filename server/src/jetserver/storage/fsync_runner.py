"""Where a partition's fsync runs: on the event loop while fsyncs are fast and few, else in a
worker thread.

A worker thread keeps the event loop free while the disk works, but the hand-off costs
wake-ups that each wait for a CPU on a busy machine (2026-11-26: publish -> consume at 500
msg/s went from 3.4-5.2 ms p50 to 2.4-3.8 ms with the fsync on the loop). So
:class:`FsyncRunner` runs an fsync directly on the loop (or, with :attr:`~FsyncRunner.
loop_wait_s`, in a thread the loop waits for, storage/waited_sync.py) unless:

* it is off (``[storage] fsync_on_loop = false``);
* the fsync is not on the way to readers: a partition with durability ``written`` or
  ``replicated`` makes records visible before their fsync, and a stalled disk must not
  stop it from serving them (tests/server/test_durability_written.py);
* an fsync on the loop recently took longer than :data:`SLOW_FSYNC_S` (a slow or stalling
  disk): for :data:`SLOW_BACKOFF_S` every fsync goes to a worker thread (a stalling disk
  stalls the loop for one fsync per back-off period). What counts is the system call
  alone, less the loop thread's waits for a CPU meanwhile (:mod:`.cpu_waits`);
* fsyncs on the loop took more than :data:`LOOP_SHARE` of its time lately (a decaying sum
  over :data:`WINDOW_S`): under load the loop has other work, and a thread lets it parse
  the next requests while the disk works (group commit then covers them);
* another thread is already fsyncing that log (the loop never waits for it);
* the bytes to fsync are many (more than :data:`INLINE_MAX_BYTES` appended since the last
  fsync: a large value, a burst, a follower catching up): the fsync's time grows with its
  bytes; in a thread the next requests are read and appended meanwhile (group commit);
* other logs' fsyncs are asked for in the same turn (a ProduceMany's partitions): they go
  to the threads as one batch and run at once (below), not one after the other;
* other work is ready to run on the loop, still after it had one turn (a busy server's
  requests must not wait behind the disk: ack LEADER publishing fell by a quarter).

Durability is the same either way: the high watermark and ALL acks move only after the
fsync returned. Worker threads are :data:`jetserver.storage.fsync_threads.THREADS` (a job and one
loop callback per fsync, not ``anyio.to_thread``'s two extra loop turns and ~110 calls).
The fsyncs handed to threads in one loop turn go as ONE batch (:class:`FlushBatch`): a
ProduceMany's 500 partitions' flushers ask in the same turn, and the batch is split among
at most :data:`FSYNC_LANES` jobs (a thread each) that run at once, each fsyncing its share
of the logs in turn: 8 hand-offs instead of 500, and fsyncs the disk commits together
(one thread fsyncing 4 logs in turn made 4 commits one after the other). The jobs of a
batch hand the loop ONE callback, from the one that ends last (not a wake-up per job).
A request that appended to many partitions may hand their fsyncs over as one such batch
itself (:meth:`FsyncRunner.flush_group`, broker/commit_group.py), with one callback.
Large writes (:meth:`FsyncRunner.append_large`): a batch of a few large records (at least
:data:`LARGE_WRITE_BYTES`) is written from a worker thread, not on the loop. A write to a
segment file blocks while an fsync of that file commits (ext4: a 1 MiB write took 0.4 ms
p50 alone, 5-9 ms during an fsync, 2026-11-29). Batches of many small records stay on
the loop (their framing is CPU, which a thread would only contend for under the GIL).
Task safety: event loop thread only.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import logging
import math
import os
import threading
import time
import types
from collections.abc import Callable, Coroutine, Generator, Sequence
from typing import Any, cast

import attrs

from jetserver.infra import hops
from jetserver.logs import fields
from jetserver.storage import Log, durability_trace
from jetserver.storage.cpu_waits import LoopSyscalls
from jetserver.storage.errors import StorageError
from jetserver.storage.files import fdatasync
from jetserver.storage.flush_batch import FlushBatch, flush_all
from jetserver.storage.framing import Body
from jetserver.storage.fsync_threads import FSYNC_LANES, SYNCS, THREADS
from jetserver.storage.group_commit import PendingSync
from jetserver.storage.waited_sync import LATE, Then, sync_waiting

log = logging.getLogger(__name__)

SLOW_FSYNC_S = 0.02
"""An fsync on the loop that took longer sends fsyncs to worker threads for a while."""
SLOW_BACKOFF_S = 10.0
"""How long fsyncs stay in worker threads after a slow one on the loop."""
WINDOW_S = 0.1
"""Time constant of the decaying sum of loop time spent in fsyncs."""
LOOP_SHARE = 0.2
"""Above this share of loop time spent in fsyncs, they go to worker threads."""
INLINE_MAX_BYTES = 256 * 1024
"""Most bytes an fsync on the loop covers (:attr:`Log.unflushed_bytes`), and most bytes a
follower appends on the loop before an fsync there."""
FREE_TURN_S = 500e-6
"""On uvloop: a loop turn back within this counts as a free loop. An empty turn took 4 us
p50 on the dev VM, one that sends a LEADER ack's response (what runs between an append
and its fsync at light load) about 100 us; a turn of a loaded server, which reads and
handles several requests, takes milliseconds."""

LARGE_WRITE_BYTES = 64 * 1024
"""A batch of at least this many bytes (in at most :data:`LARGE_WRITE_MAX_RECORDS` records)
is a large write (:meth:`FsyncRunner.append_large`)."""
LARGE_WRITE_MAX_RECORDS = 64
"""A batch of more records is never a large write (small records: framed on the loop; the
bytes are not even summed)."""
_HEADS_AND_TAILS: frozenset[type] = frozenset({tuple})
_WHOLE: frozenset[type] = frozenset({bytes})

__all__ = ["LATE", "FsyncRunner"]


@attrs.define
class FsyncRunner:
    """Runs the fsyncs of a server's partitions (see the module docstring); one per server."""

    on_loop: bool = True
    """False: every fsync in a worker thread."""
    clock: Callable[[], float] = attrs.field(default=time.perf_counter, repr=False)
    """Monotonic seconds."""
    loop_fsyncs: int = 0
    """fsyncs run on the loop."""
    thread_fsyncs: int = 0
    """fsyncs handed to a worker thread."""
    slow_fsyncs: int = 0
    """fsyncs on the loop whose system call, less the loop thread's waits for a CPU, took
    longer than :data:`SLOW_FSYNC_S` (each started a back-off)."""
    waited_fsyncs: int = 0
    """fsyncs on the loop that took longer by the wall clock only (no back-off)."""
    thread_jobs: int = 0
    """Batches handed to worker threads (the fsyncs asked for in one loop turn)."""
    thread_sync: Callable[[int], None] | None = attrs.field(default=None, repr=False)
    """What :meth:`sync_in_thread_then`'s thread runs on the descriptor; None: fdatasync
    (traced when the durability trace is on)."""
    loop_wait_s: float = 0.0
    """> 0: an fsync the loop would run runs in a split syncs' thread that the loop waits
    for, up to this long (:meth:`flush_waited`); 0: on the loop (:meth:`flush_probed`)."""
    large_writes_in_thread: bool = True
    """False: large writes on the loop too (``[storage] large_writes_in_thread``)."""
    loop_large_writes: int = 0
    """Large writes made on the loop (:attr:`large_writes_in_thread` false)."""
    loop_large_write_s: float = 0.0
    """Loop time spent in them."""
    thread_large_writes: int = 0
    """Large writes made from a worker thread."""
    _batch: FlushBatch | None = attrs.field(default=None, repr=False)
    _probing: int = 0
    """Callers of :meth:`flush_here` in their free-loop probe turn now."""
    _busy: float = 0.0
    _busy_at: float = 0.0
    _threads_until: float = 0.0
    _syscalls: LoopSyscalls = attrs.field(
        default=attrs.Factory(lambda self: LoopSyscalls(self.clock), takes_self=True), repr=False
    )

    async def flush(
        self,
        log_: Log,
        upto: int | None = None,
        *,
        on_loop: bool = True,
        loop: asyncio.AbstractEventLoop | None = None,
        unless: Callable[[], bool] | None = None,
        then: Callable[[int], None] | None = None,
    ) -> int:
        """``log_.flush(upto)``, on the loop or in a worker thread (always in a thread with
        ``on_loop`` false). ``loop``: the running loop, if the caller knows it. ``unless``:
        asked after the probe turn (:meth:`flush_here`); True sends the fsync to a thread.
        ``then``: called with the flushed offset in the loop callback that learns a
        thread's fsync ended, before the caller resumes (:meth:`_flush_in_thread`)."""
        if on_loop:
            flushed = await self.flush_here(log_, upto, loop, unless)
            if flushed is not None:
                return flushed
        return await self.flush_in_thread(log_, upto, loop, then)

    def flush_in_thread(
        self,
        log_: Log,
        upto: int | None = None,
        loop: asyncio.AbstractEventLoop | None = None,
        then: Callable[[int], None] | None = None,
    ) -> Coroutine[Any, Any, int]:
        """:meth:`flush` with ``on_loop`` false: a plain call that returns the thread job's
        coroutine (no coroutine of its own per fsync)."""
        self.thread_fsyncs += 1
        return self._flush_in_thread(log_, upto, loop, then)

    async def _flush_in_thread(
        self,
        log_: Log,
        upto: int | None,
        loop: asyncio.AbstractEventLoop | None,
        then: Callable[[int], None] | None = None,
    ) -> int:
        """``log_.flush(upto)`` in a worker thread, in one job with the other fsyncs asked
        for in this loop turn. A caller cancelled meanwhile still waits for the job to end
        (an fsync's outcome is its committer's to see), as :meth:`FsyncThreads.run`.

        Each caller waits on a future of its own, set by the job's loop callback: no task
        per batch and no ``shield`` (each was one more loop turn and task step per fsync
        between the thread's return and the caller's). ``then(flushed)``, if given, runs
        in that callback when the fsync succeeded (a committer moves the HW there: one
        loop turn before its task would; it must not raise)."""
        batch = self._batch_of_turn(loop)
        waiter: asyncio.Future[tuple[int, BaseException | None]] = batch.loop.create_future()
        batch.logs.append((log_, upto))
        batch.waiters.append(waiter)
        if then is not None:
            if batch.thens is None:
                batch.thens = {}
            batch.thens[len(batch.waiters) - 1] = then
        try:
            flushed, error = await waiter
        except asyncio.CancelledError:
            await batch.wait_ended()
            raise
        if error is not None:
            raise error
        return flushed

    def flush_group(
        self,
        logs: list[Log],
        loop: asyncio.AbstractEventLoop,
        settled: Callable[[list[tuple[int, BaseException | None]]], None],
    ) -> None:
        """``log.flush()`` of each of ``logs`` in worker threads as one batch (split among
        lanes); ``settled`` gets every outcome, (flushed offset, None) or (-1, its error),
        in one loop callback once all ended: it commits (broker/commit_group.py)."""
        self.thread_fsyncs += len(logs)
        batch = FlushBatch(loop, [(log_, None) for log_ in logs], group=settled)
        loop.call_soon(self._submit, batch)

    def sync_in_thread_then(
        self,
        log_: Log,
        loop: asyncio.AbstractEventLoop,
        then: Callable[[int, BaseException | None], None],
    ) -> bool:
        """The fsync of ``log_`` to its LEO in a worker thread, handed over now (no batch
        turn): :meth:`Log.begin_sync` on the loop, the fdatasync and :meth:`Log.end_sync`
        in a thread of :data:`~jetserver.storage.fsync_threads.SYNCS` (the split syncs'
        own lane: its jobs wait for nothing but the disk); ``then(flushed, None)`` or
        ``then(-1, error)`` in the job's loop callback, no future and no task
        (:class:`jetserver.broker.commit_soon.CommitSoon`); now if the log is flushed
        already or could not begin. False, nothing done, if another fsync of the log
        runs. ``then`` must not raise. The group commit's end is the thread's: a
        ``Log.flush`` waiting for it in another thread waits for the disk alone, never
        for the loop's next turn (tests/storage/test_split_sync_race.py)."""
        try:
            pending = log_.begin_sync()
        except Exception as exc:
            then(-1, exc)
            return True
        if pending is None:
            return False
        if isinstance(pending, int):
            then(pending, None)
            return True
        self.thread_fsyncs += 1
        self.thread_jobs += 1
        sync = self.thread_sync or (
            os.fdatasync if durability_trace.TRACE is None and not hops.ENABLED else fdatasync
        )
        SYNCS.call(
            loop, functools.partial(_synced, pending, then), _sync_and_end, log_, pending, sync
        )
        return True

    async def sync_in_thread(
        self,
        log_: Log,
        loop: asyncio.AbstractEventLoop,
        then: Callable[[int], None] | None = None,
    ) -> int:
        """:meth:`flush_in_thread` to the LEO as :meth:`sync_in_thread_then` runs it (the
        fsync and its end in the split syncs' thread, no batch turn), for a caller that
        awaits it (an ALL-acked request's commit, :meth:`Committer.commit_here
        <jetserver.broker.commit.Committer.commit_here>`); ``then(flushed)`` in the job's
        loop callback once it succeeded, as there. Another fsync of the log running: as
        :meth:`flush_in_thread`. A caller cancelled meanwhile leaves the job to end on its
        own (its outcome is still recorded, by :meth:`Log.end_sync` in the thread).

        Raises:
            SyncFailedError, StorageError: as :meth:`Log.flush`.
        """
        outcome: asyncio.Future[tuple[int, BaseException | None]] = loop.create_future()

        def ended(flushed: int, error: BaseException | None) -> None:
            if error is None and then is not None:
                then(flushed)
            if not outcome.done():
                outcome.set_result((flushed, error))

        if not self.sync_in_thread_then(log_, loop, ended):
            return await self.flush_in_thread(log_, None, loop, then)
        flushed, error = await outcome
        if error is not None:
            raise error
        return flushed

    def _batch_of_turn(self, loop: asyncio.AbstractEventLoop | None) -> FlushBatch:
        """The batch of the fsyncs handed to threads in this loop turn (made, and its
        submission the next turn, by the first)."""
        batch = self._batch
        if batch is None:
            loop = loop or asyncio.get_running_loop()
            batch = self._batch = FlushBatch(loop)
            loop.call_soon(self._submit, batch)
        return batch

    def _submit(self, batch: FlushBatch) -> None:
        if self._batch is batch:
            self._batch = None
        self.thread_jobs += 1
        logs = batch.logs
        size = -(-len(logs) // FSYNC_LANES)
        batch.results = [(-1, None)] * len(logs)
        batch.size = size
        batch.lanes = -(-len(logs) // size)
        if batch.lanes == 1:
            THREADS.call(batch.loop, functools.partial(batch.lane_done, 0), flush_all, logs)
            return
        batch._lock = threading.Lock()
        for i in range(0, len(logs), size):
            THREADS.submit(functools.partial(batch.run_lane, i))

    async def flush_here(
        self,
        log_: Log,
        upto: int | None = None,
        loop: asyncio.AbstractEventLoop | None = None,
        unless: Callable[[], bool] | None = None,
        *,
        checked: bool = False,
    ) -> int | None:
        """``log_.flush(upto)`` on the loop if this runner would run it there now (after
        one turn that lets ready work run first) and it covers at most
        :data:`INLINE_MAX_BYTES`; None, with nothing done, if not: the
        caller leaves the fsync to a thread (its partition's flusher). ``loop``: the
        running loop, if the caller knows it (looking it up costs a getpid system call
        on Python 3.11). ``unless``: the caller's own reason to keep the loop free, asked
        after that turn (what ran in it counts), e.g. a compare-and-set that lost a race
        to the records being fsynced: its writer retries within a round trip, and an
        fsync on the loop would hold the retry until the disk is done
        (:meth:`jetserver.broker.commit.Committer.commit_here`). ``checked``: the caller
        saw :meth:`may_run_here_for` hold in this turn (it is not asked again)."""
        if not (checked or self.may_run_here_for(log_)):
            return None
        self._probing += 1
        try:
            free = await _loop_free(loop)
        finally:
            self._probing -= 1
        if not free or self._probing or self._batch is not None:
            # Busy, or other logs' fsyncs were asked for in this turn (the partitions of
            # a ProduceMany): they go to threads together and run at once (one batch),
            # where on the loop they ran one after the other, the first one's before the
            # others were even handed over.
            return None
        if unless is not None and unless():
            return None
        return self._fsync_here(log_, upto)

    def flush_probed(self, log_: Log) -> int | None:
        """:meth:`flush_here`'s fsync to the LEO once its caller, not a task, found the
        loop free after a turn (:meth:`may_run_here_for` held before it); None, nothing
        done, as there (other fsyncs asked for in this turn, another thread fsyncing)."""
        if self._probing or self._batch is not None:
            return None
        return self._fsync_here(log_, None)

    def flush_waited(self, log_: Log, loop: asyncio.AbstractEventLoop, late: Then) -> int | None:
        """:meth:`flush_probed` with the system call in a split syncs' thread that the
        loop waits for up to :attr:`loop_wait_s` (:func:`sync_waiting`): :data:`LATE` if
        it did not end by then (``late`` gets its outcome on the loop); the wait counts as
        a loop fsync's time (a longer one than :data:`SLOW_FSYNC_S` backs off).

        Raises:
            SyncFailedError, StorageError: as :meth:`flush_probed`.
        """
        if self._probing or self._batch is not None:
            return None
        start = self.clock()
        self._syscalls.mark(start)
        try:
            flushed = sync_waiting(log_, loop, self.loop_wait_s, late, self.thread_sync)
        finally:
            self._syscalls.syscall_s = self.clock() - start  # (the wait: all the disk's)
            self._spent(start)
        if flushed is not None and flushed >= 0:
            self.loop_fsyncs += 1
        return flushed

    def _fsync_here(self, log_: Log, upto: int | None) -> int | None:
        start = self.clock()
        self._syscalls.mark(start)
        if hops.ENABLED:
            hops.mark("loop_fsync.start")
        try:
            flushed = log_.flush_unless_busy(upto, self._syscalls.timed)
        finally:
            self._spent(start)
            if hops.ENABLED:
                hops.mark("loop_fsync.end")
        if flushed is not None:
            self.loop_fsyncs += 1
        return flushed

    async def append_and_flush(self, log_: Log, data: bytes | memoryview) -> None:
        """Append records fetched from a leader (``log_.append_raw``) and fsync them: on
        the loop if it is free (the probe turn), the fsyncs on it are fast (no back-off)
        and the records few (:data:`INLINE_MAX_BYTES`), whatever share of the loop's time
        fsyncs took lately (they still count in it, for the others' fsyncs). The share
        keeps the loop for work that could run during an fsync; a follower's fetcher
        waits for its own fsync either way (its next fetch reports it), and what else the
        loop has is what the probe sees. In a thread, the hand-off, the worker's wake-up
        and the loop's for the result were 2-3 of a follower's 9 context switches per
        message at RF 3 ack ALL, 500 msg/s, where the share sent every fsync there."""
        if len(data) <= INLINE_MAX_BYTES and self._loop_allowed() and await _loop_free():
            start = self.clock()
            self._syscalls.mark(start)
            try:
                log_.append_raw(data)
                flushed = log_.flush_unless_busy(None, self._syscalls.timed)
            finally:
                self._spent(start)
            if flushed is not None:
                self.loop_fsyncs += 1
                if hops.ENABLED:
                    hops.mark("loop_fsync.fetched")  # (a follower's, not in a thread)
                return
            self.thread_fsyncs += 1
            await THREADS.run(log_.flush)
            return
        self.thread_fsyncs += 1
        await THREADS.run(_append_and_flush, log_, data)

    @staticmethod
    def is_large(bodies: Sequence[Body]) -> bool:
        """True if appending ``bodies`` is a large write (:meth:`append_large`): at least
        :data:`LARGE_WRITE_BYTES` in at most :data:`LARGE_WRITE_MAX_RECORDS` records."""
        if len(bodies) > LARGE_WRITE_MAX_RECORDS:
            return False
        kinds = set(map(type, bodies))  # one kind: summed in C (not 2 lines a body)
        if kinds == _HEADS_AND_TAILS:  # a direct request's (record_body)
            parts = itertools.chain.from_iterable(cast("Sequence[tuple[bytes, bytes]]", bodies))
            return sum(map(len, parts)) >= LARGE_WRITE_BYTES
        if kinds == _WHOLE:
            return sum(map(len, bodies)) >= LARGE_WRITE_BYTES
        size = 0
        for body in bodies:
            size += len(body[0]) + len(body[1]) if isinstance(body, tuple) else len(body)
        return size >= LARGE_WRITE_BYTES

    async def append_large(
        self, log_: Log, bodies: Sequence[Body], timestamp_ns: int, leader_epoch: int
    ) -> tuple[int, int]:
        """``log_.append(bodies, timestamp_ns, leader_epoch)`` of a large write
        (:meth:`is_large`), from a worker thread (module docstring): the loop serves other
        work meanwhile. The caller is the log's one writer and awaits it before its next
        append (appends stay in order); the LEO moves when the write returned, as on the
        loop. A cancelled caller still waits for the write to end (``FsyncThreads.run``)."""
        if self.large_writes_in_thread:
            self.thread_large_writes += 1
            return await THREADS.run(log_.append, bodies, timestamp_ns, leader_epoch)
        start = self.clock()
        try:
            return log_.append(bodies, timestamp_ns, leader_epoch)
        finally:
            self.loop_large_writes += 1
            self.loop_large_write_s += self.clock() - start

    def may_run_here_for(self, log_: Log) -> bool:
        """:meth:`may_run_here`, and ``log_``'s next fsync covers at most
        :data:`INLINE_MAX_BYTES` (the free-loop probe is not asked)."""
        return log_.unflushed_bytes <= INLINE_MAX_BYTES and self.may_run_here()

    def may_run_here(self) -> bool:
        """True if an fsync may run on the loop now (on, no back-off after a slow one, the
        loop's recent share in fsyncs low); the free-loop probe is not asked."""
        if not self.on_loop:
            return False
        now = self.clock()
        if now < self._threads_until:
            return False
        self._decay(now)
        return self._busy <= LOOP_SHARE * WINDOW_S

    def _loop_allowed(self) -> bool:
        """On, and no back-off after a slow fsync on the loop (the share not asked)."""
        return self.on_loop and self.clock() >= self._threads_until

    def _decay(self, now: float) -> None:
        if self._busy:
            self._busy *= math.exp(-(now - self._busy_at) / WINDOW_S)
        self._busy_at = now

    def _spent(self, start: float) -> None:
        """A loop fsync (and what ran with it) since ``start``: its share of the loop's
        time, and the back-off if its system call was slow (module docstring)."""
        now = self.clock()
        took = now - start
        self._decay(now)
        self._busy += took
        if took <= SLOW_FSYNC_S:
            return
        syscall, waited = self._syscalls.net()
        if syscall - waited <= SLOW_FSYNC_S:
            self.waited_fsyncs += 1
            return
        self.slow_fsyncs += 1
        self._threads_until = now + SLOW_BACKOFF_S
        log.warning(
            "slow fsync on the event loop; fsyncs go to worker threads for a while",
            extra=fields(
                took_ms=round(took * 1000, 2),
                syscall_ms=round(syscall * 1000, 2),
                cpu_wait_ms=round(waited * 1000, 2),
                for_s=SLOW_BACKOFF_S,
            ),
        )


async def _loop_free(loop: asyncio.AbstractEventLoop | None = None) -> bool:
    """True if nothing else is ready to run on the event loop, after letting what is ready
    run once (e.g. the response to a LEADER-acked Produce, which must not wait behind the
    fsync). ``loop``: the running loop if the caller knows it (asyncio only).

    asyncio's own loop shows its ready queue; uvloop does not, so there the loop gets one
    turn and is free if that turn came back within :data:`FREE_TURN_S` (the turn of a
    busy server, which reads and handles requests, takes longer). Elsewhere (trio)
    True: the other guards decide.
    """
    if loop is None:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return True  # not asyncio (trio)
    # On asyncio a checkpoint is sleep(0): called directly, without anyio's look-up of
    # the running backend.
    ready = getattr(loop, "_ready", None)
    if ready is None:
        start = time.perf_counter()
        await _one_turn()
        return time.perf_counter() - start <= FREE_TURN_S
    if not ready:
        return True
    await _one_turn()
    return not ready


def free_after_turn(loop: asyncio.AbstractEventLoop, since: float) -> bool:
    """:func:`_loop_free`'s verdict for a caller that is not a task: a loop callback that
    let the loop turn once since ``since`` (``time.perf_counter``) by calling itself back
    (:class:`jetserver.broker.commit_soon.CommitSoon`)."""
    ready = getattr(loop, "_ready", None)
    if ready is None:
        return time.perf_counter() - since <= FREE_TURN_S
    return not ready


@types.coroutine
def _one_turn() -> Generator[None, None, None]:
    """One event-loop turn for the task (asyncio's ``sleep(0)`` without its own frame
    in every resumption of the task's chain of coroutines)."""
    yield


def _sync_and_end(log_: Log, pending: PendingSync, sync: Callable[[int], None]) -> int:
    """:meth:`FsyncRunner.sync_in_thread_then`'s job (in a thread of ``SYNCS``): the
    fsync, then its end in the log's group commit: the flushed offset.

    Raises:
        SyncFailedError: the fsync failed (the log is poisoned, as after ``Log.flush``).
    """
    error: BaseException | None = None
    try:
        sync(pending.fd)
    except BaseException as exc:  # (the log's to record: poisoned)
        error = exc
    return log_.end_sync(pending, error)


def _synced(
    pending: PendingSync,
    then: Callable[[int, BaseException | None], None],
    flushed: int | None,
    error: BaseException | None,
) -> None:
    """:meth:`FsyncRunner.sync_in_thread_then`'s job ended (a loop callback)."""
    if error is not None or flushed is None:
        then(-1, error or StorageError("the fsync job ended without an outcome"))
        return
    if flushed < pending.covered:  # the log was cut back meanwhile: nothing proven
        then(-1, StorageError("the log was truncated during its fsync"))
        return
    then(flushed, None)


def _append_and_flush(log_: Log, data: bytes | memoryview) -> None:
    """Append records fetched from the leader and fsync them (in a worker thread)."""
    log_.append_raw(data)
    log_.flush()
