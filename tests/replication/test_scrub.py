"""Scrub of a follower's log: the first damaged record is found (real files)."""

from __future__ import annotations

import os
import time
from pathlib import Path

from jetsdk.codec.record import encode_body
from jetserver.replication.scrub import first_damaged_offset
from jetserver.storage import Log, LogConfig
from support.corrupt import flip_bits

CONFIG = LogConfig(segment_max_bytes=4096, index_interval_bytes=256)


def fill(directory: Path, count: int) -> None:
    with Log.open(directory, CONFIG) as log:
        for i in range(count):
            log.append([encode_body(b"v%04d" % i + b"x" * 80)], time.time_ns(), 0)
        log.flush()


def test_a_sound_log_has_no_damage(tmp_path: Path) -> None:
    fill(tmp_path, 200)
    with Log.open(tmp_path, CONFIG) as log:
        assert first_damaged_offset(log, chunk_bytes=1000) is None


def test_a_flipped_bit_in_an_early_segment_is_found(tmp_path: Path) -> None:
    fill(tmp_path, 200)
    second = sorted(tmp_path.glob("*.log"))[1]
    base = int(second.name.split(".")[0])
    size = second.stat().st_size
    flip_bits(second, size // 3, 0x10)
    with Log.open(tmp_path, CONFIG) as log:
        assert log.recovery.ok  # recovery trusts closed segments before their last index entry
        damaged = first_damaged_offset(log, chunk_bytes=1000)
        assert damaged is not None
        assert base < damaged < log.log_end_offset
        log.truncate_to(damaged)
        assert first_damaged_offset(log) is None


def test_empty_log(tmp_path: Path) -> None:
    with Log.open(tmp_path, CONFIG) as log:
        assert first_damaged_offset(log) is None
    assert os.path.exists(tmp_path)


def test_a_range_recovery_fenced_off_is_where_the_scrub_cuts(tmp_path: Path) -> None:
    config = LogConfig(segment_max_bytes=4096)  # no index entry: recovery checks it all
    with Log.open(tmp_path, config) as log:
        for i in range(200):
            log.append([encode_body(b"v%04d" % i + b"x" * 80)], time.time_ns(), 0)
    second = sorted(tmp_path.glob("*.log"))[1]
    with open(second, "r+b") as f:
        f.seek(second.stat().st_size // 2)
        f.write(b"\xff\xff")
    with Log.open(tmp_path, config) as log:
        (start, _end), *_ = log.recovery.unreadable_ranges
        assert first_damaged_offset(log) == start
