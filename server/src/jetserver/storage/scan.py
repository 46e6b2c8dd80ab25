"""CRC-verified scans of a segment file, used by recovery to find torn tails and rebuild
indexes (spec/storage.md, "Recovery")."""

from __future__ import annotations

import mmap
from array import array

import attrs

from jetsdk.codec.errors import CodecError
from jetsdk.codec.record import HEADER_SIZE, check_crc, peek_header
from jetserver.storage.offset_index import U32_MAX, OffsetIndex
from jetserver.storage.segment import NO_TIMESTAMP
from jetserver.storage.time_index import TimeIndex


@attrs.define
class ScanOutcome:
    """What a CRC scan of ``[start, file_size)`` of a ``.log`` found."""

    valid_end: int
    """Position just past the last whole record with a good CRC and a sane offset."""
    first_offset: int | None
    """Offset of the first record scanned (None if none)."""
    last_offset: int | None
    """Offset of the last good record scanned (None if none)."""
    max_timestamp: int
    """Running max timestamp after the last good record."""
    index: OffsetIndex
    """The index, extended with entries for the scanned records."""
    timeindex: TimeIndex
    """The time index, extended likewise."""
    added_entries: int
    """Index entries the scan added."""
    error: str | None
    """Why the scan stopped before the end of the file, or None."""
    last_epoch: int = -1
    """Leader epoch of the last good record scanned (-1 if none)."""


def crc_scan(
    fd: int,
    file_size: int,
    base_offset: int,
    interval: int,
    *,
    start: int = 0,
    index: OffsetIndex | None = None,
    timeindex: TimeIndex | None = None,
    running_max: int = NO_TIMESTAMP,
    min_offset: int | None = None,
) -> ScanOutcome:
    """Verify records from ``start`` to the end of the file, extending the indexes.

    Stops at the first record that is truncated, fails its CRC, has an absurd length, or an
    offset that is not increasing, below ``base_offset`` (or ``min_offset``) or too far
    above it for a u32 relative offset. Index entries follow the rule of
    :func:`jetserver.storage.offset_index.index_points`.
    """
    index = index if index is not None else OffsetIndex()
    timeindex = timeindex if timeindex is not None else TimeIndex()
    last_indexed = index.positions[-1] if len(index) else 0
    prev = (min_offset if min_offset is not None else base_offset) - 1
    pos = start
    first: int | None = None
    last: int | None = None
    added = 0
    error: str | None = None
    last_epoch = -1
    if file_size <= start:
        return ScanOutcome(start, None, None, running_max, index, timeindex, 0, None)
    new_rel: array[int] = array("q")
    new_pos: array[int] = array("q")
    new_ts: array[int] = array("q")
    mm = mmap.mmap(fd, file_size, access=mmap.ACCESS_READ)
    try:
        with memoryview(mm) as mv:
            while pos < file_size:
                if file_size - pos < HEADER_SIZE:
                    error = f"torn record header at byte {pos}"
                    break
                try:
                    size = check_crc(mv, pos)
                except CodecError as exc:
                    error = f"bad record at byte {pos}: {exc}"
                    break
                offset, ts, epoch, _size = peek_header(mv, pos)
                if offset <= prev or offset - base_offset > U32_MAX:
                    error = f"record at byte {pos} has offset {offset} out of order"
                    break
                if ts > running_max:
                    running_max = ts
                if pos - last_indexed >= interval:
                    new_rel.append(offset - base_offset)
                    new_pos.append(pos)
                    new_ts.append(running_max)
                    last_indexed = pos
                if first is None:
                    first = offset
                last = prev = offset
                last_epoch = epoch
                pos += size
    finally:
        mm.close()
    for rel, p, t in zip(new_rel, new_pos, new_ts):
        index.append(rel, p)
        timeindex.append(t, rel)
        added += 1
    return ScanOutcome(pos, first, last, running_max, index, timeindex, added, error, last_epoch)
