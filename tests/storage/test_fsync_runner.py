"""Where fsyncs run (jetserver.storage.fsync_runner): on the event loop while they are fast and few,
in a worker thread when the disk is slow, the loop busy, or another thread already fsyncs.

Real logs on real files; the fdatasync the log calls is wrapped to be gated or to report a
duration, and the runner's clock is a test clock, so the decisions are checked without
timing anything.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import anyio.lowlevel
import pytest

from jetserver.storage import Log, SyncFailedError, cpu_waits, files, fsync_runner, fsync_threads
from jetserver.storage import log as log_module
from jetserver.storage.fsync_runner import FsyncRunner

from .helpers import bodies, gate_fdatasync

pytestmark = pytest.mark.anyio
WAIT = 10.0
LOOPS = [
    pytest.param(("asyncio", {"use_uvloop": False}), id="asyncio"),
    pytest.param(("asyncio", {"use_uvloop": True}), id="uvloop"),
]
"""The server's event loops: asyncio's own and uvloop (``[server] event_loop``)."""


class Clock:
    """A clock that each wrapped fdatasync moves forward by ``fsync_s``."""

    def __init__(self) -> None:
        self.now = 100.0
        self.fsync_s = 0.0002
        self.waited = 0.0
        """The loop thread's waits for a CPU so far (``cpu_waits.thread_cpu_wait_s``)."""
        self.wait_s = 0.0
        """How much of each fdatasync's ``fsync_s`` was such a wait."""

    def waits(self) -> float:
        return self.waited

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    c = Clock()
    real = files.fdatasync

    def timed(fd: int) -> None:
        real(fd)
        c.now += c.fsync_s
        c.waited += c.wait_s

    monkeypatch.setattr(log_module, "fdatasync", timed)
    monkeypatch.setattr(cpu_waits, "thread_cpu_wait_s", c.waits)
    return c


@pytest.fixture
def log(tmp_path: Path) -> Iterator[Log]:
    with Log.open(tmp_path) as lg:
        yield lg


@pytest.mark.parametrize("anyio_backend", LOOPS)
async def test_light_load_fsyncs_on_the_loop(
    log: Log, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    # uvloop's free-turn probe times a real loop turn: on a loaded machine one can pass
    # FREE_TURN_S although nothing else is ready (here only the share rule is under test).
    monkeypatch.setattr(fsync_runner, "FREE_TURN_S", 1.0)
    runner = FsyncRunner(clock=clock)
    loop_thread = threading.get_ident()
    seen: list[int] = []
    timed = log_module.fdatasync

    def where(fd: int) -> None:
        seen.append(threading.get_ident())
        timed(fd)

    monkeypatch.setattr(log_module, "fdatasync", where)
    for i in range(20):
        log.append(bodies(1, start=i), 1, 0)
        assert await runner.flush(log) == i + 1
        clock.now += 0.002  # 500 fsyncs/s: 10 % of the loop at 0.2 ms each
    assert seen == [loop_thread] * 20
    assert (runner.loop_fsyncs, runner.thread_fsyncs, runner.slow_fsyncs) == (20, 0, 0)
    assert log.flushed_offset == 20


@pytest.mark.parametrize("anyio_backend", LOOPS)
async def test_the_loop_is_free_only_when_nothing_else_is_ready() -> None:
    """asyncio shows its ready queue; uvloop does not, and its turn is timed instead."""
    stop = anyio.Event()

    async def busy_task() -> None:  # always ready: 1 ms of work per step
        while not stop.is_set():
            start = time.perf_counter()
            while time.perf_counter() - start < 0.001:
                pass
            await anyio.lowlevel.checkpoint()

    async with anyio.create_task_group() as tg:
        tg.start_soon(busy_task)
        await anyio.lowlevel.checkpoint()
        busy = [await fsync_runner._loop_free() for _ in range(20)]
        stop.set()
    idle = [await fsync_runner._loop_free() for _ in range(20)]
    assert not any(busy)
    assert any(idle)  # timed on uvloop: a preempted turn may look busy, never all twenty


async def test_a_known_loop_is_not_looked_up_again(
    log: Log, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A caller that knows the running loop passes it: ``asyncio.get_running_loop`` calls
    getpid on Python 3.11, a system call per fsync on the loop (``python -m bench cost``)."""
    loop = asyncio.get_running_loop()

    def no_lookup() -> asyncio.AbstractEventLoop:
        raise AssertionError("the loop was looked up again")

    monkeypatch.setattr(fsync_runner.asyncio, "get_running_loop", no_lookup)
    runner = FsyncRunner(clock=clock)
    log.append(bodies(3), 1, 0)
    assert await runner.flush_here(log, loop=loop) == 3
    assert runner.loop_fsyncs == 1


async def test_off_means_every_fsync_in_a_thread(log: Log, clock: Clock) -> None:
    runner = FsyncRunner(on_loop=False, clock=clock)
    log.append(bodies(3), 1, 0)
    assert await runner.flush(log) == 3
    assert (runner.loop_fsyncs, runner.thread_fsyncs) == (0, 1)


@pytest.mark.parametrize("anyio_backend", LOOPS)
async def test_a_thread_fsync_wakes_its_caller_without_a_task_of_its_own(
    log: Log, clock: Clock
) -> None:
    """The worker's loop callback settles the caller's own future: no task is created,
    started and woken per batch handed to a thread, and no ``shield`` stands between
    (each a loop turn and a task step per fsync on a ``flushed`` message's way when the
    disk is slow, ``python -m bench cost``). Failed before: one task per batch."""
    loop = asyncio.get_running_loop()
    created: list[object] = []
    default = loop.get_task_factory()

    def counting(lp: asyncio.AbstractEventLoop, coro: Any, **kw: Any) -> asyncio.Future[Any]:
        created.append(coro)
        return default(lp, coro, **kw) if default else asyncio.Task(coro, loop=lp, **kw)

    runner = FsyncRunner(on_loop=False, clock=clock)
    loop.set_task_factory(counting)
    try:
        with anyio.fail_after(WAIT):
            for i in range(3):
                log.append(bodies(1, start=i), 1, 0)
                assert await runner.flush(log, loop=loop) == i + 1
    finally:
        loop.set_task_factory(default)
    assert created == []
    assert (runner.thread_fsyncs, runner.thread_jobs) == (3, 3)


async def test_a_slow_fsync_sends_the_next_ones_to_threads_for_a_while(
    log: Log, clock: Clock
) -> None:
    runner = FsyncRunner(clock=clock)
    clock.fsync_s = fsync_runner.SLOW_FSYNC_S * 2  # the disk stalls once
    log.append(bodies(1), 1, 0)
    assert await runner.flush(log) == 1
    assert (runner.loop_fsyncs, runner.slow_fsyncs) == (1, 1)
    clock.fsync_s = 0.0002
    for i in range(3):
        clock.now += fsync_runner.SLOW_BACKOFF_S / 4
        log.append(bodies(1, start=1 + i), 1, 0)
        await runner.flush(log)
    assert (runner.loop_fsyncs, runner.thread_fsyncs) == (1, 3)
    clock.now += fsync_runner.SLOW_BACKOFF_S  # the back-off is over
    log.append(bodies(1, start=4), 1, 0)
    assert await runner.flush(log) == 5
    assert (runner.loop_fsyncs, runner.thread_fsyncs) == (2, 3)


async def _flush_one(
    runner: FsyncRunner, log: Log, clock: Clock, fsync_s: float = 0.0002, wait_s: float = 0.0
) -> int:
    """Append a record and flush it, its fdatasync taking ``fsync_s`` by the clock, of
    which the loop thread waited ``wait_s`` for a CPU."""
    clock.fsync_s, clock.wait_s = fsync_s, wait_s
    log.append(bodies(1, start=log.log_end_offset), 1, 0)
    return await runner.flush(log)


async def test_a_loop_fsync_slow_only_by_the_threads_wait_for_a_cpu_starts_no_back_off(
    log: Log, clock: Clock
) -> None:
    """The loop thread preempted in its fdatasync (a loaded machine: 40 ms by the wall
    clock, 39.8 of them runnable but not running) is not a slow disk: the next fsyncs stay
    on the loop. Failed before: the wall clock alone started a back-off of 10 s."""
    runner = FsyncRunner(clock=clock)
    slow = fsync_runner.SLOW_FSYNC_S
    assert await _flush_one(runner, log, clock, slow * 2, slow * 1.99) == 1
    assert (runner.loop_fsyncs, runner.slow_fsyncs, runner.waited_fsyncs) == (1, 0, 1)
    clock.now += fsync_runner.WINDOW_S * 10  # (its share of the loop's time decayed)
    assert await _flush_one(runner, log, clock) == 2
    assert (runner.loop_fsyncs, runner.thread_fsyncs) == (2, 0)


async def test_a_slow_system_call_starts_the_back_off_whatever_the_thread_waited_before(
    log: Log, clock: Clock
) -> None:
    """The waits for a CPU subtracted are those since a reading at most
    ``cpu_waits.REFRESH_S`` old: a wait long before the fsync does not excuse a slow
    disk, and one within the fsync excuses only its own length."""
    runner = FsyncRunner(clock=clock)
    await _flush_one(runner, log, clock)  # a reading of the waits
    clock.now += cpu_waits.REFRESH_S * 2
    clock.waited += 5.0  # the thread waited long, between fsyncs
    slow = fsync_runner.SLOW_FSYNC_S
    await _flush_one(runner, log, clock, slow * 3, slow)
    assert (runner.loop_fsyncs, runner.slow_fsyncs, runner.waited_fsyncs) == (2, 1, 0)
    assert await _flush_one(runner, log, clock) == 3
    assert (runner.loop_fsyncs, runner.thread_fsyncs) == (2, 1)


async def test_a_slow_lock_around_a_fast_system_call_starts_no_back_off(
    log: Log, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What the back-off times is the system call: 40 ms spent in the log's bookkeeping
    around a fast fdatasync (a lock another thread held, the group commit) is not the
    disk's."""
    runner = FsyncRunner(clock=clock)
    real = log_module.FileLease

    def slow_lease(file: Any) -> Any:
        clock.now += fsync_runner.SLOW_FSYNC_S * 2
        return real(file)

    monkeypatch.setattr(log_module, "FileLease", slow_lease)
    log.append(bodies(1), 1, 0)
    assert await runner.flush(log) == 1
    assert (runner.loop_fsyncs, runner.slow_fsyncs, runner.waited_fsyncs) == (1, 0, 1)


def test_a_threads_waits_for_a_cpu_are_read_from_the_kernel() -> None:
    """``thread_cpu_wait_s`` is this thread's run delay (Linux): it grows while the
    thread shares one CPU with a busy process."""
    if not os.path.exists("/proc/thread-self/schedstat"):
        pytest.skip("no /proc/thread-self/schedstat")
    cpu = min(os.sched_getaffinity(0))
    saved = os.sched_getaffinity(0)
    hog = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        os.sched_setaffinity(hog.pid, {cpu})
        os.sched_setaffinity(0, {cpu})  # (this thread only)
        before = cpu_waits.thread_cpu_wait_s()
        deadline = time.monotonic() + 0.3
        while time.monotonic() < deadline:
            pass
        waited = cpu_waits.thread_cpu_wait_s() - before
    finally:
        os.sched_setaffinity(0, saved)
        hog.kill()
        hog.wait(WAIT)
    assert waited > 0.01


async def test_a_loop_busy_with_fsyncs_hands_them_to_threads(log: Log, clock: Clock) -> None:
    runner = FsyncRunner(clock=clock)
    clock.fsync_s = 0.001  # fast enough, but back to back: every ms of loop time is fsync
    for i in range(200):
        log.append(bodies(1, start=i), 1, 0)
        await runner.flush(log)
    assert log.flushed_offset == 200
    # The first ones ran on the loop until fsyncs filled a fifth of its time; then threads
    # (which do not count as loop time, so the share decays and the loop takes some again).
    assert runner.loop_fsyncs >= fsync_runner.LOOP_SHARE * fsync_runner.WINDOW_S / 0.001
    assert runner.thread_fsyncs > runner.loop_fsyncs
    clock.now += fsync_runner.WINDOW_S * 10  # quiet again
    before = runner.loop_fsyncs
    log.append(bodies(1, start=200), 1, 0)
    await runner.flush(log)
    assert runner.loop_fsyncs == before + 1


async def test_the_loop_never_waits_for_another_threads_fsync(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    entered, release = threading.Event(), threading.Event()
    real = files.fdatasync
    calls = [0]

    def gated(fd: int) -> None:
        calls[0] += 1
        if calls[0] == 1:
            entered.set()
            assert release.wait(WAIT)
        real(fd)

    monkeypatch.setattr(log_module, "fdatasync", gated)
    runner = FsyncRunner()
    with Log.open(tmp_path) as log:
        log.append(bodies(10), 1, 0)
        other = threading.Thread(target=log.flush)  # e.g. a stopping partition's last flush
        other.start()
        assert entered.wait(WAIT)
        log.append(bodies(5, start=10), 1, 0)
        assert log.flush_unless_busy() is None  # it would have to wait: it does not
        # The runner's own look at the log releases the other fsync once it found it busy
        # (released from the test's task instead, the other fsync could end before that
        # look, after the runner's probe turn: then the loop was free to fsync, seen once
        # in CI as thread_fsyncs == 0). The loop counts as free: only the busy log decides.
        unless_busy = Log.flush_unless_busy

        def looked(log_: Log, upto: int | None = None, timed: Any = None) -> int | None:
            flushed = unless_busy(log_, upto, timed)
            release.set()
            return flushed

        async def free(_loop: object = None) -> bool:
            return True

        monkeypatch.setattr(Log, "flush_unless_busy", looked)
        monkeypatch.setattr(fsync_runner, "_loop_free", free)
        done = [await runner.flush(log)]
        other.join(WAIT)
        assert done == [15]
        assert runner.thread_fsyncs == 1  # it went to a thread, which waited there


async def test_a_failed_fsync_on_the_loop_raises_as_in_a_thread(
    log: Log, monkeypatch: pytest.MonkeyPatch
) -> None:
    def failing(fd: int) -> None:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(log_module, "fdatasync", failing)
    runner = FsyncRunner()
    log.append(bodies(2), 1, 0)
    with pytest.raises(SyncFailedError):
        await runner.flush(log)
    assert runner.loop_fsyncs == 0
    assert log.flushed_offset == 0


async def test_follower_records_appended_and_fsynced_on_the_loop_or_in_a_thread(
    tmp_path: Path, clock: Clock
) -> None:
    with Log.open(tmp_path / "leader") as leader, Log.open(tmp_path / "follower") as follower:
        leader.append(bodies(400, size=1000), 1, 0)
        leader.flush()
        leader.set_high_watermark(leader.log_end_offset)
        raw = _read_raw(leader, 0, 2000)
        runner = FsyncRunner(clock=clock)
        await runner.append_and_flush(follower, raw)  # small: on the loop
        assert follower.flushed_offset == follower.log_end_offset > 0
        big = _read_raw(leader, follower.log_end_offset, fsync_runner.INLINE_MAX_BYTES + 10_000)
        assert len(big) > fsync_runner.INLINE_MAX_BYTES
        await runner.append_and_flush(follower, big)  # large: in a thread
        assert follower.flushed_offset == follower.log_end_offset
        assert (runner.loop_fsyncs, runner.thread_fsyncs) == (1, 1)


async def test_a_followers_records_stay_on_a_free_loop_whatever_the_fsyncs_share(
    tmp_path: Path, clock: Clock
) -> None:
    """A follower's fetcher waits for its own fsync either way: back to back, its small
    appends are fsynced on the free loop even when fsyncs fill more than LOOP_SHARE of its
    time (in a thread, the hand-off and the two wake-ups were 2-3 of a follower's context
    switches per message at RF 3 ack ALL), and they still count in the share, so the
    server's other fsyncs go to threads. Failed before: threads once the share was
    reached. A slow fsync still sends them to threads for a while."""
    with Log.open(tmp_path / "leader") as leader, Log.open(tmp_path / "follower") as follower:
        leader.append(bodies(60), 1, 0)
        leader.flush()
        leader.set_high_watermark(leader.log_end_offset)
        runner = FsyncRunner(clock=clock)
        clock.fsync_s = 0.001  # back to back: every ms of loop time is an fsync
        for offset in range(50):
            await runner.append_and_flush(follower, _read_raw(leader, offset, 100))
            assert follower.flushed_offset == follower.log_end_offset == offset + 1
        assert (runner.loop_fsyncs, runner.thread_fsyncs) == (50, 0)
        assert not runner.may_run_here()  # the others' fsyncs: to threads
        clock.fsync_s = fsync_runner.SLOW_FSYNC_S * 2
        await runner.append_and_flush(follower, _read_raw(leader, 50, 100))
        await runner.append_and_flush(follower, _read_raw(leader, 51, 100))
        assert (runner.loop_fsyncs, runner.thread_fsyncs) == (51, 1)
        assert follower.flushed_offset == follower.log_end_offset == 52


@pytest.mark.parametrize("anyio_backend", LOOPS)
async def test_an_fsync_of_many_bytes_runs_in_a_thread(
    log: Log, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An fsync that covers more than INLINE_MAX_BYTES appended since the last one goes to
    a thread even on a free loop (a 1 MiB value acked ALL blocked the loop for its fsync,
    one per message, so the next ones were not received meanwhile and no group formed).
    Failed before: on the loop."""
    monkeypatch.setattr(fsync_runner, "FREE_TURN_S", 1.0)  # the loop counts as free
    runner = FsyncRunner(clock=clock)
    log.append(bodies(1, size=fsync_runner.INLINE_MAX_BYTES // 2), 1, 0)
    assert log.unflushed_bytes > fsync_runner.INLINE_MAX_BYTES // 2
    assert runner.may_run_here_for(log)
    assert await runner.flush(log) == 1  # half the bound: on the loop
    assert log.unflushed_bytes == 0
    for i in range(3):  # a burst of small ones adds up too
        log.append(bodies(1, start=1 + i, size=fsync_runner.INLINE_MAX_BYTES // 2), 1, 0)
    assert not runner.may_run_here_for(log)
    assert await runner.flush_here(log) is None  # nothing done: the caller goes to a thread
    assert log.flushed_offset == 1
    assert await runner.flush(log) == 4
    log.append(bodies(1, start=4, size=fsync_runner.INLINE_MAX_BYTES + 1), 1, 0)
    assert await runner.flush(log) == 5
    assert (runner.loop_fsyncs, runner.thread_fsyncs) == (1, 2)
    assert log.unflushed_bytes == 0


def _read_raw(log: Log, offset: int, max_bytes: int) -> bytes:
    with log.read(offset, max_bytes) as sl:
        return sl.read_bytes()


async def test_a_cancelled_caller_waits_for_its_thread_fsync_to_end(
    log: Log, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The log must not be closed under a running fsync: its caller, cancelled, returns
    only once the fsync ended (anyio's non-abandoning hand-off)."""
    release, entered = gate_fdatasync(monkeypatch, WAIT)
    runner = FsyncRunner(on_loop=False)
    log.append(bodies(3), 1, 0)
    ended: list[int] = []
    scope = anyio.CancelScope()
    with anyio.fail_after(WAIT):
        async with anyio.create_task_group() as tg:

            async def flush() -> None:
                with scope:
                    try:
                        await runner.flush(log)
                    finally:
                        ended.append(log.flushed_offset)

            tg.start_soon(flush)
            await anyio.to_thread.run_sync(entered.wait, WAIT)
            scope.cancel()
            await anyio.sleep(0.05)
            assert ended == []  # still waiting for the fsync
            release.set()
    assert ended == [3]


async def test_fsyncs_asked_for_in_one_loop_turn_run_at_once_in_threads(
    tmp_path: Path, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Group commit across partitions: the flushers of the partitions a ProduceMany request
    appended to ask in the same loop turn; their fsyncs go to worker threads together and
    run at the same time (a disk commits them together; one thread fsyncing every log in
    turn made the disk commit each on its own). Each fdatasync here waits until all the
    others started: one after the other they never would. A log whose fsync fails fails
    alone."""
    real = log_module.fdatasync
    bad = str(tmp_path / "p3")
    all_started = threading.Barrier(5, timeout=WAIT)  # the good logs
    threads_seen: set[int] = set()

    def fdatasync(fd: int) -> None:
        if os.readlink(f"/proc/self/fd/{fd}").startswith(bad):
            raise OSError(5, "Input/output error")
        threads_seen.add(threading.get_ident())
        all_started.wait()
        real(fd)

    monkeypatch.setattr(log_module, "fdatasync", fdatasync)
    jobs: list[object] = []
    threads = fsync_threads.THREADS

    class Counted:
        def call(self, loop: Any, then: Any, fn: Any, *args: Any) -> None:
            jobs.append(fn)
            threads.call(loop, then, fn, *args)

        def submit(self, fn: Any) -> None:
            jobs.append(fn)
            threads.submit(fn)

    monkeypatch.setattr(fsync_runner, "THREADS", Counted())
    runner = FsyncRunner(on_loop=False, clock=clock)
    logs = [Log.open(tmp_path / f"p{i}") for i in range(6)]
    try:
        for i, lg in enumerate(logs):
            lg.append(bodies(i + 1), 1, 0)
        outcomes: dict[int, int | str] = {}

        async def flush(i: int) -> None:
            try:
                outcomes[i] = await runner.flush(logs[i])
            except SyncFailedError:
                outcomes[i] = "failed"

        with anyio.fail_after(WAIT * 2):
            async with anyio.create_task_group() as tg:
                for i in range(len(logs)):
                    tg.start_soon(flush, i)
        assert outcomes == {0: 1, 1: 2, 2: 3, 3: "failed", 4: 5, 5: 6}
        assert len(jobs) == 6  # one per log (up to FSYNC_LANES), handed over together
        assert len(threads_seen) == 5
        assert (runner.thread_fsyncs, runner.thread_jobs) == (6, 1)
        assert [lg.flushed_offset for lg in logs] == [1, 2, 3, 0, 5, 6]
    finally:
        for lg in logs:
            with contextlib.suppress(Exception):
                lg.close()


async def test_many_logs_of_one_turn_share_at_most_fsync_lanes_threads(
    tmp_path: Path, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A turn's fsyncs of more logs than :data:`FSYNC_LANES` (a ProduceMany to many
    partitions) are split among that many jobs, each fsyncing its share in turn, and every
    log is flushed."""
    jobs: list[int] = []
    threads = fsync_threads.THREADS

    class Counted:
        def call(self, loop: Any, then: Any, fn: Any, *args: Any) -> None:
            jobs.append(len(args[0]))
            threads.call(loop, then, fn, *args)

        def submit(self, fn: Any) -> None:
            jobs.append(fn.args[0])  # run_lane(start)
            threads.submit(fn)

    monkeypatch.setattr(fsync_runner, "THREADS", Counted())
    runner = FsyncRunner(on_loop=False, clock=clock)
    count = fsync_runner.FSYNC_LANES * 3 + 1
    logs = [Log.open(tmp_path / f"p{i}") for i in range(count)]
    try:
        for lg in logs:
            lg.append(bodies(2), 1, 0)
        with anyio.fail_after(WAIT):
            async with anyio.create_task_group() as tg:
                for lg in logs:
                    tg.start_soon(runner.flush, lg)
        assert len(jobs) <= fsync_runner.FSYNC_LANES
        size = -(-count // fsync_runner.FSYNC_LANES)
        assert jobs == list(range(0, count, size))  # each job's share starts there
        assert all(lg.flushed_offset == 2 for lg in logs)
    finally:
        for lg in logs:
            with contextlib.suppress(Exception):
                lg.close()


@pytest.mark.parametrize("anyio_backend", [LOOPS[0]])
async def test_the_jobs_of_one_batch_wake_the_loop_once(
    tmp_path: Path, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A turn's fsyncs of 4 logs (a ProduceMany with ack ALL to 4 partitions) run in 4
    threads at once, and the one that ends last hands every outcome back in ONE loop
    callback: the callers see their outcomes only once all are in, so a callback per job
    only woke the loop 3 more times. Failed before: 4 callbacks (one per job). A cancelled
    caller still waits for the batch to end."""
    loop = asyncio.get_running_loop()
    real_threadsafe = loop.call_soon_threadsafe
    handed: list[object] = []

    def counting(callback: Any, *args: Any, **kw: Any) -> Any:
        handed.append(callback)
        return real_threadsafe(callback, *args, **kw)

    monkeypatch.setattr(loop, "call_soon_threadsafe", counting)
    started = threading.Barrier(5, timeout=WAIT)  # 4 fsyncs at once and this test
    release, _held = gate_fdatasync(monkeypatch, WAIT, arrived=started.wait)
    runner = FsyncRunner(on_loop=False, clock=clock)
    logs = [Log.open(tmp_path / f"p{i}") for i in range(4)]
    try:
        for i, lg in enumerate(logs):
            lg.append(bodies(i + 1), 1, 0)
        outcomes: dict[int, int] = {}
        cancelled_ended: list[int] = []
        scope = anyio.CancelScope()

        async def flush(i: int) -> None:
            outcomes[i] = await runner.flush(logs[i])

        async def flush_cancelled() -> None:
            with scope:
                try:
                    await runner.flush(logs[3])
                finally:
                    cancelled_ended.append(logs[3].flushed_offset)

        with anyio.fail_after(WAIT):
            async with anyio.create_task_group() as tg:
                for i in range(3):
                    tg.start_soon(flush, i)
                tg.start_soon(flush_cancelled)
                await anyio.to_thread.run_sync(started.wait)
                scope.cancel()
                await anyio.sleep(0.05)
                assert cancelled_ended == []  # its fsync still runs
                handed.clear()  # anyio's own hand-back of the thread above
                release.set()
        assert outcomes == {0: 1, 1: 2, 2: 3}
        assert cancelled_ended == [4]
        assert runner.thread_jobs == 1
        assert len(handed) == 1
    finally:
        for lg in logs:
            with contextlib.suppress(Exception):
                lg.close()


@pytest.mark.parametrize("anyio_backend", [LOOPS[0]])  # uvloop's probe is timed: not here
async def test_fsyncs_of_several_logs_asked_in_one_turn_go_to_threads_together(
    tmp_path: Path, clock: Clock
) -> None:
    """The sections of a ProduceMany with ack ALL commit in their own tasks, each asking
    for its partition's fsync in the same turn: on a free loop they went there one after
    the other (the first before the others were handed over); now all go to the threads
    as one batch and run at once. A lone log's fsync still runs on the loop. Failed
    before: fsyncs on the loop."""
    runner = FsyncRunner(clock=clock)
    loop = asyncio.get_running_loop()
    logs = [Log.open(tmp_path / f"p{i}") for i in range(4)]
    try:
        for i, lg in enumerate(logs):
            lg.append(bodies(i + 1), 1, 0)
        outcomes: dict[int, int] = {}

        async def flush(i: int) -> None:
            outcomes[i] = await runner.flush(logs[i], loop=loop)

        with anyio.fail_after(WAIT):
            async with anyio.create_task_group() as tg:
                for i in range(4):
                    tg.start_soon(flush, i)
        assert outcomes == {0: 1, 1: 2, 2: 3, 3: 4}
        assert (runner.loop_fsyncs, runner.thread_fsyncs, runner.thread_jobs) == (0, 4, 1)
        logs[0].append(bodies(1, start=1), 1, 0)
        with anyio.fail_after(WAIT):
            assert await runner.flush(logs[0], loop=loop) == 2
        assert runner.loop_fsyncs == 1
    finally:
        for lg in logs:
            with contextlib.suppress(Exception):
                lg.close()


def test_is_large_sums_every_kind_of_body_alike() -> None:
    """A batch's bytes are summed in C where its bodies are of one kind (whole records, or
    a direct request's head and tail), with the same answer as body by body."""
    big = fsync_runner.LARGE_WRITE_BYTES
    view = memoryview(b"x" * big)
    assert FsyncRunner.is_large([b"x" * big])
    assert not FsyncRunner.is_large([b"x" * (big // 4)] * 3)
    assert FsyncRunner.is_large([(b"h", view)])
    assert FsyncRunner.is_large([(b"h" * (big // 2), b"t" * (big // 2))])
    assert not FsyncRunner.is_large([(b"h", b"t" * (big // 4))] * 3)
    assert FsyncRunner.is_large([b"a", (b"h", view)])  # mixed: body by body
    assert not FsyncRunner.is_large([(b"h", view)] * (fsync_runner.LARGE_WRITE_MAX_RECORDS + 1))


@pytest.mark.parametrize("count", [3, fsync_runner.FSYNC_LANES * 2 + 1])
async def test_a_group_fsyncs_every_log_and_settles_once_with_each_outcome(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, count: int
) -> None:
    """:meth:`FsyncRunner.flush_group` (a ProduceMany's partitions, broker/commit_group.py):
    every log is fsynced, in one lane or several, and ONE loop callback gets each log's
    outcome in order; a failed fsync is that log's alone (its error, the others flushed)."""
    logs = [Log.open(tmp_path / f"p{i}") for i in range(count)]
    real = files.fdatasync

    def failing_one(fd: int) -> None:  # the second log's segment (directory p1)
        if f"{os.sep}p1{os.sep}" in os.readlink(f"/proc/self/fd/{fd}"):
            raise OSError(5, "Input/output error")
        real(fd)

    monkeypatch.setattr(log_module, "fdatasync", failing_one)
    runner = FsyncRunner()
    calls: list[list[tuple[int, BaseException | None]]] = []
    settled = anyio.Event()

    def on_settled(outcomes: list[tuple[int, BaseException | None]]) -> None:
        calls.append(outcomes)
        settled.set()

    try:
        for i, lg in enumerate(logs):
            lg.append(bodies(i + 1), 1, 0)
        runner.flush_group(logs, asyncio.get_running_loop(), on_settled)
        with anyio.fail_after(WAIT):
            await settled.wait()
        await anyio.lowlevel.checkpoint()  # a second callback would have run by now
        assert len(calls) == 1
        outcomes = calls[0]
        assert [flushed for flushed, _error in outcomes] == [
            -1 if i == 1 else i + 1 for i in range(count)
        ]
        assert isinstance(outcomes[1][1], SyncFailedError)
        assert all(error is None for i, (_f, error) in enumerate(outcomes) if i != 1)
        assert [lg.flushed_offset for lg in logs] == [0 if i == 1 else i + 1 for i in range(count)]
        assert runner.thread_fsyncs == count
    finally:
        for lg in logs:
            with contextlib.suppress(Exception):
                lg.close()
