"""jetserver.epoch_writes: new leaders' epoch checkpoints written by worker threads."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from jetserver.epoch_writes import EpochWrites
from jetserver.fsync_threads import FsyncThreads
from jetserver.storage import LeaderEpochCache
from jetserver.storage.checkpoint import LEADER_EPOCH_FILE


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
