"""The fsync worker threads (jetserver/fsync_threads.py): results, errors, reuse of an
idle thread, the thread limit, and a cancelled caller that waits for its job."""

from __future__ import annotations

import threading
import time

import anyio
import pytest

from jetserver.fsync_threads import FsyncThreads

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


def _fail() -> None:
    raise OSError("disk gone")


def _wait_then(release: threading.Event, value: int) -> int:
    if not release.wait(10):
        raise TimeoutError("never released")
    return value
