"""jetserver.storage.epoch_writes: new leaders' epoch checkpoints written by worker threads."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio.lowlevel
import pytest

from jetserver.storage import LeaderEpochCache, epoch_cache
from jetserver.storage.checkpoint import LEADER_EPOCH_FILE
from jetserver.storage.epoch_writes import EpochWrites
from jetserver.storage.fsync_threads import FsyncThreads


def caches(root: Path, n: int) -> list[LeaderEpochCache]:
    out = []
    for i in range(n):
        directory = root / f"p{i}"
        directory.mkdir()
        out.append(LeaderEpochCache(directory, lambda: 100))
    return out


def test_queued_caches_go_to_at_most_lanes_jobs_each_once(tmp_path: Path) -> None:
    jobs: list[Callable[[], object]] = []
    writes = EpochWrites(submit=jobs.append, lanes=2)
    a, b, c = caches(tmp_path, 3)
    for cache, epoch in ((a, 1), (b, 1), (c, 1), (a, 2)):
        cache.assign(epoch, epoch * 10, deferred=writes.add)
    assert len(jobs) == 2  # a third cache waits for one of the two lanes
    assert writes.queued == 3  # ``a`` once, though it changed twice
    jobs.pop(0)()  # one job writes every queued cache
    assert writes.queued == 0
    assert (tmp_path / "p0" / LEADER_EPOCH_FILE).read_bytes() == b"0\n2\n1 10\n2 20\n"
    for name in ("p1", "p2"):
        assert (tmp_path / name / LEADER_EPOCH_FILE).read_bytes() == b"0\n1\n1 10\n"
    jobs.pop(0)()  # the other finds nothing and ends
    b.assign(3, 30, deferred=writes.add)
    assert len(jobs) == 1  # both lanes were free again: a new job
    jobs.pop(0)()
    assert (tmp_path / "p1" / LEADER_EPOCH_FILE).read_bytes() == b"0\n2\n1 10\n3 30\n"


def test_worker_threads_write_every_queued_cache(tmp_path: Path) -> None:
    writes = EpochWrites(submit=FsyncThreads(max_threads=4).submit, lanes=4)
    many = caches(tmp_path, 200)
    for cache in many:
        cache.assign(7, 0, deferred=writes.add)
    deadline = time.monotonic() + 30.0
    while any(c.pending for c in many) and time.monotonic() < deadline:
        time.sleep(0.01)  # no event to wait on: the writes hand nothing back
    assert not any(c.pending for c in many)
    for i in range(200):
        assert (tmp_path / f"p{i}" / LEADER_EPOCH_FILE).read_bytes() == b"0\n1\n7 0\n"


def test_a_change_stays_pending_until_its_write_returned(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``pending`` is what its waiters read as "the file holds the change": it stays True
    while the write runs (it was cleared as the write began, so a reader saw no pending
    change and no file yet: FileNotFoundError in a CI run of the test above), and a change
    made during a write stays pending after it."""
    (cache,) = caches(tmp_path, 1)
    entered, release = threading.Event(), threading.Event()
    real = epoch_cache.write_checkpoint

    def held(*args: Any, **kwargs: Any) -> None:
        entered.set()
        assert release.wait(30.0)
        real(*args, **kwargs)

    monkeypatch.setattr(epoch_cache, "write_checkpoint", held)
    cache.assign(7, 0, deferred=lambda _cache: None)
    writer = threading.Thread(target=cache.write_pending)
    writer.start()
    assert entered.wait(30.0)
    assert cache.pending  # being written, not written
    cache.assign(8, 50, deferred=lambda _cache: None)  # a change during the write
    release.set()
    writer.join(30.0)
    assert (tmp_path / "p0" / LEADER_EPOCH_FILE).read_bytes() == b"0\n1\n7 0\n"
    assert cache.pending  # the later change is not in the file
    monkeypatch.setattr(epoch_cache, "write_checkpoint", real)
    assert cache.write_pending()
    assert not cache.pending
    assert (tmp_path / "p0" / LEADER_EPOCH_FILE).read_bytes() == b"0\n2\n7 0\n8 50\n"


@pytest.mark.anyio
async def test_a_loop_turns_changes_start_at_most_lanes_jobs_at_its_end(tmp_path: Path) -> None:
    """A failover's new leaders take their roles in a few loop turns. With workers that
    drain the queue before the next change comes (here: at once), a job per change woke a
    worker thread per role change; now the turn's changes start their jobs at its end."""
    jobs = 0

    def run_now(job: Callable[[], object]) -> None:
        nonlocal jobs
        jobs += 1
        job()

    writes = EpochWrites(submit=run_now, lanes=4)
    many = caches(tmp_path, 300)
    for cache in many:  # one turn: no await between them
        cache.assign(5, 0, deferred=writes.add)
    assert jobs == 0  # started at the turn's end, not at each change
    await anyio.lowlevel.checkpoint()
    assert 1 <= jobs <= 4
    assert not any(c.pending for c in many)
    for i in (0, 299):
        assert (tmp_path / f"p{i}" / LEADER_EPOCH_FILE).read_bytes() == b"0\n1\n5 0\n"
