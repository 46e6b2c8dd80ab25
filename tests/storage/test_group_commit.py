"""GroupCommit on its own (pure bookkeeping; the fsync is a callable)."""

from __future__ import annotations

from collections.abc import Callable

from jetserver.storage.group_commit import GroupCommit


def test_flush_advances_to_what_the_snapshot_covered() -> None:
    commit = GroupCommit(0)
    leo = [10]
    calls: list[int] = []

    def begin() -> tuple[int, Callable[[], None]]:
        return leo[0], lambda: calls.append(leo[0])

    assert commit.flush(lambda: leo[0], begin) == 10
    assert commit.flush(lambda: 5, begin) == 10  # already covered: no fsync
    assert calls == [10]
    assert commit.fsync_count == 1


def test_truncation_during_an_fsync_does_not_advance() -> None:
    commit = GroupCommit(0)
    leo = [10]
    attempts = []

    def begin() -> tuple[int, Callable[[], None]]:
        covered = leo[0]

        def sync() -> None:
            attempts.append(covered)
            if len(attempts) == 1:
                commit.clamp(4)  # the log is truncated while the first fsync runs
                leo[0] = 8

        return covered, sync

    assert commit.flush(lambda: leo[0], begin) == 8
    assert attempts == [10, 8]  # the first fsync proved nothing; a second one was needed


def test_advance_reset_and_clamp() -> None:
    commit = GroupCommit(3)
    commit.advance(2)
    assert commit.flushed_offset == 3
    commit.advance(7)
    assert commit.flushed_offset == 7
    commit.clamp(5)
    assert commit.flushed_offset == 5
    commit.reset(100)
    assert commit.flushed_offset == 100
