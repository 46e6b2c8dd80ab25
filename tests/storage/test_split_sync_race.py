"""A split sync (``FsyncRunner.sync_in_thread_then``: the log's group commit begun on the
loop, the fdatasync in a worker thread) racing lane flushes of the same logs
(``FsyncRunner.flush_in_thread``: ``Log.flush`` in a worker thread, waiting in the group
commit for the running fsync), as the flusher, an ALL-acked request's commit and a
ProduceMany's group do on a server alone.

The merged one-step fsync of session 23 hung here: a Spark sink's ack ALL got no answer
(the fresh-clone CI), with a ``jet-fsync`` worker in ``GroupCommit.flush`` waiting for a
split sync whose end never came back to the loop (``LoopWaker``'s lost wake-up,
test_loop_waker.py). Every round is bounded: a hang fails the test.

Real logs on real files, real worker threads, asyncio's and uvloop's loops.
"""

from __future__ import annotations

import asyncio
import errno
import os
import threading
from contextlib import ExitStack
from pathlib import Path

import anyio
import pytest

from jetserver.storage import Log, SyncFailedError
from jetserver.storage.fsync_runner import FsyncRunner

from .helpers import bodies

pytestmark = pytest.mark.anyio
WAIT = 10.0
ROUNDS = 150
LOGS = 4
LOOPS = [
    pytest.param(("asyncio", {"use_uvloop": False}), id="asyncio"),
    pytest.param(("asyncio", {"use_uvloop": True}), id="uvloop"),
]

Outcome = tuple[int, BaseException | None]


def _split_sync(
    runner: FsyncRunner, log: Log, loop: asyncio.AbstractEventLoop
) -> asyncio.Future[Outcome]:
    """``sync_in_thread_then``'s outcome as a future; (-2, None) if it did not begin
    (another fsync of the log runs)."""
    done: asyncio.Future[Outcome] = loop.create_future()

    def then(flushed: int, error: BaseException | None) -> None:
        done.set_result((flushed, error))

    if not runner.sync_in_thread_then(log, loop, then):
        done.set_result((-2, None))
    return done


def _lane(
    runner: FsyncRunner, logs: list[Log], loop: asyncio.AbstractEventLoop
) -> asyncio.Future[list[Outcome]]:
    """``flush_group``'s outcomes as a future: ``Log.flush`` of each log in worker threads
    (one job for one log, one lane each for several), as a ProduceMany's group; its
    callback, not a task (a task cancelled while its job hangs would wait for it)."""
    done: asyncio.Future[list[Outcome]] = loop.create_future()
    runner.flush_group(logs, loop, done.set_result)
    return done


async def _ended(
    futures: list[asyncio.Future[list[Outcome]]] | list[asyncio.Future[Outcome]], what: str
) -> None:
    """Bounded: a hang fails the test (no cancellation: nothing waits on a stuck job)."""
    _, pending = await asyncio.wait(futures, timeout=WAIT)
    if pending:
        pytest.fail(f"{len(pending)} of {len(futures)} never ended ({what})")


@pytest.mark.parametrize("anyio_backend", LOOPS)
async def test_lane_flushes_and_split_syncs_of_the_same_logs_race_without_a_hang(
    tmp_path: Path,
) -> None:
    runner = FsyncRunner(on_loop=False)
    loop = asyncio.get_running_loop()
    with ExitStack() as stack:
        logs = [stack.enter_context(Log.open(tmp_path / str(i))) for i in range(LOGS)]
        for round_ in range(ROUNDS):
            lanes: list[asyncio.Future[list[Outcome]]] = []
            splits: list[asyncio.Future[Outcome]] = []
            ends: list[int] = []
            together = round_ % 3 == 0  # one group of every log: a lane each, at once
            for i, log in enumerate(logs):
                log.append(bodies(1), 1, 0)
                ends.append(log.log_end_offset)
                if not together:
                    lanes.append(_lane(runner, [log], loop))
                if (round_ + i) % 2:
                    await asyncio.sleep(0)  # the lane's job handed over first
                splits.append(_split_sync(runner, log, loop))
            if together:
                lanes.append(_lane(runner, logs, loop))
            await _ended(lanes, f"lane flushes, round {round_}")
            await _ended(splits, f"split syncs, round {round_}")
            flushed = [outcome for lane in lanes for outcome in lane.result()]
            assert flushed == [(end, None) for end in ends]  # each covers its append
            for split, end in zip(splits, ends, strict=True):
                assert split.result() in ((-2, None), (end, None))  # -2: the lane's ran
        assert [log.flushed_offset for log in logs] == [ROUNDS] * LOGS
    assert runner.thread_fsyncs >= ROUNDS * LOGS


@pytest.mark.parametrize("anyio_backend", LOOPS)
async def test_a_lane_flush_waiting_on_a_failed_split_sync_fails_too(tmp_path: Path) -> None:
    """EIO on the split sync's fdatasync: the lane flush that waited for it in the group
    commit must raise (the log poisoned), never return an offset the failed fsync
    covered; the split sync's own caller gets the error."""
    runner = FsyncRunner(on_loop=False)
    loop = asyncio.get_running_loop()
    started = threading.Event()
    release = threading.Event()

    def failing(fd: int) -> None:
        started.set()
        assert release.wait(WAIT)
        os.ftruncate(fd, os.fstat(fd).st_size - 1)  # as Linux: the writeback's pages gone
        raise OSError(errno.EIO, "Input/output error (injected)")

    runner.thread_sync = failing
    with Log.open(tmp_path) as log:
        log.append(bodies(10), 1, 0)
        assert log.flush() == 10
        log.append(bodies(5), 1, 0)
        split = _split_sync(runner, log, loop)
        with anyio.fail_after(WAIT):
            while not started.is_set():  # noqa: ASYNC110 - a thread's event: polled, bounded
                await asyncio.sleep(0.001)
            lane = _lane(runner, [log], loop)
            commit = log._state.commit  # the lane's job waits in its group commit, whose
            while commit._cond is None:  # noqa: ASYNC110 - condition its first waiter makes
                await asyncio.sleep(0.001)
            assert not lane.done()
        release.set()
        await _ended([split], "the failed split sync")
        await _ended([lane], "the lane flush that waited for it")
        flushed, error = split.result()
        assert flushed == -1
        assert isinstance(error, SyncFailedError)
        [(offset, lane_error)] = lane.result()
        assert offset == -1
        assert isinstance(lane_error, SyncFailedError)
        assert log.flushed_offset == 10
        assert log.sync_failure is not None
