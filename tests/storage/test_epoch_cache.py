from __future__ import annotations

from pathlib import Path

import pytest

from jetserver.storage import EpochEntry, InvalidArgumentError, LeaderEpochCache
from jetserver.storage.checkpoint import LEADER_EPOCH_FILE


def make(tmp_path: Path, leo: list[int]) -> LeaderEpochCache:
    return LeaderEpochCache(tmp_path, lambda: leo[0])


def test_assign_and_persist(tmp_path: Path) -> None:
    leo = [0]
    cache = make(tmp_path, leo)
    assert cache.latest_epoch == -1
    assert cache.end_offset_for(0) == -1
    assert cache.assign(0, 0)
    assert not cache.assign(0, 5)  # same epoch: no-op
    assert cache.assign(2, 10)
    assert cache.assign(5, 30)
    leo[0] = 42
    assert (tmp_path / LEADER_EPOCH_FILE).read_bytes() == b"0\n3\n0 0\n2 10\n5 30\n"
    assert cache.latest_epoch == 5
    assert cache.end_offset_for(5) == 42
    assert cache.epoch_and_end_offset_for(0) == (0, 10)
    assert cache.epoch_and_end_offset_for(1) == (0, 10)  # largest epoch <= 1 is 0
    assert cache.epoch_and_end_offset_for(3) == (2, 30)
    assert cache.epoch_and_end_offset_for(6) == (-1, -1)
    assert cache.epoch_for_offset(9) == 0
    assert cache.epoch_for_offset(10) == 2
    with pytest.raises(InvalidArgumentError):
        cache.assign(4, 50)


def test_epoch_older_than_all(tmp_path: Path) -> None:
    cache = make(tmp_path, [100])
    cache.assign(3, 20)
    assert cache.epoch_and_end_offset_for(1) == (1, 20)


def test_assign_drops_entries_past_the_new_start(tmp_path: Path) -> None:
    cache = make(tmp_path, [100])
    cache.assign(1, 10)
    cache.assign(2, 50)
    cache.assign(3, 40)  # a log that was not truncated before
    assert cache.entries == (EpochEntry(1, 10), EpochEntry(3, 40))


def test_truncation(tmp_path: Path) -> None:
    cache = make(tmp_path, [100])
    for epoch, start in [(1, 0), (2, 10), (4, 20), (6, 30)]:
        cache.assign(epoch, start)
    assert cache.truncate_from_end(20)
    assert list(cache.entries) == [EpochEntry(1, 0), EpochEntry(2, 10)]
    assert not cache.truncate_from_end(20)
    assert cache.truncate_from_start(15)
    assert list(cache.entries) == [EpochEntry(2, 15)]
    assert (tmp_path / LEADER_EPOCH_FILE).read_bytes() == b"0\n1\n2 15\n"
    cache.clear()
    assert not cache.entries
