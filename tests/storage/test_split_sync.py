"""An fsync begun and ended on the event loop with only the system call in a worker thread
(``Log.begin_sync`` / ``Log.end_sync``, ``FsyncRunner.sync_in_thread_then``): the same
group commit and the same poison after a failure as ``Log.flush``.

Real logs on real files; the failure is the real fdatasync's, made to fail as Linux's does
after a failed writeback (test_sync_failure.py's ``FailOnce``).
"""

from __future__ import annotations

import asyncio
import os
import threading
from pathlib import Path

import anyio
import pytest

from jetserver.storage import Log, SyncFailedError
from jetserver.storage.fsync_runner import FsyncRunner
from jetserver.storage.group_commit import PendingSync

from .helpers import bodies
from .test_sync_failure import FailOnce

pytestmark = pytest.mark.anyio
WAIT = 10.0


def _begun(log: Log) -> PendingSync:
    pending = log.begin_sync()
    assert isinstance(pending, PendingSync)
    return pending


def test_a_begun_sync_counts_once_it_ended_and_keeps_others_out_meanwhile(
    tmp_path: Path,
) -> None:
    with Log.open(tmp_path) as log:
        log.append(bodies(10), 1, 0)
        pending = _begun(log)
        assert pending.covered == 10
        log.append(bodies(5), 1, 0)  # (appended during the fsync: not covered)
        assert log.begin_sync() is None  # another fsync runs
        assert log.flush_unless_busy() is None
        os.fdatasync(pending.fd)
        assert log.flushed_offset == 0  # not before it ended
        assert log.end_sync(pending, None) == 10
        assert log.flushed_offset == 10
        again = _begun(log)
        os.fdatasync(again.fd)
        assert log.end_sync(again, None) == 15
        assert log.begin_sync() == 15  # nothing left: the flushed offset


def test_a_failed_sync_poisons_the_log_until_it_is_cut_back(tmp_path: Path) -> None:
    fail = FailOnce(os.fdatasync, fail_at=2)
    with Log.open(tmp_path) as log:
        log.append(bodies(10), 1, 0)
        pending = _begun(log)
        fail(pending.fd)
        assert log.end_sync(pending, None) == 10
        log.append(bodies(15), 1, 0)
        pending = _begun(log)
        with pytest.raises(OSError) as caught:
            fail(pending.fd)  # EIO: the 15 records' bytes are gone from the file
        with pytest.raises(SyncFailedError):
            log.end_sync(pending, caught.value)
        assert log.flushed_offset == 10
        assert log.sync_failure is not None
        with pytest.raises(SyncFailedError):  # a later good fsync proves nothing
            log.begin_sync()
        assert log.recover_unsynced() == 10
        log.append(bodies(3), 1, 0)
        pending = _begun(log)
        fail(pending.fd)
        assert log.end_sync(pending, None) == 13
    with Log.open(tmp_path) as log:
        assert log.log_end_offset == 13


async def test_the_runner_hands_the_system_call_alone_to_a_thread(tmp_path: Path) -> None:
    """The outcome comes back in a loop callback; a failure as the log's poison."""
    runner = FsyncRunner()
    loop = asyncio.get_running_loop()
    threads: list[str] = []
    fail = FailOnce(os.fdatasync, fail_at=2)

    def sync(fd: int) -> None:
        threads.append(threading.current_thread().name)
        fail(fd)

    runner.thread_sync = sync
    with Log.open(tmp_path) as log:
        outcomes: list[tuple[int, type[BaseException] | None]] = []
        done = anyio.Event()

        def then(flushed: int, error: BaseException | None) -> None:
            outcomes.append((flushed, None if error is None else type(error)))
            done.set()

        for count in (4, 6):
            log.append(bodies(count), 1, 0)
            assert runner.sync_in_thread_then(log, loop, then)
            with anyio.fail_after(WAIT):
                await done.wait()
            done = anyio.Event()
        assert outcomes == [(4, None), (-1, SyncFailedError)]
        assert threads == ["jet-sync", "jet-sync"]  # the split syncs' own lane
        assert log.flushed_offset == 4
        assert log.sync_failure is not None
        assert runner.sync_in_thread_then(log, loop, then)  # poisoned: refused at once
        assert outcomes[-1] == (-1, SyncFailedError)
        assert runner.thread_fsyncs == 2
