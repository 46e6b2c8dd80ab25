"""Log: append, read, timestamps, rolling, append_raw, truncation, reopen."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from jetsdk.codec.record import HEADER_SIZE, encode_body, frame_body, iter_records
from jetserver.storage import (
    InvalidArgumentError,
    InvalidRecordsError,
    Log,
    LogClosedError,
    LogConfig,
    OffsetOutOfRange,
    StorageError,
)
from jetserver.storage.segment import Segment

from .helpers import SMALL, bodies, read_all


def test_empty_log(tmp_path: Path) -> None:
    with Log.open(tmp_path / "p") as log:
        assert (log.log_start_offset, log.log_end_offset, log.high_watermark) == (0, 0, 0)
        assert log.segment_count == 1
        assert log.recovery.ok
        sl = log.read(0, 100)
        assert sl.empty
        assert (sl.first_offset, sl.next_offset, sl.fileno) == (0, 0, -1)
        assert sl.read_bytes() == b""
        with pytest.raises(OffsetOutOfRange) as info:
            log.read(1, 100)
        assert (info.value.log_start_offset, info.value.log_end_offset) == (0, 0)
    # No index files: the segment has no entries and never had files (spec/storage.md §3).
    assert sorted(p.name for p in (tmp_path / "p").iterdir()) == [
        ".lock",
        "00000000000000000000.log",
        "clean-shutdown",
    ]  # no log-start-offset- or high-watermark-checkpoint: missing, each reads as 0, the
    # log start (spec/storage.md §9)


def test_append_assigns_offsets_and_stores_records_verbatim(tmp_path: Path) -> None:
    with Log.open(tmp_path) as log:
        batch = bodies(3)
        assert log.append(batch, 1_000, 0) == (0, 1_000)
        assert log.append(bodies(2, start=3), 2_000, 0) == (3, 2_000)
        assert log.log_end_offset == 5
        expected = b"".join(
            [frame_body(i, 1_000, 0, b) for i, b in enumerate(batch)]
            + [frame_body(3 + i, 2_000, 0, b) for i, b in enumerate(bodies(2, start=3))]
        )
        assert (tmp_path / "00000000000000000000.log").read_bytes() == expected
        # Reads stop at the high watermark.
        assert log.read(0, 1000).empty
        log.set_high_watermark(5)
        with log.read(0, 10_000) as sl:
            assert sl.read_bytes() == expected
            assert (sl.position, sl.length, sl.first_offset, sl.next_offset) == (
                0,
                len(expected),
                0,
                5,
            )
            assert os.pread(sl.fileno, sl.length, sl.position) == expected


def test_timestamps_never_decrease(tmp_path: Path) -> None:
    with Log.open(tmp_path) as log:
        assert log.append(bodies(1), 500, 0) == (0, 500)
        assert log.append(bodies(1), 400, 0) == (1, 500)  # clamped
        assert log.append(bodies(1), 600, 0) == (2, 600)
        log.set_high_watermark(3)
        assert [r.timestamp for r in read_all(log)] == [500, 500, 600]


def test_read_respects_max_bytes_and_max_offset(tmp_path: Path) -> None:
    with Log.open(tmp_path, LogConfig(index_interval_bytes=64)) as log:
        log.append(bodies(100, size=50), 1, 0)
        log.set_high_watermark(100)
        size = len(frame_body(0, 1, 0, bodies(1, size=50)[0]))
        with log.read(10, 5 * size + 3) as sl:
            recs = list(iter_records(sl.read_bytes()))
            assert [r.offset for r in recs] == [10, 11, 12, 13, 14]
            assert sl.length == 5 * size
            assert sl.next_offset == 15
        with log.read(10, 1) as sl:  # one whole record even if max_bytes is smaller
            assert [r.offset for r in iter_records(sl.read_bytes())] == [10]
            assert sl.next_offset == 11
        with log.read(10, 10_000, max_offset=13) as sl:
            assert [r.offset for r in iter_records(sl.read_bytes())] == [10, 11, 12]
            assert sl.next_offset == 13
        assert log.read(13, 100, max_offset=13).empty
        assert [r.offset for r in read_all(log, 37, max_bytes=333)] == list(range(37, 100))
        with pytest.raises(InvalidArgumentError):
            log.read(0, -1)


def test_rolls_by_size_and_reads_across_segments(tmp_path: Path) -> None:
    with Log.open(tmp_path, SMALL) as log:
        for i in range(30):
            log.append(bodies(5, start=5 * i, size=40), 1000 + i, 0)
        assert log.segment_count > 5
        infos = log.segments()
        assert all(s.size_bytes <= SMALL.segment_max_bytes for s in infos)
        assert [s.base_offset for s in infos[1:]] == [s.next_offset for s in infos[:-1]]
        log.set_high_watermark(150)
        recs = read_all(log, max_bytes=300)
        assert [r.offset for r in recs] == list(range(150))
        assert recs[77].value.startswith(b"v77")
        # A read never spans two segments.
        with log.read(0, 1_000_000) as sl:
            assert sl.next_offset == infos[0].next_offset


def test_one_batch_larger_than_a_segment_goes_alone(tmp_path: Path) -> None:
    with Log.open(tmp_path, LogConfig(segment_max_bytes=100)) as log:
        log.append(bodies(1), 1, 0)
        log.append(bodies(10, start=1, size=50), 1, 0)
        assert [s.base_offset for s in log.segments()] == [0, 1]
        log.set_high_watermark(11)
        assert len(read_all(log)) == 11


def test_rolls_by_age(tmp_path: Path) -> None:
    now = [10**18]
    cfg = LogConfig(segment_max_age_s=60)
    with Log.open(tmp_path, cfg, clock=lambda: now[0]) as log:
        log.append(bodies(2), now[0], 0)
        now[0] += 59 * 10**9
        log.append(bodies(2), now[0], 0)
        assert log.segment_count == 1
        now[0] += 2 * 10**9
        log.append(bodies(2), now[0], 0)
        assert [s.base_offset for s in log.segments()] == [0, 4]
        assert log.roll()
        assert not log.roll()  # the new active segment is empty
        assert log.segment_count == 3


def test_offset_for_timestamp(tmp_path: Path) -> None:
    with Log.open(tmp_path, SMALL) as log:
        for i in range(40):
            log.append(bodies(3, size=30), 100 * (i + 1), 0)  # offsets 3i..3i+2 at 100(i+1)
        log.set_high_watermark(log.log_end_offset)
        assert log.segment_count > 3
        assert log.offset_for_timestamp(0) == 0
        assert log.offset_for_timestamp(100) == 0
        assert log.offset_for_timestamp(101) == 3
        assert log.offset_for_timestamp(2050) == 3 * 20
        assert log.offset_for_timestamp(4000) == 117
        assert log.offset_for_timestamp(4001) is None
        log.set_high_watermark(60)
        assert log.offset_for_timestamp(2050) is None  # not committed yet
        assert log.offset_for_timestamp(2050, max_offset=120) == 60


def test_append_raw_replicates_exact_bytes(tmp_path: Path) -> None:
    with (
        Log.open(tmp_path / "leader", SMALL) as leader,
        Log.open(tmp_path / "follower", SMALL) as follower,
    ):
        for i in range(20):
            leader.append(bodies(4, start=4 * i, size=30), 10 + i, i // 5)
        leader.set_high_watermark(leader.log_end_offset)
        offset = 0
        while offset < leader.log_end_offset:
            with leader.read(offset, 700, max_offset=leader.log_end_offset) as sl:
                offset = follower.append_raw(sl.read_bytes())
                assert offset == sl.next_offset
        assert follower.log_end_offset == 80
        assert follower.epochs.entries == leader.epochs.entries
        follower.set_high_watermark(80)
        assert read_all(follower) == read_all(leader)
        assert follower.offset_for_timestamp(15) == leader.offset_for_timestamp(15) == 20


def test_append_raw_validation(tmp_path: Path) -> None:
    with Log.open(tmp_path) as log:
        good = frame_body(0, 1, 0, encode_body(b"a")) + frame_body(1, 1, 0, encode_body(b"b"))
        partial = frame_body(2, 1, 0, encode_body(b"c"))
        assert log.append_raw(good + partial[:-3]) == 2  # trailing partial record ignored
        with pytest.raises(InvalidRecordsError):
            log.append_raw(frame_body(1, 1, 0, encode_body(b"x")))  # below the LEO
        bad = bytearray(partial)
        bad[-1] ^= 1
        with pytest.raises(InvalidRecordsError):
            log.append_raw(bytes(bad))
        with pytest.raises(InvalidRecordsError):  # not increasing inside the batch
            log.append_raw(partial + partial)
        log.append_raw(frame_body(10, 1, 3, encode_body(b"gap")))  # gaps are allowed
        assert log.log_end_offset == 11
        with pytest.raises(InvalidRecordsError):  # epochs never go back
            log.append_raw(frame_body(11, 1, 2, encode_body(b"old")))
        with pytest.raises(InvalidRecordsError):
            log.append(bodies(1), 1, 2)
        assert log.append_raw(b"") == 11


def test_truncate_to(tmp_path: Path) -> None:
    with Log.open(tmp_path, SMALL) as log:
        for i in range(30):
            log.append(bodies(5, start=5 * i, size=40), 1000 + i, i // 10)
        log.set_high_watermark(150)
        segments_before = log.segment_count
        log.truncate_to(63)
        assert log.log_end_offset == 63
        assert log.high_watermark == 63
        assert log.flushed_offset <= 63
        assert log.segment_count < segments_before
        assert [r.offset for r in read_all(log)] == list(range(63))
        assert [(e.epoch, e.start_offset) for e in log.epochs.entries] == [(0, 0), (1, 50)]
        assert log.append(bodies(2, start=900), 5, 1) == (63, 1012)  # ts stays monotonic
        log.truncate_to(200)  # past the end: no-op
        assert log.log_end_offset == 65
        log.set_high_watermark(65)
    with Log.open(tmp_path, SMALL) as log:
        assert log.recovery.ok
        recs = read_all(log)
        assert [r.offset for r in recs] == list(range(65))
        assert recs[63].value.startswith(b"v900")


def test_truncate_below_log_start_restarts_empty(tmp_path: Path) -> None:
    with Log.open(tmp_path, SMALL) as log:
        log.append(bodies(3), 1, 0)
        log.truncate_to(3)
        log.truncate_to(0)
        assert (log.log_start_offset, log.log_end_offset) == (0, 0)


def test_reopen_keeps_everything(tmp_path: Path) -> None:
    with Log.open(tmp_path, SMALL) as log:
        for i in range(10):
            log.append(bodies(7, start=7 * i, size=40), 1000 + i, 1)
        log.set_high_watermark(50)
        before = read_all(log)
    with Log.open(tmp_path, SMALL) as log:
        assert log.recovery.ok
        assert log.recovery.clean_shutdown
        assert log.recovery.indexes_rebuilt == 0
        assert log.high_watermark == 50
        assert log.log_end_offset == 70
        assert read_all(log) == before
        assert log.epochs.latest_epoch == 1
        assert log.append(bodies(1), 0, 1) == (70, 1009)


def test_directory_is_locked(tmp_path: Path) -> None:
    with Log.open(tmp_path), pytest.raises(StorageError):
        Log.open(tmp_path)


def test_closed_log_refuses(tmp_path: Path) -> None:
    log = Log.open(tmp_path)
    log.append(bodies(1), 1, 0)
    log.set_high_watermark(1)
    sl = log.read(0, 100)
    log.close()
    log.close()
    assert len(sl.read_bytes()) == sl.length  # a slice outlives the log
    sl.close()
    for call in (lambda: log.read(0, 1), lambda: log.append(bodies(1), 1, 0), log.flush):
        with pytest.raises(LogClosedError):
            call()


def test_bad_arguments(tmp_path: Path) -> None:
    with Log.open(tmp_path) as log:
        with pytest.raises(InvalidArgumentError):
            log.append(bodies(1), 2**63, 0)
        with pytest.raises(InvalidArgumentError):
            log.append(bodies(1), 0, -1)
        with pytest.raises(InvalidArgumentError):
            log.truncate_to(-1)
        assert log.append([], 5, 0) == (0, 5)


def test_big_reads_end_on_index_entries(tmp_path: Path) -> None:
    with Log.open(tmp_path, LogConfig(index_interval_bytes=256)) as log:
        for i in range(50):
            log.append(bodies(100, start=100 * i, size=60), i, 0)
        log.set_high_watermark(log.log_end_offset)
        offset = 0
        seen = 0
        while True:
            with log.read(offset, 16_384) as sl:
                if sl.empty:
                    break
                recs = list(iter_records(sl.read_bytes()))
                assert [r.offset for r in recs] == list(range(offset, sl.next_offset))
                assert [r.value for r in recs] == [
                    (b"v%d" % r.offset).ljust(60, b".") for r in recs
                ]
                # Whole records only: the slice ends where a record ends.
                assert sum(HEADER_SIZE + len(encode_body(r.value)) for r in recs) == sl.length
                if sl.next_offset < log.log_end_offset:
                    assert 16_384 * 7 // 8 <= sl.length <= 16_384
                seen += len(recs)
                offset = sl.next_offset
        assert seen == 5000


def test_append_raw_with_older_timestamps_keeps_indexes_rebuildable(tmp_path: Path) -> None:
    cfg = LogConfig(segment_max_bytes=400, index_interval_bytes=40)
    body = encode_body(b"x" * 20)
    with Log.open(tmp_path, cfg) as log:
        offset = 0
        for ts in [100, 90, 300, 50, 50, 400, 10, 500, 20, 30, 600, 5]:
            offset = log.append_raw(frame_body(offset, ts, 0, body))
        assert log.segment_count > 1
        log.set_high_watermark(offset)
        assert log.offset_for_timestamp(150) == 2  # the running max reaches 300 at offset 2
        assert log.offset_for_timestamp(350) == 5
        assert log.offset_for_timestamp(450) == 7
        log.roll()
    with Log.open(tmp_path, cfg) as log:
        assert log.recovery.indexes_rebuilt == 0
        assert log.offset_for_timestamp(450) == 7


def read_past_a_gap(tail: Log, before_read: Callable[[], object] = lambda: None) -> None:
    """A follower's raw append with a gap (offsets 0-9, then 15) into the empty ``tail``: the
    read from 10 after it (``before_read`` first) returns 15 alone."""
    tail.append_raw(b"".join(frame_body(i, 1, 0, b) for i, b in enumerate(bodies(10))))
    tail.set_high_watermark(10)
    with tail.read(0, 1 << 20) as sl:
        assert sl.next_offset == 10
    tail.append_raw(frame_body(15, 2, 0, bodies(1, start=15)[0]))
    tail.set_high_watermark(16)
    before_read()
    with tail.read(10, 1 << 20) as sl:
        assert sl.first_offset == 15
        assert [r.offset for r in iter_records(sl.read_bytes())] == [15]


def test_a_tailing_read_starts_where_the_last_one_ended_without_a_scan(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A reader keeping up asks next for the offset its last read ended at: the segment
    remembers where that is, so no header is scanned from the last index entry; after a
    gap (compaction leaves them) the record found there is the one returned."""
    scans: list[int] = []
    real = Segment.iter_headers

    def counted(self: Segment, start: int, end: int) -> Iterator[tuple[int, int, int, int, int]]:
        scans.append(start)
        return real(self, start, end)

    monkeypatch.setattr(Segment, "iter_headers", counted)
    with (
        Log.open(tmp_path / "leader", LogConfig(index_interval_bytes=1 << 20)) as leader,
        Log.open(tmp_path / "tail", LogConfig(index_interval_bytes=1 << 20)) as tail,
    ):
        leader.append(bodies(30, size=60), 1, 0)
        leader.set_high_watermark(30)
        with leader.read(0, 1 << 20) as sl:
            assert sl.next_offset == 30
        for start in (30, 35):
            leader.append(bodies(5, start=start, size=60), 2, 0)
            leader.set_high_watermark(start + 5)
            scans.clear()
            with leader.read(start, 1 << 20) as sl:
                got = [r.offset for r in iter_records(sl.read_bytes())]
            assert got == list(range(start, start + 5))
            assert scans == []
        read_past_a_gap(tail)


@pytest.fixture
def preads(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The positions of the segments' ``pread_exact`` calls (header and record reads), in
    order, from here on."""
    from jetserver.storage import segment as segment_module

    positions: list[int] = []
    real = segment_module.pread_exact

    def counted(fd: int, size: int, position: int) -> bytes:
        positions.append(position)
        return real(fd, size, position)

    monkeypatch.setattr(segment_module, "pread_exact", counted)
    return positions


def test_a_tailing_read_after_an_append_reads_no_header_first(
    tmp_path: Path, preads: list[int]
) -> None:
    """A reader that stopped at the end of the segment reads next from where the records
    appended since then begin: the append, which knows their first offset, makes the
    reader's hint exact, so the read is one slice with no header read (a ``pread`` per
    Fetch of a consumer keeping up, ``python -m bench cost``); after a gap (a follower's
    raw append) the header is still read and the record found there returned."""
    with (
        Log.open(tmp_path / "leader", LogConfig(index_interval_bytes=1 << 20)) as leader,
        Log.open(tmp_path / "tail", LogConfig(index_interval_bytes=1 << 20)) as tail,
    ):
        leader.append(bodies(3), 1, 0)
        leader.set_high_watermark(3)
        with leader.read(0, 1 << 20) as sl:
            assert sl.next_offset == 3
        for start in (3, 4, 5):
            leader.append(bodies(1, start=start), 2, 0)
            leader.set_high_watermark(start + 1)
            preads.clear()
            with leader.read(start, 1 << 20) as sl:
                assert [r.offset for r in iter_records(sl.read_bytes())] == [start]
            assert preads == []
        read_past_a_gap(tail, before_read=preads.clear)
        assert len(preads) == 1  # the header at the hint, to find the gap


def test_several_tailing_readers_read_no_header_first(tmp_path: Path, preads: list[int]) -> None:
    """Three readers keeping up with one partition (three tables of a stream, a consumer
    group's members on their replicas) each read the record appended since their last
    read without a header read: the segment remembers where each of the last reads ended,
    not only the last one's (the old single hint served the first reader; the others
    scanned the headers from the last index entry, ~14 per read in a 4-table race)."""
    with Log.open(tmp_path / "p", LogConfig(index_interval_bytes=1 << 20)) as log:
        log.append(bodies(40), 1, 0)
        log.set_high_watermark(40)
        for _reader in range(3):
            with log.read(0, 1 << 20) as sl:
                assert sl.next_offset == 40
        for start in range(40, 46):
            log.append(bodies(1, start=start), 2, 0)
            log.set_high_watermark(start + 1)
            preads.clear()
            for _reader in range(3):
                with log.read(start, 1 << 20) as sl:
                    assert [r.offset for r in iter_records(sl.read_bytes())] == [start]
            assert preads == []
