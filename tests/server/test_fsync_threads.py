"""The fsync worker threads (jetserver/storage/fsync_threads.py): results, errors, reuse of an
idle thread, the thread limit, and a cancelled caller that waits for its job."""

from __future__ import annotations

import threading
import time

import anyio
import pytest

from jetserver.storage.fsync_threads import FsyncThreads

pytestmark = pytest.mark.anyio


async def test_results_and_errors_come_back_from_the_thread() -> None:
    pool = FsyncThreads()
    assert await pool.run(lambda a, b: (a + b, threading.current_thread().name), 2, 3) == (
        5,
        "jet-fsync",
    )
    with pytest.raises(OSError, match="disk"):
        await pool.run(_fail)


async def test_one_job_after_another_reuses_one_thread() -> None:
    """A worker counts itself idle before its result reaches the caller, so the next job,
    sent as soon as that result arrives, finds it idle: one thread for 200 jobs."""
    pool = FsyncThreads()
    for i in range(200):
        assert await pool.run(int, i) == i
    assert pool.threads == 1


async def test_a_job_goes_to_the_worker_idle_last_and_wakes_no_other() -> None:
    """With two idle workers, jobs one after another all run on the one that became idle
    last (the other is never woken: workers waiting on one shared queue woke each other
    for every job)."""
    pool = FsyncThreads()
    both = threading.Barrier(2)
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:  # two jobs at once: two workers
            for _ in range(2):
                tg.start_soon(pool.run, both.wait, 5)
    assert pool.threads == 2
    ran_on = {await pool.run(threading.get_ident) for _ in range(50)}
    assert len(ran_on) == 1
    assert pool.threads == 2


async def test_concurrent_jobs_stay_within_the_thread_limit() -> None:
    pool = FsyncThreads(max_threads=3)
    release = threading.Event()
    done: list[int] = []

    async def one(i: int) -> None:
        done.append(await pool.run(_wait_then, release, i))

    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            for i in range(8):
                tg.start_soon(one, i)
            await anyio.sleep(0.05)
            assert pool.threads == 3
            release.set()
    assert sorted(done) == list(range(8))
    assert pool.threads == 3


async def test_a_cancelled_caller_waits_for_its_job_to_end() -> None:
    """As with anyio's run_sync: a caller whose scope is cancelled while its job runs
    goes on only once the job ended (an fsync's outcome must not be left behind)."""
    pool = FsyncThreads()
    release = threading.Event()
    ended: list[float] = []
    started = time.monotonic()
    with anyio.fail_after(10):
        with anyio.move_on_after(0.05) as scope:
            threading.Timer(0.3, release.set).start()
            await pool.run(_wait_then, release, 1)
        ended.append(time.monotonic() - started)
    assert scope.cancelled_caught
    assert release.is_set()
    assert ended[0] >= 0.25
    assert await pool.run(int, 7) == 7  # the pool still serves


async def test_a_submitted_job_runs_without_a_word_back_to_the_loop(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """``submit`` (the fsyncs of ``written`` partitions, jetserver/storage/flush_behind.py): the
    job runs in a worker thread, nothing is handed back through the loop, an exception is
    logged, and the thread serves the next job."""
    from jetserver.storage import fsync_threads

    settled: list[object] = []
    monkeypatch.setattr(fsync_threads, "_settle", lambda *args: settled.append(args))
    pool = FsyncThreads()
    pool.submit(_fail)
    for _ in range(1000):  # bounded (10 s): the worker thread logs it
        if "a background fsync job failed" in caplog.text:
            break
        await anyio.sleep(0.01)
    assert "a background fsync job failed" in caplog.text
    ran = threading.Event()
    pool.submit(ran.set)
    assert ran.wait(10)
    assert pool.threads == 1  # the thread serves the next job
    assert settled == []


def _fail() -> None:
    raise OSError("disk gone")


def _wait_then(release: threading.Event, value: int) -> int:
    if not release.wait(10):
        raise TimeoutError("never released")
    return value
