"""Purge (Log.advance_start): the log start moves forward, whole segments below it go,
and the new start survives a restart (spec/storage.md §10)."""

from __future__ import annotations

from pathlib import Path

import pytest

from jetserver.storage import InvalidArgumentError, Log, LogConfig, OffsetOutOfRange

from .helpers import bodies, fill, read_all


def config() -> LogConfig:
    return LogConfig(segment_max_bytes=1000, index_interval_bytes=100)


def test_purge_to_an_offset_mid_segment(tmp_path: Path) -> None:
    with Log.open(tmp_path, config()) as log:
        fill(log, 10)
        before = log.segment_count
        assert log.advance_start(55) == 55
        assert log.log_start_offset == 55
        assert log.segment_count < before
        assert [r.offset for r in read_all(log)] == list(range(55, 100))
        with pytest.raises(OffsetOutOfRange):
            log.read(54, 100)
        assert log.advance_start(30) == 55  # never backwards
    with Log.open(tmp_path, config()) as log:
        assert log.log_start_offset == 55
        assert [r.offset for r in read_all(log)] == list(range(55, 100))


def test_purge_everything_drops_every_segment(tmp_path: Path) -> None:
    with Log.open(tmp_path, config()) as log:
        fill(log, 10)
        assert log.advance_start(100) == 100
        assert log.segment_count == 1
        assert log.size_bytes == 0
        assert read_all(log) == []
        first, _ = log.append(bodies(1, size=40), 2_000, 0)
        assert first == 100
    with Log.open(tmp_path, config()) as log:
        assert (log.log_start_offset, log.log_end_offset) == (100, 101)


def test_purge_past_the_end_is_refused(tmp_path: Path) -> None:
    with Log.open(tmp_path, config()) as log:
        fill(log, 2)
        with pytest.raises(InvalidArgumentError):
            log.advance_start(21)
        assert log.log_start_offset == 0
