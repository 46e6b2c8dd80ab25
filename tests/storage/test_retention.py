"""Retention: whole segments by age, bytes and message count; log start survives restart."""

from __future__ import annotations

from pathlib import Path

import pytest

from jetserver.storage import Log, LogConfig, OffsetOutOfRange
from jetserver.storage.checkpoint import LOG_START_OFFSET_FILE

from .helpers import bodies, fill, read_all


def config(**kwargs: float) -> LogConfig:
    return LogConfig(segment_max_bytes=1000, index_interval_bytes=100, **kwargs)  # type: ignore[arg-type]


def test_by_message_count(tmp_path: Path) -> None:
    with Log.open(tmp_path, config(retention_max_messages=35)) as log:
        fill(log, 10, epoch_every=4)
        bases = [s.base_offset for s in log.segments()]
        deleted = log.enforce_retention()
        assert deleted > 0
        assert log.log_end_offset - log.log_start_offset <= 35
        assert log.log_start_offset == bases[deleted]
        assert [r.offset for r in read_all(log)] == list(range(log.log_start_offset, 100))
        with pytest.raises(OffsetOutOfRange):
            log.read(0, 100)
        assert log.enforce_retention() == 0
        assert log.epochs.entries[0].start_offset == log.log_start_offset
    assert (tmp_path / LOG_START_OFFSET_FILE).read_bytes() == b"0\n1\n%d\n" % bases[deleted]
    with Log.open(tmp_path, config()) as log:
        assert log.log_start_offset == bases[deleted]


def test_by_bytes(tmp_path: Path) -> None:
    with Log.open(tmp_path, config(retention_max_bytes=2500)) as log:
        fill(log, 12, epoch_every=4)
        log.enforce_retention()
        assert log.size_bytes <= 2500
        assert log.segment_count >= 1


def test_by_age_uses_the_newest_record_of_each_segment(tmp_path: Path) -> None:
    now = [0]
    cfg = config(retention_max_age_s=10)
    with Log.open(tmp_path, cfg, clock=lambda: now[0]) as log:
        for i in range(10):  # one segment-ish per 10 records, timestamps i seconds
            log.append(bodies(10, start=10 * i, size=40), i * 10**9, 0)
        log.set_high_watermark(100)
        segments = log.segments()
        now[0] = 14 * 10**9 + 1
        deleted = log.enforce_retention()
        survivors = log.segments()
        assert deleted == len(segments) - len(survivors)
        assert all((s.max_timestamp or 0) > 4 * 10**9 for s in survivors[:-1])
        assert deleted > 0
        assert all((s.max_timestamp or 0) <= 4 * 10**9 for s in segments[:deleted])
        now[0] = 10**15
        log.enforce_retention()
        assert log.segment_count == 1  # never the active segment
        assert log.log_start_offset == log.segments()[0].base_offset


def test_never_deletes_at_or_above_the_high_watermark(tmp_path: Path) -> None:
    with Log.open(tmp_path, config(retention_max_messages=0)) as log:
        fill(log, 10, epoch_every=4)
        log.set_high_watermark(5)
        assert log.enforce_retention() == 0
        count = log.segment_count
        log.set_high_watermark(100)
        assert log.enforce_retention() == count - 1
        assert log.segment_count == 1


def test_no_limits_deletes_nothing(tmp_path: Path) -> None:
    with Log.open(tmp_path, config()) as log:
        fill(log, 10, epoch_every=4)
        assert log.enforce_retention() == 0
