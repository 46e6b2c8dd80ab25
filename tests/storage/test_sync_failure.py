"""A failed fsync: nothing it covered counts as flushed, and the log is cut back to disk.

The failure is injected into the real ``fdatasync`` of a real segment file, and it behaves
as Linux does after a failed writeback: the bytes written since the last good sync are gone
from the disk (here: the file is truncated to its size at that sync), the error is reported
once, and the next fsync succeeds without bringing them back.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from jetsdk.codec.record import iter_records
from jetserver.storage import Log, StorageError, SyncFailedError, files
from jetserver.storage import log as log_module
from jetserver.storage.group_commit import GroupCommit

from .helpers import bodies


class FailOnce:
    """The real fdatasync, except that call number ``fail_at`` drops the unsynced bytes of
    its file and raises EIO (later calls succeed again, as on Linux)."""

    def __init__(self, real: Callable[[int], None], fail_at: int) -> None:
        self.real = real
        self.fail_at = fail_at
        self.calls = 0
        self.synced_size: dict[int, int] = {}

    def __call__(self, fd: int) -> None:
        self.calls += 1
        if self.calls == self.fail_at:
            os.ftruncate(fd, self.synced_size.get(fd, 0))
            raise OSError(errno.EIO, "Input/output error (injected)")
        self.real(fd)
        self.synced_size[fd] = os.fstat(fd).st_size


def test_group_commit_does_not_count_a_failed_sync() -> None:
    commit = GroupCommit(0)

    def failing() -> tuple[int, Callable[[], None]]:
        def sync() -> None:
            raise OSError(errno.EIO, "injected")

        return 10, sync

    with pytest.raises(SyncFailedError):
        commit.flush(lambda: 10, failing)
    assert commit.flushed_offset == 0
    assert commit.fsync_count == 0
    # Poisoned: a later "successful" fsync proves nothing about what the failed one covered.
    calls: list[int] = []
    with pytest.raises(SyncFailedError):
        commit.flush(lambda: 10, lambda: (10, lambda: calls.append(1)))
    assert calls == []
    assert commit.flushed_offset == 0
    # Cut back to the last good sync: flushing works again.
    commit.clamp(0)
    assert commit.failure is None
    assert commit.flush(lambda: 5, lambda: (5, lambda: None)) == 5


def test_a_truncation_above_the_flushed_offset_keeps_the_poison() -> None:
    commit = GroupCommit(4)
    commit.fail("injected")
    commit.clamp(8)  # a follower cutting a divergent tail above what is synced
    assert commit.failure is not None
    commit.clamp(4)
    assert commit.failure is None


def test_a_sync_that_fails_after_a_concurrent_truncation_still_poisons() -> None:
    # A truncation (clamp) while the fsync runs, and then the fsync fails: the pages it
    # dropped may hold records below the truncation point, so the log stays poisoned and
    # a later successful fsync must not move the flushed offset over them.
    commit = GroupCommit(5)

    def clamp_then_fail() -> tuple[int, Callable[[], None]]:
        def sync() -> None:
            commit.clamp(15)
            raise OSError(errno.EIO, "injected")

        return 20, sync

    with pytest.raises(SyncFailedError):
        commit.flush(lambda: 20, clamp_then_fail)
    assert commit.failure is not None
    with pytest.raises(SyncFailedError):
        commit.flush(lambda: 15, lambda: (15, lambda: None))
    assert commit.flushed_offset == 5
    # Cutting back to what is on disk clears it.
    commit.clamp(5)
    assert commit.failure is None


def test_failed_fdatasync_leaves_flushed_offset_and_recovery_cuts_to_disk(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    inject = FailOnce(files.fdatasync, fail_at=2)
    monkeypatch.setattr(log_module, "fdatasync", inject)
    with Log.open(tmp_path) as log:
        log.append(bodies(10), 1, 0)
        assert log.flush() == 10  # call 1: good
        log.append(bodies(15), 1, 0)
        with pytest.raises(SyncFailedError):
            log.flush()  # call 2: EIO, the 15 records' bytes are gone from the file
        assert log.flushed_offset == 10
        assert log.sync_failure is not None
        # The error is reported once by the kernel; the log must not take the next good
        # fsync as proof.
        with pytest.raises(SyncFailedError):
            log.flush()
        assert log.flushed_offset == 10
        # Nothing above the flushed offset may be committed.
        assert log.recover_unsynced() == 10
        assert log.log_end_offset == 10
        assert log.sync_failure is None
        log.append(bodies(3), 1, 0)
        assert log.flush() == 13
        log.set_high_watermark(13)
    with Log.open(tmp_path) as log:
        assert log.log_end_offset == 13
        assert log.recovery.ok


def test_failed_fsync_at_a_roll_poisons_the_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with Log.open(tmp_path) as log:
        log.append(bodies(5), 1, 0)
        assert log.flush() == 5
        log.append(bodies(5), 1, 0)

        def eio(fd: int) -> None:
            raise OSError(errno.EIO, "injected")

        monkeypatch.setattr(files.os, "fdatasync", eio)
        with pytest.raises(StorageError):
            log.roll()
        monkeypatch.undo()
        assert log.flushed_offset == 5
        with pytest.raises(SyncFailedError):
            log.flush()
        assert log.recover_unsynced() == 5
        assert log.log_end_offset == 5
        log.append(bodies(2), 1, 0)
        assert log.flush() == 7


def test_a_read_finding_the_file_shorter_than_the_log_fails_retriably(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Between a failed fsync that dropped bytes and the cut back to disk, the log still
    counts records the file no longer holds. A read whose end lies among them fails with a
    retriable StorageError: it must not return a byte range past the file's end (a fetch
    answer sent from it fails mid-frame and takes the client's connection down, with every
    other request on it), nor pass off missing records as read. After the cut back the
    committed records read as always."""
    inject = FailOnce(files.fdatasync, fail_at=2)
    monkeypatch.setattr(log_module, "fdatasync", inject)
    with Log.open(tmp_path) as log:
        log.append(bodies(10), 1, 0)
        assert log.flush() == 10
        log.set_high_watermark(10)
        log.append(bodies(15), 1, 0)
        with pytest.raises(SyncFailedError):
            log.flush()  # the 15 records' bytes are gone from the file
        for bound in (None, 20):  # up to the HW (a consumer), up to 20 (a replica's read)
            with pytest.raises(StorageError) as caught:
                log.read(0, 1 << 20, bound).close()
            assert caught.value.retriable
        assert log.recover_unsynced() == 10
        with log.read(0, 1 << 20) as found:
            assert [r.offset for r in iter_records(found.read_bytes())] == list(range(10))
