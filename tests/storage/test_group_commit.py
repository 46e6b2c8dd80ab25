"""GroupCommit on its own (pure bookkeeping; the fsync is a callable)."""

from __future__ import annotations

import threading
import time
import tracemalloc
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


IDLE_BYTES_MAX = 400
"""Heap bytes of an idle GroupCommit (one per partition log): a threading.Condition built
at creation made it about 1.2 KB; it is built when a caller first waits now."""
BOUND_S = 10.0


def test_an_idle_group_commit_is_small() -> None:
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        commits = [GroupCommit(0) for _ in range(1000)]
        per_commit = (tracemalloc.get_traced_memory()[0] - before) / len(commits)
    finally:
        tracemalloc.stop()
    assert per_commit <= IDLE_BYTES_MAX, f"{per_commit:.0f} bytes per idle GroupCommit"


def test_a_caller_waiting_for_a_running_fsync_is_woken_when_it_ends() -> None:
    """The condition a waiter creates is the one the fsync's end notifies (the wait's
    1 s timeout would hide a missed wake-up: the waiter must return well before it)."""
    commit = GroupCommit(0)
    leo = [10]
    in_sync = threading.Event()
    release = threading.Event()

    def begin() -> tuple[int, Callable[[], None]]:
        covered = leo[0]

        def sync() -> None:
            in_sync.set()
            release.wait(BOUND_S)

        return covered, sync

    results: dict[str, float] = {}

    def first() -> None:
        commit.flush(lambda: 10, begin)

    def second() -> None:
        commit.flush(lambda: 10, begin)
        results["woken_at"] = time.monotonic()

    t1 = threading.Thread(target=first)
    t1.start()
    assert in_sync.wait(BOUND_S)
    t2 = threading.Thread(target=second)
    t2.start()
    deadline = time.monotonic() + BOUND_S
    while commit._cond is None and time.monotonic() < deadline:  # the second one waits
        time.sleep(0.001)
    assert commit._cond is not None
    released_at = time.monotonic()
    release.set()
    t1.join(BOUND_S)
    t2.join(BOUND_S)
    assert results["woken_at"] - released_at < 0.5
    assert commit.flushed_offset == 10
    assert commit.fsync_count == 1  # the waiter was covered by the first fsync
