"""Recovery on open: torn tails, missing/corrupt indexes, damaged segments and checkpoints."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jetsdk.codec.record import iter_records, peek_header
from jetserver.storage import CorruptRangeError, Log, LogConfig, files
from jetserver.storage import segment as segment_module
from jetserver.storage.checkpoint import (
    HIGH_WATERMARK_FILE,
    LEADER_EPOCH_FILE,
    LOG_START_OFFSET_FILE,
)

from .helpers import bodies, read_all

CFG = LogConfig(segment_max_bytes=3000, index_interval_bytes=128)


def build(directory: Path, *, clean: bool) -> None:
    """80 records in several segments (epochs 0, 2, 5); closed cleanly or 'crashed'."""
    log = Log.open(directory, CFG)
    for i in range(16):
        log.append(bodies(5, start=5 * i, size=20 + 7 * (i % 5)), 1_000 + i, [0, 2, 5][i // 6])
    log.set_high_watermark(log.log_end_offset)
    log.checkpoint_high_watermark()
    if clean:
        log.close()
    else:
        log._crash()


def record_ends(path: Path) -> list[tuple[int, int]]:
    """(offset, end position) of each record in a .log file."""
    data = path.read_bytes()
    out = []
    pos = 0
    while pos < len(data):
        offset, _ts, _epoch, size = peek_header(data, pos)
        pos += size
        out.append((offset, pos))
    return out


@pytest.fixture(scope="module")
def templates(tmp_path_factory: pytest.TempPathFactory) -> dict[bool, Path]:
    out = {}
    for clean in (True, False):
        directory = tmp_path_factory.mktemp(f"template-{clean}")
        build(directory, clean=clean)
        out[clean] = directory
    return out


@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(clean=st.booleans(), cut_fraction=st.floats(0, 1))
def test_torn_tail_is_cut_and_reported(
    templates: dict[bool, Path],
    tmp_path_factory: pytest.TempPathFactory,
    clean: bool,
    cut_fraction: float,
) -> None:
    directory = tmp_path_factory.mktemp("torn")
    shutil.rmtree(directory)
    shutil.copytree(templates[clean], directory)
    (directory / ".lock").unlink()
    active = sorted(directory.glob("*.log"))[-1]
    ends = record_ends(active)
    size = active.stat().st_size
    cut = int(size * cut_fraction)
    os.truncate(active, cut)
    whole = [(offset, end) for offset, end in ends if end <= cut]
    kept_bytes = whole[-1][1] if whole else 0
    base = int(active.name[:20])
    with Log.open(directory, CFG) as log:
        report = log.recovery
        assert report.bytes_truncated == cut - kept_bytes
        assert (active.name in report.truncated_files) == (cut != kept_bytes)
        assert active.stat().st_size == kept_bytes
        leo = whole[-1][0] + 1 if whole else base
        assert log.log_end_offset == leo
        assert log.high_watermark == min(80, leo)
        recs = read_all(log)
        assert [r.offset for r in recs] == list(range(leo))
        assert all(r.value.startswith(b"v%d." % r.offset) for r in recs)
        # The log continues from the cut.
        assert log.append(bodies(1), 5_000, 5)[0] == leo
        assert log.epochs.latest_epoch == 5
        assert all(e.start_offset < log.log_end_offset for e in log.epochs.entries)


def test_missing_index_is_rebuilt(tmp_path: Path) -> None:
    build(tmp_path, clean=True)
    first = sorted(tmp_path.glob("*.index"))[0]
    original = first.read_bytes(), first.with_suffix(".timeindex").read_bytes()
    first.unlink()
    first.with_suffix(".timeindex").unlink()
    with Log.open(tmp_path, CFG) as log:
        assert log.recovery.indexes_rebuilt == 2
        assert first.name in log.recovery.rebuilt_files
        assert not log.recovery.corrupt_files
        assert log.recovery.ok
        assert [r.offset for r in read_all(log)] == list(range(80))
        assert log.offset_for_timestamp(1_001) == 5
    assert (first.read_bytes(), first.with_suffix(".timeindex").read_bytes()) == original


@pytest.mark.parametrize("damage", ["garbage", "other-segment", "past-end", "time-mismatch"])
def test_corrupt_index_is_rebuilt(tmp_path: Path, damage: str) -> None:
    build(tmp_path, clean=True)
    indexes = sorted(tmp_path.glob("*.index"))
    target = indexes[1]
    if damage == "garbage":
        target.write_bytes(b"\x01" * 13)
    elif damage == "other-segment":  # well-formed, but for another file
        target.write_bytes(indexes[0].read_bytes())
    elif damage == "past-end":
        target.write_bytes(bytes.fromhex("00000001 00ffffff"))
    else:
        target.with_suffix(".timeindex").write_bytes(b"")
    with Log.open(tmp_path, CFG) as log:
        report = log.recovery
        assert target.name in report.corrupt_files
        assert target.name in report.rebuilt_files
        assert report.bytes_truncated == 0
        assert not report.unreadable_ranges
        assert [r.offset for r in read_all(log, max_bytes=200)] == list(range(80))
        assert log.offset_for_timestamp(1_007) == 35


def test_damaged_old_segment_is_fenced_off_not_fatal(tmp_path: Path) -> None:
    build(tmp_path, clean=True)
    logs = sorted(tmp_path.glob("*.log"))
    victim = logs[1]
    ends = record_ends(victim)
    data = bytearray(victim.read_bytes())
    data[ends[-2][1] + 30] ^= 0xFF  # a byte in the body of its last record
    victim.write_bytes(bytes(data))
    next_base = int(logs[2].name[:20])
    bad_offset = ends[-1][0]
    for _ in range(2):  # the same report on every open
        with Log.open(tmp_path, CFG) as log:
            report = log.recovery
            assert victim.name in report.corrupt_files
            assert report.unreadable_ranges == ((bad_offset, next_base),)
            assert report.bytes_truncated == 0
            assert not report.ok
            with pytest.raises(CorruptRangeError) as info:
                log.read(bad_offset, 1000)
            assert (info.value.start, info.value.end) == (bad_offset, next_base)
            with pytest.raises(CorruptRangeError):
                read_all(log, 0)  # reads everything before the damage, then refuses
            with log.read(bad_offset - 1, 1000) as sl:
                assert [r.offset for r in iter_records(sl.read_bytes())] == [bad_offset - 1]
                assert sl.next_offset == bad_offset
            assert [r.offset for r in read_all(log, next_base)] == list(range(next_base, 80))
            assert victim.stat().st_size == len(data)  # kept for inspection


def test_bit_flip_in_active_segment_cuts_from_there(tmp_path: Path) -> None:
    build(tmp_path, clean=False)
    active = sorted(tmp_path.glob("*.log"))[-1]
    ends = record_ends(active)
    data = bytearray(active.read_bytes())
    data[ends[2][1] + 3] ^= 0x01  # inside the header of the fourth record
    active.write_bytes(bytes(data))
    with Log.open(tmp_path, CFG) as log:
        assert log.recovery.bytes_truncated == len(data) - ends[2][1]
        assert log.log_end_offset == ends[2][0] + 1


def test_corrupt_checkpoints_are_reported_and_rebuilt(tmp_path: Path) -> None:
    build(tmp_path, clean=True)
    for name in (HIGH_WATERMARK_FILE, LOG_START_OFFSET_FILE, LEADER_EPOCH_FILE):
        (tmp_path / name).write_bytes(b"0\nbroken")
    with Log.open(tmp_path, CFG) as log:
        report = log.recovery
        assert set(report.corrupt_files) == {
            HIGH_WATERMARK_FILE,
            LOG_START_OFFSET_FILE,
            LEADER_EPOCH_FILE,
        }
        assert log.high_watermark == 0
        assert log.log_start_offset == 0
        assert [(e.epoch, e.start_offset) for e in log.epochs.entries] == [(0, 0), (2, 30), (5, 60)]
    assert (tmp_path / LEADER_EPOCH_FILE).read_bytes() == b"0\n3\n0 0\n2 30\n5 60\n"
    assert (tmp_path / LOG_START_OFFSET_FILE).read_bytes() == b"0\n1\n0\n"  # replaced


def test_missing_epoch_checkpoint_is_rebuilt(tmp_path: Path) -> None:
    build(tmp_path, clean=False)
    (tmp_path / LEADER_EPOCH_FILE).unlink()
    with Log.open(tmp_path, CFG) as log:
        assert not log.recovery.corrupt_files
        assert any(LEADER_EPOCH_FILE in note for note in log.recovery.notes)
        assert log.epochs.end_offset_for(2) == 60


def test_leftovers_are_deleted(tmp_path: Path) -> None:
    build(tmp_path, clean=True)
    for name in (
        "00000000000000000000.log.cleaned",
        "00000000000000000000.index.cleaned",
        "high-watermark-checkpoint.tmp",
        "00000000000000099999.index",  # no .log
        "00000000000000099999.timeindex",
    ):
        (tmp_path / name).write_bytes(b"junk")
    (tmp_path / "notes.txt").write_bytes(b"not ours")
    with Log.open(tmp_path, CFG) as log:
        assert len(log.recovery.deleted_files) == 5
        assert log.recovery.ok
        assert len(read_all(log)) == 80
    assert (tmp_path / "notes.txt").exists()
    assert not list(tmp_path.glob("*.cleaned"))
    assert not list(tmp_path.glob("*.tmp"))


def test_empty_files_and_zero_length_segment(tmp_path: Path) -> None:
    build(tmp_path, clean=False)
    logs = sorted(tmp_path.glob("*.log"))
    os.truncate(logs[-1], 0)
    with Log.open(tmp_path, CFG) as log:
        assert log.log_end_offset == int(logs[-1].name[:20])
        recs = read_all(log)
        assert len(recs) == log.log_end_offset
        assert list(iter_records(b"")) == []


def test_unclean_open_fsyncs_and_marks_everything_flushed(tmp_path: Path) -> None:
    build(tmp_path, clean=False)
    with Log.open(tmp_path, CFG) as log:
        assert not log.recovery.clean_shutdown
        assert log.flushed_offset == log.log_end_offset == 80


def test_overlapping_active_segment_is_quarantined(tmp_path: Path) -> None:
    build(tmp_path, clean=True)
    logs = sorted(tmp_path.glob("*.log"))
    # A stray copy of the first segment, named as if it started inside the second one.
    inside = int(logs[1].name[:20]) + 1
    stray = tmp_path / f"{inside:020d}.log"
    stray.write_bytes(logs[0].read_bytes())
    expected_leo = int(logs[2].name[:20])
    for path in logs[2:]:
        for suffix in (".log", ".index", ".timeindex"):
            path.with_suffix(suffix).unlink()
    with Log.open(tmp_path, CFG) as log:
        assert stray.name in log.recovery.corrupt_files
        assert (tmp_path / (stray.name + ".quarantined")).exists()
        assert not stray.exists()
        assert log.log_end_offset == expected_leo
        assert [r.offset for r in read_all(log)] == list(range(min(expected_leo, 80)))


@pytest.mark.parametrize("clean", [True, False])
def test_open_fsyncs_the_active_segment_only_after_an_unclean_close(
    tmp_path: Path, clean: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A clean close fsynced the active segment and its marker names it at its size, so
    the next open has nothing to sync; after a crash the open must sync what survived."""
    build(tmp_path, clean=clean)
    synced: list[int] = []
    real = files.fdatasync

    def counted(fd: int) -> None:
        synced.append(fd)
        real(fd)

    monkeypatch.setattr(segment_module, "fdatasync", counted)
    with Log.open(tmp_path, CFG) as log:
        assert log.recovery.clean_shutdown is clean
        assert log.flushed_offset == log.log_end_offset == 80
        assert len(synced) == (0 if clean else 1)


@pytest.mark.parametrize(
    "stale",
    [
        b"0\n2\n0 0\n2 30\n",  # written before epoch 5 began (its assign was not fsynced)
        b"0\n1\n0 0\n",  # two epochs behind
        b"0\n3\n0 0\n2 30\n3 60\n",  # an epoch of no records, where epoch 5 then began
    ],
)
def test_epoch_checkpoint_behind_the_records_is_extended(tmp_path: Path, stale: bytes) -> None:
    """A new epoch is checkpointed without fsync (spec/storage.md §6): a crash may leave a
    valid checkpoint without the epochs of the last records; recovery adds them at their
    first offsets, as the appends had."""
    build(tmp_path, clean=False)
    (tmp_path / LEADER_EPOCH_FILE).write_bytes(stale)
    with Log.open(tmp_path, CFG) as log:
        assert [(e.epoch, e.start_offset) for e in log.epochs.entries] == [(0, 0), (2, 30), (5, 60)]
        assert log.epochs.end_offset_for(2) == 60
        assert any("extended" in note for note in log.recovery.notes)
        assert not log.recovery.corrupt_files
    assert (tmp_path / LEADER_EPOCH_FILE).read_bytes() == b"0\n3\n0 0\n2 30\n5 60\n"


def test_epoch_checkpoint_behind_the_records_after_a_clean_close(tmp_path: Path) -> None:
    build(tmp_path, clean=True)
    (tmp_path / LEADER_EPOCH_FILE).write_bytes(b"0\n1\n0 0\n")
    with Log.open(tmp_path, CFG) as log:
        assert [(e.epoch, e.start_offset) for e in log.epochs.entries] == [(0, 0), (2, 30), (5, 60)]
