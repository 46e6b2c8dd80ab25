from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from jetserver.storage import EpochEntry, InvalidArgumentError, LeaderEpochCache, durability_trace
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


def test_a_new_epoch_is_written_without_fsync_a_truncation_with(tmp_path: Path) -> None:
    """assign() replaces the checkpoint without an fsync (recovery extends a checkpoint that
    lacks the newest epochs from the records); truncate_from_end() makes it durable."""
    trace_path = tmp_path / "trace.jsonl"
    directory = tmp_path / "p"
    directory.mkdir()
    durability_trace.enable(trace_path)
    try:
        cache = make(directory, [100])
        cache.assign(1, 10)
        cache.assign(2, 50)
        after_assign = trace_path.read_bytes()
        cache.truncate_from_end(50)
        after_truncate = trace_path.read_bytes()
    finally:
        durability_trace.disable()
    assert (directory / LEADER_EPOCH_FILE).read_bytes() == b"0\n1\n1 10\n"
    synced = [orjson.loads(line) for line in after_assign.splitlines()]
    assert [e for e in synced if e.get("ev") in ("sync", "dir")] == []
    later = [orjson.loads(line) for line in after_truncate[len(after_assign) :].splitlines()]
    assert {e.get("ev") for e in later} >= {"sync", "dir"}
