"""An fsync in a worker thread that the event loop waits for up to a bound
(``jetserver.storage.waited_sync.sync_waiting``): the loop goes on as after a loop fsync
when it ends in time; when it does not (a hung disk), the loop stops waiting after the
bound and hears of its end later; a failure poisons the log either way.

Real logs on real files, a real uvloop/asyncio loop; the hung fsync is a real fdatasync
held behind an event, the failure the real fdatasync's made to fail as Linux's does
after a failed writeback (test_sync_failure.py's ``FailOnce``).
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
from pathlib import Path

import pytest

from jetserver.storage import Log, SyncFailedError
from jetserver.storage.waited_sync import LATE, sync_waiting

from .helpers import bodies
from .test_sync_failure import FailOnce

WAIT = 10.0
BOUND_S = 0.2


def _never(_flushed: int, _error: BaseException | None) -> None:
    raise AssertionError("an fsync that ended in time has no late outcome")


def test_an_fsync_that_ends_in_time_is_flushed_when_it_returns(tmp_path: Path) -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        with Log.open(tmp_path) as log:
            log.append(bodies(10), 1, 0)
            assert sync_waiting(log, loop, WAIT, _never) == 10
            assert log.flushed_offset == 10
            assert sync_waiting(log, loop, WAIT, _never) == 10  # covered: no fsync
            log.append(bodies(3), 1, 0)
            assert sync_waiting(log, loop, WAIT, _never) == 13
            await asyncio.sleep(0.05)  # (no late outcome comes)

    asyncio.run(main())


def test_a_hung_fsync_blocks_the_loop_for_the_bound_only_and_ends_later(
    tmp_path: Path,
) -> None:
    release, held = threading.Event(), threading.Event()

    def gated(fd: int) -> None:
        held.set()
        assert release.wait(WAIT)
        os.fdatasync(fd)

    async def main() -> None:
        loop = asyncio.get_running_loop()
        ended: asyncio.Future[tuple[int, BaseException | None]] = loop.create_future()

        def late(flushed: int, error: BaseException | None) -> None:
            assert threading.current_thread() is threading.main_thread()  # the loop's
            ended.set_result((flushed, error))

        with Log.open(tmp_path) as log:
            log.append(bodies(4), 1, 0)
            start = time.monotonic()
            assert sync_waiting(log, loop, BOUND_S, late, gated) == LATE
            waited = time.monotonic() - start
            assert BOUND_S <= waited < BOUND_S + 2.0
            assert held.is_set()
            assert log.flushed_offset == 0
            assert log.begin_sync() is None  # it still runs: nothing else starts one
            for _ in range(5):  # the loop turns meanwhile, the fsync still held
                await asyncio.sleep(0.01)
            assert not ended.done()
            release.set()
            flushed, error = await asyncio.wait_for(ended, WAIT)
            assert (flushed, error) == (4, None)
            assert log.flushed_offset == 4

    asyncio.run(main())


def test_a_failed_fsync_raises_in_time_and_poisons_the_log(tmp_path: Path) -> None:
    fail = FailOnce(os.fdatasync, fail_at=1)

    async def main() -> None:
        loop = asyncio.get_running_loop()
        with Log.open(tmp_path) as log:
            log.append(bodies(6), 1, 0)
            with pytest.raises(SyncFailedError):
                sync_waiting(log, loop, WAIT, _never, fail)
            assert log.flushed_offset == 0
            with pytest.raises(SyncFailedError):  # poisoned until cut back
                log.flush_unless_busy()

    asyncio.run(main())


def test_a_late_fsync_that_fails_reports_its_error_on_the_loop(tmp_path: Path) -> None:
    release = threading.Event()
    fail = FailOnce(os.fdatasync, fail_at=1)

    def gated(fd: int) -> None:
        assert release.wait(WAIT)
        fail(fd)

    async def main() -> None:
        loop = asyncio.get_running_loop()
        ended: asyncio.Future[tuple[int, BaseException | None]] = loop.create_future()
        with Log.open(tmp_path) as log:
            log.append(bodies(2), 1, 0)
            late = lambda f, e: ended.set_result((f, e))  # noqa: E731
            assert sync_waiting(log, loop, BOUND_S, late, gated) == LATE
            release.set()
            flushed, error = await asyncio.wait_for(ended, WAIT)
            assert flushed == -1
            assert isinstance(error, SyncFailedError)
            assert log.flushed_offset == 0

    asyncio.run(main())
