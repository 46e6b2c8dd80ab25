"""The bounded cache of open sealed segment files (``[storage] open_sealed_files``).

A partition keeps its active segment open; its sealed segments share an LRU of open files
whose bound holds however many segments there are, while reads, retention, truncation,
compaction and reopening keep working on files that were closed by the bound.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from jetserver.storage import Log, LogClosedError, LogConfig
from jetserver.storage.files import OpenFileCache, SharedFile

from .helpers import SMALL, bodies, fill, open_logs, read_all

TS = 1_000_000_000


def test_sealed_segments_beyond_the_bound_are_closed_and_reopened_on_read(
    tmp_path: Path,
) -> None:
    cache = OpenFileCache(2)
    with Log.open(tmp_path / "p", SMALL, file_cache=cache) as log:
        fill(log, 60, ts0=TS)
        assert log.segment_count >= 10
        # One active segment plus at most two sealed ones, however many there are.
        assert open_logs(tmp_path) <= 3
        assert len(cache) <= 2
        records = read_all(log)
        assert [r.offset for r in records] == list(range(600))
        assert records[0].value.startswith(b"v0.")
        assert open_logs(tmp_path) <= 3
        assert cache.parks >= log.segment_count - 3


def test_reopen_keeps_the_bound(tmp_path: Path) -> None:
    cache = OpenFileCache(2)
    with Log.open(tmp_path / "p", SMALL, file_cache=cache) as log:
        fill(log, 60, ts0=TS)
        segments = log.segment_count
    assert open_logs(tmp_path) == 0
    with Log.open(tmp_path / "p", SMALL, file_cache=cache) as log:
        assert log.segment_count == segments
        assert open_logs(tmp_path) <= 3
        assert [r.offset for r in read_all(log)] == list(range(600))


def test_a_slice_held_through_eviction_stays_valid(tmp_path: Path) -> None:
    cache = OpenFileCache(1)
    with Log.open(tmp_path / "p", SMALL, file_cache=cache) as log:
        fill(log, 60, ts0=TS)
        with log.read(0, 100) as first:
            # Reading every other segment evicts the first one's file from the cache
            # while the slice still points into it.
            assert [r.offset for r in read_all(log, 300)] == list(range(300, 600))
            data = first.read_bytes()
        assert data
        assert data == log.read(0, 100).read_bytes()
        assert open_logs(tmp_path) <= 2


def test_truncating_into_a_closed_segment_makes_it_active_again(tmp_path: Path) -> None:
    cache = OpenFileCache(1)
    with Log.open(tmp_path / "p", SMALL, file_cache=cache) as log:
        fill(log, 60, ts0=TS)
        log.read(550, 100).close()  # the newest sealed segments are the cached ones
        log.truncate_to(15)  # inside the first segment, whose file was closed
        assert log.segment_count == 1
        log.append(bodies(5, start=1000, size=40), TS + 100, 1)
        log.set_high_watermark(log.log_end_offset)
        got = read_all(log)
        assert [r.offset for r in got] == list(range(20))
        assert got[-1].value.startswith(b"v1004.")
    with Log.open(tmp_path / "p", SMALL, file_cache=cache) as log:
        assert log.log_end_offset == 20


def test_retention_deletes_closed_segments_and_time_lookup_skips_them(tmp_path: Path) -> None:
    cache = OpenFileCache(1)
    config = LogConfig(segment_max_bytes=2000, index_interval_bytes=100, retention_max_messages=200)
    with Log.open(tmp_path / "p", config, file_cache=cache) as log:
        fill(log, 60, ts0=TS)
        assert log.offset_for_timestamp(TS + 3) == 30
        removed = log.enforce_retention()
        assert removed > 0
        start = log.log_start_offset
        assert start >= 400
        assert log.offset_for_timestamp(TS) == start
        assert [r.offset for r in read_all(log)] == list(range(start, 600))
        assert open_logs(tmp_path) <= 2


def test_compaction_over_closed_segments(tmp_path: Path) -> None:
    cache = OpenFileCache(1)
    config = LogConfig(segment_max_bytes=600, index_interval_bytes=64, compact=True)
    with Log.open(tmp_path / "p", config, file_cache=cache) as log:
        for i in range(40):
            log.append(bodies(5, start=i * 5, key_mod=7, size=20), TS + i, 0)
        log.set_high_watermark(log.log_end_offset)
        log.roll()
        report = log.compact()
        assert report.aborted is None
        assert report.skipped is None
        assert report.records_after < report.records_before
        latest = {r.key: r.value for r in read_all(log)}
        assert len(latest) == 7
        assert latest[b"k6"].startswith(b"v195.")
        assert open_logs(tmp_path) <= 2


def test_shrinking_the_bound_closes_files_at_once(tmp_path: Path) -> None:
    cache = OpenFileCache(100)
    with Log.open(tmp_path / "p", SMALL, file_cache=cache) as log:
        fill(log, 60, ts0=TS)
        assert open_logs(tmp_path) == log.segment_count
        cache.set_capacity(3)
        assert open_logs(tmp_path) <= 4
        with pytest.raises(ValueError):
            cache.set_capacity(0)


def test_a_parked_file_that_was_deleted_is_not_reopened(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"old")
    cache = OpenFileCache(1)
    shared = SharedFile.open(path)
    shared.seal(cache)
    other = SharedFile.open(path)
    other.seal(cache)  # evicts ``shared``: parked
    assert shared.parked
    shared.retire()
    path.unlink()
    path.write_bytes(b"new file at the same path")

    with pytest.raises(LogClosedError):
        shared.acquire()
    shared.release_owner()
    other.release_owner()
    assert shared.closed
    assert other.closed
    assert len(cache) == 0
