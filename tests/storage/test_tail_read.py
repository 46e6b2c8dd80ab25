"""A read of what the last small append wrote comes from memory (Segment.tail_bytes)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from jetsdk.codec.record import iter_records
from jetserver.storage import Log, LogConfig
from jetserver.storage.files import SharedFile
from jetserver.storage.segment import TAIL_MAX_BYTES, Segment

from .helpers import bodies


def _file_bytes(directory: Path, position: int, length: int) -> bytes:
    (path,) = directory.glob("*.log")
    with path.open("rb") as f:
        return os.pread(f.fileno(), length, position)


def test_a_read_of_the_last_small_append_is_served_from_memory(tmp_path: Path) -> None:
    """The records one small append wrote, read by a reader keeping up, come as bytes
    with no file descriptor and no lease (one ``send`` with the Fetch head, no
    ``sendfile``); they are the file's bytes. A read that also covers older records, or
    one after a truncation, reads the file."""
    with Log.open(tmp_path / "p", LogConfig(index_interval_bytes=1 << 20)) as log:
        log.append(bodies(2), 1, 0)
        log.append(bodies(3, start=2), 2, 0)
        log.set_high_watermark(5)
        with log.read(2, 1 << 20) as tail:
            assert tail.data is not None
            assert tail.fileno == -1
            assert tail.lease is None
            assert tail.read_bytes() == _file_bytes(tmp_path / "p", tail.position, tail.length)
            assert [r.offset for r in iter_records(tail.read_bytes())] == [2, 3, 4]
        with log.read(3, 1 << 20) as part:  # inside the last append: still from memory
            assert part.data is not None
            assert [r.offset for r in iter_records(part.read_bytes())] == [3, 4]
        with log.read(0, 1 << 20) as whole:  # older records too: from the file
            assert whole.data is None
            assert whole.fileno >= 0
            assert [r.offset for r in iter_records(whole.read_bytes())] == [0, 1, 2, 3, 4]
        log.truncate_to(4)
        with log.read(2, 1 << 20) as after_cut:
            assert after_cut.data is None
            assert [r.offset for r in iter_records(after_cut.read_bytes())] == [2, 3]
        log.append(bodies(1, start=40), 3, 0)
        log.set_high_watermark(5)
        with log.read(4, 1 << 20) as new_tail:
            assert new_tail.data is not None
            assert [r.value.rstrip(b".") for r in iter_records(new_tail.read_bytes())] == [b"v40"]


def test_a_large_append_or_a_raw_one_is_not_kept(tmp_path: Path) -> None:
    """An append over TAIL_MAX_BYTES is read from the file, and so is a follower's raw
    append (a view of a buffer that may be reused)."""
    with (
        Log.open(tmp_path / "big", LogConfig(index_interval_bytes=1 << 20)) as big,
        Log.open(tmp_path / "raw", LogConfig(index_interval_bytes=1 << 20)) as raw,
    ):
        big.append(bodies(1, size=TAIL_MAX_BYTES + 1), 1, 0)
        big.set_high_watermark(1)
        with big.read(0, 1 << 20) as sl:
            assert sl.data is None
            assert sl.fileno >= 0
            data = sl.read_bytes()
        raw.append_raw(memoryview(bytearray(data)))
        raw.set_high_watermark(1)
        with raw.read(0, 1 << 20) as sl:
            assert sl.data is None
            assert sl.read_bytes() == data


def test_a_reader_keeping_up_reads_the_tail_without_locating_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A read from the first offset of the last small append, with all of it visible,
    is served from memory before any slice or file lease (Segment.read_tail); one that
    starts inside it, or whose bound stops short of its end, takes the usual way."""
    with Log.open(tmp_path / "p", LogConfig(index_interval_bytes=1 << 20)) as log:
        log.append(bodies(2), 1, 0)
        log.append(bodies(2, start=2), 2, 0)
        log.set_high_watermark(4)
        sliced: list[int] = []
        acquired: list[int] = []
        real_slice = Segment.slice
        real_acquire = SharedFile.acquire

        def slice_(self: Segment, offset: int, *args: Any) -> Any:
            sliced.append(offset)
            return real_slice(self, offset, *args)

        def acquire(self: SharedFile) -> None:
            acquired.append(1)
            real_acquire(self)

        monkeypatch.setattr(Segment, "slice", slice_)
        monkeypatch.setattr(SharedFile, "acquire", acquire)
        with log.read(2, 1 << 20) as tail:
            assert tail.data is not None
            assert tail.read_bytes() == _file_bytes(tmp_path / "p", tail.position, tail.length)
            assert [r.offset for r in iter_records(tail.read_bytes())] == [2, 3]
            assert tail.next_offset == 4
        assert sliced == []
        assert acquired == []
        with log.read(3, 1 << 20) as inside:
            assert [r.offset for r in iter_records(inside.read_bytes())] == [3]
        with log.read(2, 1 << 20, max_offset=3) as bounded:
            assert [r.offset for r in iter_records(bounded.read_bytes())] == [2]
        assert sliced == [3, 2]
        log.append(bodies(1, start=4), 3, 0)  # the reader's next read: the new tail
        log.set_high_watermark(5)
        with log.read(4, 1 << 20) as nxt:
            assert [r.offset for r in iter_records(nxt.read_bytes())] == [4]
        assert sliced == [3, 2]


def test_read_tail_gives_what_read_gives_for_a_reader_at_the_last_append(tmp_path: Path) -> None:
    """``Log.read_tail`` (a tailing consumer's answer in one step) gives the bytes and the
    next offset that ``read`` to the HW gives when the last append starts at the offset,
    lies below the HW and fits; None otherwise: an offset inside or before it, the HW
    short of its end, ``max_bytes`` short of it, a large append, after a roll, a closed
    log."""
    log = Log.open(tmp_path / "p", LogConfig(index_interval_bytes=1 << 20))
    with log:
        log.append(bodies(2), 1, 0)
        log.append(bodies(3, start=2), 2, 0)
        assert log.read_tail(2, 1 << 20) is None  # not committed yet
        log.set_high_watermark(4)
        assert log.read_tail(2, 1 << 20) is None  # committed in part
        log.set_high_watermark(5)
        with log.read(2, 1 << 20) as sl:
            assert log.read_tail(2, 1 << 20) == (sl.read_bytes(), sl.next_offset)
            assert log.read_tail(2, sl.length) == (sl.read_bytes(), 5)
            assert log.read_tail(2, sl.length - 1) is None
        assert log.read_tail(3, 1 << 20) is None  # inside it
        assert log.read_tail(0, 1 << 20) is None  # before it
        assert log.read_tail(5, 1 << 20) is None  # at the end: nothing to read
        log.append(bodies(1, start=5, size=TAIL_MAX_BYTES + 1), 3, 0)
        log.set_high_watermark(6)
        assert log.read_tail(5, 1 << 20) is None  # large: from the file
        log.append(bodies(1, start=6), 3, 0)
        log.set_high_watermark(7)
        with log.read(6, 1 << 20) as sl:
            assert log.read_tail(6, 1 << 20) == (sl.read_bytes(), 7)
        log.roll()
        assert log.read_tail(6, 1 << 20) is None  # the active segment is a new one
    assert log.read_tail(6, 1 << 20) is None  # closed
