from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import orjson
import pytest

from jetserver.storage import (
    EpochEntry,
    InvalidArgumentError,
    LeaderEpochCache,
    Log,
    LogConfig,
    durability_trace,
    epoch_cache,
)
from jetserver.storage.checkpoint import LEADER_EPOCH_FILE

from .helpers import bodies


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


def test_a_deferred_epoch_changes_the_entries_at_once_and_the_file_when_written(
    tmp_path: Path,
) -> None:
    """assign(deferred=...) hands the cache over instead of writing (a new leader's epoch:
    its file is written by a worker thread, jetserver.storage.epoch_writes)."""
    cache = make(tmp_path, [100])
    cache.assign(1, 10)
    handed: list[LeaderEpochCache] = []
    assert cache.assign(2, 50, deferred=handed.append)
    assert handed == [cache]
    assert cache.latest_epoch == 2
    assert cache.end_offset_for(1) == 50
    assert cache.pending
    assert (tmp_path / LEADER_EPOCH_FILE).read_bytes() == b"0\n1\n1 10\n"
    assert cache.write_pending()
    assert (tmp_path / LEADER_EPOCH_FILE).read_bytes() == b"0\n2\n1 10\n2 50\n"
    assert not cache.pending
    assert not cache.write_pending()  # nothing left to write
    assert not cache.assign(2, 60, deferred=handed.append)  # same epoch: no change
    assert handed == [cache]


def test_a_truncation_after_a_deferred_epoch_is_not_undone_by_its_write(tmp_path: Path) -> None:
    cache = make(tmp_path, [100])
    cache.assign(1, 10)
    cache.assign(2, 50, deferred=lambda _c: None)
    assert cache.truncate_from_end(50)  # durable at once, without epoch 2
    assert not cache.write_pending()  # the truncation's write took the change
    assert (tmp_path / LEADER_EPOCH_FILE).read_bytes() == b"0\n1\n1 10\n"


def test_a_write_in_progress_is_not_overtaken_by_a_truncation(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A deferred write holding the entries with epoch 2 is in progress in a worker thread
    when a truncation drops epoch 2: the truncation writes after it, so the file ends
    without epoch 2 (the older write does not land last)."""
    real = epoch_cache.write_checkpoint
    in_write, go = threading.Event(), threading.Event()

    def held_first_write(*args: Any, **kwargs: Any) -> None:
        if not in_write.is_set():
            in_write.set()
            assert go.wait(10.0)
        real(*args, **kwargs)

    monkeypatch.setattr(epoch_cache, "write_checkpoint", held_first_write)
    cache = make(tmp_path, [100])
    cache.assign(1, 10, deferred=lambda _c: None)
    cache.assign(2, 50, deferred=lambda _c: None)
    writer = threading.Thread(target=cache.write_pending)
    writer.start()
    assert in_write.wait(10.0)  # the writer took entries (1, 10), (2, 50)
    truncation = threading.Thread(target=cache.truncate_from_end, args=(50,))
    truncation.start()
    go.set()
    writer.join(10.0)
    truncation.join(10.0)
    assert not writer.is_alive()
    assert not truncation.is_alive()
    assert cache.entries == (EpochEntry(1, 10),)
    assert (tmp_path / LEADER_EPOCH_FILE).read_bytes() == b"0\n1\n1 10\n"


def test_a_close_writes_a_deferred_epoch_and_an_abandon_drops_it(tmp_path: Path) -> None:
    closed, abandoned = tmp_path / "closed", tmp_path / "abandoned"
    for directory in (closed, abandoned):
        with Log.open(directory, LogConfig()) as log_:
            log_.append(bodies(1), 1_000, 0)  # epoch 0 at offset 0
        log_ = Log.open(directory, LogConfig())
        log_.epochs.assign(3, 1, deferred=lambda _c: None)
        if directory == closed:
            log_.close()
        else:
            log_.abandon()
        assert not log_.epochs.pending
    assert (closed / LEADER_EPOCH_FILE).read_bytes() == b"0\n2\n0 0\n3 1\n"
    assert (abandoned / LEADER_EPOCH_FILE).read_bytes() == b"0\n1\n0 0\n"


def test_a_deferred_write_into_a_removed_directory_is_dropped(tmp_path: Path) -> None:
    directory = tmp_path / "p"
    directory.mkdir()
    cache = make(directory, [100])
    cache.assign(1, 0, deferred=lambda _c: None)
    directory.rmdir()  # the partition's stream was deleted
    assert not cache.write_pending()
    assert not cache.pending
