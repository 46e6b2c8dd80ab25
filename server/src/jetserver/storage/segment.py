"""One segment: a ``.log`` file of stored records plus its offset and time indexes.

Segment files are named by their 20-digit base offset (spec/storage.md, "Files"). The
``.log`` is append-only while the segment is active; the indexes live in memory and are
written to ``.index`` / ``.timeindex`` when the segment is rolled, compacted or the log is
closed (recovery rebuilds them for the active segment from the log itself).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
from collections.abc import Iterator, Sequence
from itertools import accumulate, repeat
from operator import add, sub
from pathlib import Path
from typing import NamedTuple

import attrs

from jetsdk.codec.record import HEADER_SIZE, peek_header
from jetserver.storage.errors import ShortSegmentFileError, StorageError
from jetserver.storage.files import (
    INDEX_SUFFIX,
    LOG_SUFFIX,
    TIMEINDEX_SUFFIX,
    OpenFileCache,
    SharedFile,
    fdatasync,
    pread_exact,
    segment_file_name,
    write_all,
    write_file_durably,
)
from jetserver.storage.offset_index import OffsetIndex, index_points
from jetserver.storage.time_index import TimeIndex

NO_TIMESTAMP = -(2**63)
"""Max timestamp of a segment without records."""
MIN_SCAN_CHUNK = 8192
MAX_SCAN_CHUNK = 1024 * 1024
MAX_READ_HINTS = 8
"""Ends of recent reads a segment remembers (readers keeping up each start their next
read at one): a table open in several processes, a group's consumers."""
TAIL_MAX_BYTES = 1024
"""A segment keeps its last append in memory if it was at most this many bytes (one
buffer per segment, replaced by the next append): a consumer keeping up at light load
reads exactly those records (:meth:`Segment.tail_bytes`). Small, as every partition's
active segment may hold one."""


class SegmentState(NamedTuple):
    """What a reader may see of a segment; replaced as a whole on every change."""

    size: int
    """Bytes of whole, valid records in the ``.log``."""
    next_offset: int
    """Offset of the last record plus one (the base offset if empty)."""
    max_timestamp: int
    """Largest record timestamp (NO_TIMESTAMP if empty)."""
    offset_index: OffsetIndex
    """The offset index (only the first ``entries`` entries are visible)."""
    time_index: TimeIndex
    """The time index, one entry per offset-index entry."""
    entries: int
    """Number of visible index entries."""
    generation: int
    """Bumped by truncation, so cached positions from before are ignored."""


@attrs.frozen
class SegmentInfo:
    """A description of one segment (for tools, tests and metrics)."""

    base_offset: int
    """Base offset (the file name)."""
    next_offset: int
    """Offset of its last record plus one (the base offset if empty)."""
    size_bytes: int
    """Bytes of valid records."""
    max_timestamp: int | None
    """Largest record timestamp, None if empty."""
    index_entries: int
    """Offset-index (and time-index) entries."""
    corrupt_end: int | None
    """If set, offsets [next_offset, corrupt_end) are unreadable."""


class IndexEntries(NamedTuple):
    """Index entries to add with a batch, as parallel sequences (one item per entry)."""

    offsets: Sequence[int]
    """Absolute offsets of the indexed records."""
    positions: Sequence[int]
    """Their byte positions in the ``.log``."""
    max_timestamps: Sequence[int]
    """The segment's running max timestamp at each of them."""


NO_INDEX_ENTRIES = IndexEntries((), (), ())
_NO_HINTS: dict[int, tuple[int, int, bool]] = {}


class Segment:
    """A segment of a partition log.

    Thread-safety: one writer (append/truncate/write_indexes); any number of readers use
    ``state`` snapshots and the ``locate``/``slice``/``find_timestamp`` methods while holding
    a lease on ``file``.
    """

    __slots__ = (
        "_hints",
        "_indexes_on_disk",
        "_tail",
        "base_offset",
        "corrupt_end",
        "directory",
        "file",
        "first_timestamp",
        "interval",
        "no_index_files",
        "state",
    )

    def __init__(
        self,
        directory: Path,
        base_offset: int,
        file: SharedFile,
        state: SegmentState,
        *,
        interval: int,
        first_timestamp: int | None,
        corrupt_end: int | None = None,
    ) -> None:
        self.directory = directory
        self.base_offset = base_offset
        self.file = file
        self.state = state
        self.interval = interval
        self.first_timestamp = first_timestamp
        """Timestamp of the first record (for rolling by age), None if empty."""
        self.corrupt_end = corrupt_end
        """If set, offsets [state.next_offset, corrupt_end) are unreadable (damaged file)."""
        # offset -> (generation, position, exact): where the record with that offset (exact),
        # or the first one at or after it (not exact: read its header), starts; where the
        # last reads ended (one per reader keeping up), at most MAX_READ_HINTS, oldest first.
        # Until the first read ends here: the shared empty _NO_HINTS (never changed), not a
        # dict per segment (an idle partition is never read, issue 34).
        self._hints: dict[int, tuple[int, int, bool]] = _NO_HINTS
        self._indexes_on_disk: bytes | None = None
        """Digest of what the index files on disk hold, if known (see :meth:`write_indexes`)."""
        self._tail: tuple[int, int, bytes, int] | None = None
        """(generation, position, bytes, first offset or -1 if not known) of the last
        append if it was one ``bytes`` of at most :data:`TAIL_MAX_BYTES` (see
        :meth:`tail_bytes` and :meth:`read_tail`)."""
        self.no_index_files = False
        """Known to have no index files (new, or none found at recovery): a clean close
        writes none while it has no index entries (``write_indexes(keep_absent=True)``)."""

    @classmethod
    def create(cls, directory: Path, base_offset: int, interval: int) -> Segment:
        """Create the ``.log`` of a new, empty segment (an existing empty file is reused).

        Raises:
            StorageError: the file exists and is not empty, or cannot be created.
        """
        path = directory / segment_file_name(base_offset, LOG_SUFFIX)
        try:
            file = SharedFile.open(path, create=True)
            if os.fstat(file.fd).st_size:
                file.release()
                raise StorageError(f"{path} already exists and is not empty")
        except OSError as exc:
            raise StorageError(f"cannot create segment {path}: {exc}") from exc
        state = SegmentState(0, base_offset, NO_TIMESTAMP, OffsetIndex(), TimeIndex(), 0, 0)
        seg = cls(directory, base_offset, file, state, interval=interval, first_timestamp=None)
        seg.no_index_files = True
        return seg

    # -- names -------------------------------------------------------------------------------

    @property
    def log_path(self) -> Path:
        """Path of the ``.log`` file."""
        return self.directory / segment_file_name(self.base_offset, LOG_SUFFIX)

    @property
    def index_path(self) -> Path:
        """Path of the ``.index`` file."""
        return self.directory / segment_file_name(self.base_offset, INDEX_SUFFIX)

    @property
    def timeindex_path(self) -> Path:
        """Path of the ``.timeindex`` file."""
        return self.directory / segment_file_name(self.base_offset, TIMEINDEX_SUFFIX)

    @property
    def last_indexed_position(self) -> int:
        """Position of the last indexed record (0 if there is no entry)."""
        st = self.state
        return st.offset_index.positions[st.entries - 1] if st.entries else 0

    # -- writing (the log's writer only) ------------------------------------------------------

    def append(
        self,
        data: bytes | memoryview | list[bytes | memoryview],
        last_offset: int,
        max_timestamp: int,
        first_timestamp: int,
        entries: IndexEntries,
        size: int | None = None,
        first_offset: int | None = None,
    ) -> None:
        """Append whole records at the end of the ``.log`` and their index entries.

        ``data``: one buffer, or parts written back to back with one gathered write;
        ``size``: its length in bytes (computed if None); ``first_offset``: the first
        record's offset, if known (a reader's hint at the end of the segment becomes exact:
        the next read from there reads no header first).

        Raises:
            StorageError: the write failed (the file is cut back to its previous size).
        """
        st = self.state
        fd = self.file.fd
        if fd < 0:  # parked while the log was idle (IdleFiles): the one check it costs
            fd = self.file.unpark()
        try:
            write_all(fd, data, st.size)
        except OSError as exc:
            with contextlib.suppress(OSError):
                os.ftruncate(fd, st.size)
            raise StorageError(f"write to {self.log_path} failed: {exc}") from exc
        # Exactly ``bytes`` (immutable): a memoryview may be of a buffer reused later.
        self._tail = (
            (st.generation, st.size, data, -1 if first_offset is None else first_offset)
            if type(data) is bytes and len(data) <= TAIL_MAX_BYTES
            else None
        )
        index, timeindex = st.offset_index, st.time_index
        if entries.offsets:
            relative = list(map(sub, entries.offsets, repeat(self.base_offset)))
            index.extend(relative, entries.positions)
            timeindex.extend(entries.max_timestamps, relative)
        if self.first_timestamp is None:
            self.first_timestamp = first_timestamp
        hint = None if first_offset is None else self._hints.get(first_offset)
        if hint is not None and not hint[2] and hint[1] == st.size and hint[0] == st.generation:
            assert first_offset is not None
            # A reader that kept up stopped at the end: the record now there is the one
            # it reads next (no gap left by compaction to look for).
            self._hints[first_offset] = (hint[0], hint[1], True)
        self.state = SegmentState(
            st.size + (size if size is not None else _size(data)),
            last_offset + 1,
            max_timestamp if max_timestamp > st.max_timestamp else st.max_timestamp,
            index,
            timeindex,
            len(index),
            st.generation,
        )

    def truncate_to(self, offset: int) -> int:
        """Drop records with offset >= ``offset``; return the number of bytes cut.

        Raises:
            StorageError: the file could not be truncated.
        """
        st = self.state
        position, _ = self.locate(offset, st)
        if position >= st.size:
            return 0
        keep = st.offset_index.floor_for_position(position - 1, st.entries) + 1
        try:
            os.ftruncate(self.file.fd, position)
        except OSError as exc:
            raise StorageError(f"truncate of {self.log_path} failed: {exc}") from exc
        index = st.offset_index.truncated(keep)
        timeindex = st.time_index.truncated(keep)
        start = index.positions[keep - 1] if keep else 0
        running = timeindex.timestamps[keep - 1] if keep else NO_TIMESTAMP
        last_offset = None
        for _pos, off, ts, _epoch, _size in self.iter_headers(start, position):
            last_offset = off
            if ts > running:
                running = ts
        next_offset = self.base_offset if last_offset is None else last_offset + 1
        if position == 0:
            self.first_timestamp = None
        self._hints = _NO_HINTS
        self._tail = None
        self.state = SegmentState(
            position, next_offset, running, index, timeindex, keep, st.generation + 1
        )
        return st.size - position

    def tail_bytes(self, start: int, end: int, generation: int) -> bytes | None:
        """The file's bytes ``[start, end)`` if the last append (in ``generation``) wrote
        all of them, from memory; None if not. A reader keeping up reads just what the
        last append wrote: its answer then needs no file lease, and goes out with its head
        in one ``send`` instead of a ``send`` and a ``sendfile``."""
        tail = self._tail
        if tail is None or tail[0] != generation:
            return None
        position, data = tail[1], tail[2]
        if start < position or end > position + len(data):
            return None
        if start == position and end == position + len(data):
            return data
        return data[start - position : end - position]

    def read_tail(self, offset: int, max_bytes: int, st: SegmentState) -> tuple[int, bytes] | None:
        """``(position, bytes)`` of the last append if it starts at ``offset``, ends this
        segment as of ``st`` and fits ``max_bytes``: what :meth:`slice` then
        :meth:`tail_bytes` return for a reader keeping up whose bound is past it, without
        locating the records or a file lease; None if not (read as usual)."""
        tail = self._tail
        if (
            tail is None
            or tail[3] != offset
            or tail[0] != st.generation
            or tail[1] + len(tail[2]) != st.size
            or len(tail[2]) > max_bytes
        ):
            return None
        self._hint(st.next_offset, st.generation, st.size, False)  # as slice does
        return tail[1], tail[2]

    def note_indexes_on_disk(self, index: bytes, timeindex: bytes) -> None:
        """The index files hold these bytes (read at recovery)."""
        self._indexes_on_disk = _indexes_digest(index, timeindex)

    def write_indexes(self, *, keep_absent: bool = False) -> None:
        """Write the visible index entries to ``.index`` and ``.timeindex`` and fsync them,
        unless the files already hold exactly these bytes (an idle partition's clean close
        after a clean start: two file writes and fsyncs fewer, spec/storage.md §5), or, with
        ``keep_absent`` (a clean close), there are no entries and no files (spec §3)."""
        st = self.state
        if keep_absent and self.no_index_files and not st.entries:
            return
        index = st.offset_index.truncated(st.entries).to_bytes()
        timeindex = st.time_index.truncated(st.entries).to_bytes()
        digest = _indexes_digest(index, timeindex)
        if digest == self._indexes_on_disk:
            return
        self._indexes_on_disk = None  # unknown until both are written
        name = f"{self.directory}/{self.base_offset:020d}"  # str paths: a stop writes thousands
        write_file_durably(name + INDEX_SUFFIX, index)
        write_file_durably(name + TIMEINDEX_SUFFIX, timeindex)
        self._indexes_on_disk = digest
        self.no_index_files = False

    def fsync(self) -> None:
        """fdatasync the ``.log`` (the writer's: its file may be parked, then reopened).

        Raises:
            OSError: the fsync failed. LogClosedError, StorageError: a parked file could
                not be opened again.
        """
        fd = self.file.fd
        fdatasync(fd if fd >= 0 else self.file.unpark())

    def release(self) -> None:
        """Drop the segment's own reference to the ``.log`` descriptor."""
        self.file.release_owner()

    def seal(self, cache: OpenFileCache) -> None:
        """The segment is sealed: ``cache`` may close its file while no reader holds it."""
        self.file.seal(cache)

    def pin(self) -> None:
        """The segment takes appends again: keep its file open (reopening it if parked).

        Raises:
            StorageError: it cannot be opened again.
        """
        self.file.pin()

    def delete_files(self) -> None:
        """Unlink the segment's files (open descriptors stay valid)."""
        self.file.retire()
        for path in (self.log_path, self.index_path, self.timeindex_path):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)

    # -- reading (hold a lease on ``file``) ---------------------------------------------------

    def iter_headers(self, start: int, end: int) -> Iterator[tuple[int, int, int, int, int]]:
        """``(position, offset, timestamp, leader_epoch, size)`` of records in [start, end).

        Reads headers only, with ``pread`` in chunks; no CRC check. A header whose length
        field is absurd raises CodecError; a record running past ``end`` is still yielded
        (callers compare ``position + size`` with their bound). A file ending before
        ``end`` raises :class:`ShortSegmentFileError` (its callers would otherwise take
        the end of the scan for the end of the records).
        """
        fd = self.file.fd
        chunk = min(max(2 * self.interval, MIN_SCAN_CHUNK), MAX_SCAN_CHUNK)
        buf = b""
        buf_start = start
        pos = start
        while pos + HEADER_SIZE <= end:
            rel = pos - buf_start
            if rel + HEADER_SIZE > len(buf):
                buf = pread_exact(fd, min(chunk, end - pos), pos)
                buf_start = pos
                rel = 0
                if len(buf) < HEADER_SIZE:
                    raise ShortSegmentFileError(
                        f"{self.log_path} ends at {pos + len(buf)}, before the records the "
                        f"log counts up to {end}; retry (an fsync failure is being recovered)"
                    )
            offset, ts, epoch, size = peek_header(buf, rel)
            yield pos, offset, ts, epoch, size
            pos += size

    def locate(self, offset: int, st: SegmentState, after: int = 0) -> tuple[int, int]:
        """``(position, offset)`` of the first record with offset >= ``offset``.

        ``(st.size, st.next_offset)`` if the segment has no such record. ``after``: the
        position of a record known to have a lower offset (the scan starts there if the
        index knows nothing closer).
        """
        hint = self._hints.get(offset)
        if hint is not None and hint[0] == st.generation and hint[1] < st.size:
            if hint[2]:
                return hint[1], offset
            # Every record before the position has a lower offset; the first one there
            # may have a higher one (a gap left by compaction).
            head = pread_exact(self.file.fd, HEADER_SIZE, hint[1])
            if len(head) == HEADER_SIZE:
                found = peek_header(head, 0)[0]
                if found >= offset:
                    return hint[1], found
        i = st.offset_index.floor_for_offset(offset - self.base_offset, st.entries)
        start = max(st.offset_index.positions[i] if i >= 0 else 0, after)
        for pos, off, _ts, _epoch, _size in self.iter_headers(start, st.size):
            if off >= offset:
                return pos, off
        return st.size, st.next_offset

    def slice(
        self, offset: int, bound: int, max_bytes: int, st: SegmentState
    ) -> tuple[int, int, int, int] | None:
        """Byte range of the records to return for a read starting at ``offset``.

        Returns ``(start, end, first_offset, next_offset)`` covering whole records with
        offsets in [offset, bound), at most ``max_bytes`` unless the first record alone is
        larger; ``start == end`` if the first record at or after ``offset`` is >= bound.
        None if the segment has no record at or after ``offset``.
        """
        start, first = self.locate(offset, st)
        if start >= st.size:
            return None
        if first >= bound:
            return start, start, first, bound
        if bound >= st.next_offset:
            end_limit = st.size
            end_offset = st.next_offset
        else:
            # From the first record on: a reader near the HW reads a few records, which the
            # scan from the last index entry would reach only after ~30 headers.
            end_limit, _ = self.locate(bound, st, after=start)
            end_offset = bound
        if end_limit - start <= max_bytes:
            # The next read of a reader keeping up starts where this one ends: remember it
            # (it would otherwise scan the headers from the last index entry, ~30 small
            # records on every tailing fetch).
            self._hint(end_offset, st.generation, end_limit, False)
            return start, end_limit, first, end_offset
        limit = start + max_bytes
        i = st.offset_index.floor_for_position(limit, st.entries)
        scan = start
        if i >= 0 and st.offset_index.positions[i] > start:
            scan = st.offset_index.positions[i]
            if (limit - scan) * 8 <= max_bytes:
                # An indexed record starts close enough to the limit: end there without
                # reading any header (the slice is at least 7/8 of max_bytes).
                next_offset = self.base_offset + st.offset_index.relative_offsets[i]
                self._hint(next_offset, st.generation, scan, True)
                return start, scan, first, next_offset
        end = end_limit
        next_offset = end_offset
        for pos, off, _ts, _epoch, size in self.iter_headers(scan, end_limit):
            if pos + size > limit:
                if pos == start:  # the first record alone is bigger than max_bytes
                    end, next_offset = pos + size, off + 1
                else:
                    end, next_offset = pos, off
                    self._hint(off, st.generation, pos, True)
                break
        return start, end, first, next_offset

    def _hint(self, offset: int, generation: int, position: int, exact: bool) -> None:
        """Remember where a read ended (the next read of its reader starts there)."""
        hints = self._hints
        if hints is _NO_HINTS:
            hints = self._hints = {}
        hints.pop(offset, None)
        hints[offset] = (generation, position, exact)
        if len(hints) > MAX_READ_HINTS:
            del hints[next(iter(hints))]

    def find_timestamp(self, timestamp: int, st: SegmentState) -> int | None:
        """Offset of the first record whose (running max) timestamp is >= ``timestamp``."""
        if st.max_timestamp < timestamp:
            return None
        i = st.time_index.last_before(timestamp, st.entries)
        start = st.offset_index.positions[i] if i >= 0 else 0
        running = st.time_index.timestamps[i] if i >= 0 else NO_TIMESTAMP
        for _pos, off, ts, _epoch, _size in self.iter_headers(start, st.size):
            if ts > running:
                running = ts
            if running >= timestamp:
                return off
        return None


def batch_index_entries(
    first: int,
    ts: int,
    lens: list[int],
    uniform: bool,
    size: int,
    last_indexed: int,
    interval: int,
) -> IndexEntries:
    """Index entries for a batch of records with bodies ``lens`` appended at ``size``.

    Applies the rule of :func:`jetserver.storage.offset_index.index_points`; when every
    record has the same size (``uniform``) the entries are evenly spaced and computed
    without a scan.
    """
    n = len(lens)
    record = lens[0] + HEADER_SIZE
    if uniform:
        step = -(-interval // record)  # records between entries
        i0 = max(0, -(-(last_indexed + interval - size) // record))
        positions: Sequence[int] = range(size + i0 * record, size + n * record, step * record)
        offsets: Sequence[int] = range(first + i0, first + n, step)
    else:
        starts = list(accumulate(map(add, lens, repeat(HEADER_SIZE, n)), initial=size))
        points = index_points(last_indexed, interval, starts, n)
        positions = [starts[i] for i in points]
        offsets = [first + i for i in points]
    return IndexEntries(offsets, positions, [ts] * len(positions))


def _indexes_digest(index: bytes, timeindex: bytes) -> bytes:
    h = hashlib.blake2b(digest_size=16)
    h.update(len(index).to_bytes(8, "big"))
    h.update(index)
    h.update(timeindex)
    return h.digest()


def _size(data: bytes | memoryview | list[bytes | memoryview]) -> int:
    return sum(map(len, data)) if isinstance(data, list) else len(data)
