"""Key compaction of a partition log (spec/storage.md, "Compaction").

The cleanable range is the longest run of segments from the start of the log that are not
the active segment, lie wholly below the high watermark and are not damaged. Within it:

* the latest record of each key (by offset, within the range) is kept, older ones dropped;
* keyless records are always kept;
* a tombstone (a key with an empty value) is kept while it is the latest record of its key
  and its timestamp is at most ``delete_retention_s`` old, then dropped; so is a record
  with a ``Jet-TTL`` counted from its expiry (spec/storage.md §11.2: it reads as a
  tombstone written then);
* kept records are copied byte for byte: offsets (and CRCs) never change, so gaps in the
  offsets are normal.

Consecutive segments are merged while their combined size fits ``segment_max_bytes``
(and their offsets fit u32 relative offsets); the result is named by the first segment's base
offset. Work happens in two passes without any lock (a key -> latest-offset map, then the
rewrite into ``<base>.log.cleaned`` etc.); the swap is done by the Log under its writer
lock, in an order that recovery can finish after a crash.
"""

from __future__ import annotations

import contextlib
import io
import os
from bisect import bisect_right
from collections.abc import Iterator, Sequence
from pathlib import Path

import attrs

from jetsdk.codec.errors import CodecError
from jetsdk.codec.record import HEADER_SIZE, Record, decode_record, peek_header
from jetsdk.codec.ttl import dead_since_ns
from jetserver.storage.config import LogConfig
from jetserver.storage.files import (
    CLEANED_SUFFIX,
    LOG_SUFFIX,
    SharedFile,
    fsync,
    fsync_directory,
    pread_exact,
    segment_file_name,
    traced_create,
    write_file_durably,
)
from jetserver.storage.offset_index import U32_MAX, OffsetIndex
from jetserver.storage.segment import NO_TIMESTAMP, Segment, SegmentState
from jetserver.storage.time_index import TimeIndex

_WRITE_BUFFER = 1024 * 1024
_READ_CHUNK = 4 * 1024 * 1024


@attrs.frozen
class CompactionReport:
    """What one :meth:`Log.compact` run did."""

    segments_before: int = 0
    """Segments in the whole log before the run."""
    segments_after: int = 0
    """Segments in the whole log after the run."""
    segments_cleaned: int = 0
    """Segments that were rewritten (merged or cleaned)."""
    records_before: int = 0
    """Records in the cleanable range before the run."""
    records_after: int = 0
    """Records in the cleanable range after the run."""
    bytes_before: int = 0
    """Bytes in the cleanable range before the run."""
    bytes_after: int = 0
    """Bytes in the cleanable range after the run."""
    tombstones_dropped: int = 0
    """Tombstones (and expired ``Jet-TTL`` records) removed because they were dead for
    longer than ``delete_retention_s``."""
    skipped: str | None = None
    """Why nothing was attempted (compaction disabled, nothing cleanable), or None."""
    aborted: str | None = None
    """Why the rewrite was thrown away (the log changed underneath, a record failed its
    CRC), or None if it was swapped in."""


@attrs.define
class KeyMap:
    """The first pass: latest offset per key, and per-segment counts."""

    latest: dict[bytes, int]
    """Key -> offset of its latest record in the cleanable range."""
    records: list[int]
    """Records per segment."""
    keyed: list[int]
    """Keyed records per segment."""
    expired_tombstones: list[int]
    """Tombstones older than delete_retention_s per segment."""


def build_key_map(
    segments: Sequence[tuple[Segment, SegmentState]], *, now_ns: int, delete_retention_ns: int
) -> KeyMap:
    """Read every record of ``segments`` (CRC-verified). Raises CodecError on damage."""
    latest: dict[bytes, int] = {}
    records: list[int] = []
    keyed: list[int] = []
    expired: list[int] = []
    for seg, st in segments:
        n = k = e = 0
        for rec in _records(seg, st):
            n += 1
            if rec.key is not None:
                k += 1
                latest[rec.key] = rec.offset
                dead = dead_since_ns(rec.key, rec.value, rec.timestamp, rec.headers)
                if dead is not None and now_ns - dead > delete_retention_ns:
                    e += 1
        records.append(n)
        keyed.append(k)
        expired.append(e)
    return KeyMap(latest, records, keyed, expired)


def plan_groups(
    segments: Sequence[tuple[Segment, SegmentState]], key_map: KeyMap, segment_max_bytes: int
) -> list[list[int]]:
    """Indices of the segments to rewrite, grouped into the output segments.

    A group of one segment is kept only if it has a record to drop.
    """
    bases = [seg.base_offset for seg, _ in segments]
    latest_in = [0] * len(segments)
    for offset in key_map.latest.values():
        latest_in[bisect_right(bases, offset) - 1] += 1
    groups: list[list[int]] = []
    current: list[int] = []
    size = 0
    for i, (seg, st) in enumerate(segments):
        if current:
            first_base = segments[current[0]][0].base_offset
            if size + st.size > segment_max_bytes or st.next_offset - 1 - first_base > U32_MAX:
                groups.append(current)
                current, size = [], 0
        current.append(i)
        size += st.size
        del seg
    if current:
        groups.append(current)
    return [
        g
        for g in groups
        if len(g) > 1 or key_map.keyed[g[0]] > latest_in[g[0]] or key_map.expired_tombstones[g[0]]
    ]


@attrs.define
class CleanedGroup:
    """A rewritten group, ready to swap in."""

    sources: list[tuple[Segment, SegmentState]]
    """The segments it replaces, with the state they had when read."""
    segment: Segment
    """The new segment (its files still carry the ``.cleaned`` suffix)."""
    records_in: int
    records_out: int
    bytes_in: int
    bytes_out: int
    tombstones_dropped: int

    @property
    def cleaned_paths(self) -> tuple[Path, Path, Path]:
        """The ``.log.cleaned``, ``.index.cleaned`` and ``.timeindex.cleaned`` paths."""
        seg = self.segment
        return (
            seg.log_path.with_name(seg.log_path.name + CLEANED_SUFFIX),
            seg.index_path.with_name(seg.index_path.name + CLEANED_SUFFIX),
            seg.timeindex_path.with_name(seg.timeindex_path.name + CLEANED_SUFFIX),
        )

    def discard(self) -> None:
        """Delete the cleaned files and release the new segment's descriptor."""
        self.segment.release()
        for path in self.cleaned_paths:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)


def write_group(
    directory: Path,
    sources: list[tuple[Segment, SegmentState]],
    key_map: KeyMap,
    *,
    interval: int,
    now_ns: int,
    delete_retention_ns: int,
) -> CleanedGroup:
    """Write the cleaned segment for ``sources`` into ``.cleaned`` files and fsync them.

    Raises:
        CodecError: a source record is damaged. OSError: the write failed.
    """
    base = sources[0][0].base_offset
    log_path = directory / (segment_file_name(base, LOG_SUFFIX) + CLEANED_SUFFIX)
    index = OffsetIndex()
    timeindex = TimeIndex()
    latest = key_map.latest
    records_in = records_out = bytes_in = dropped_tombstones = 0
    position = 0
    last_indexed = 0
    running = NO_TIMESTAMP
    first_ts: int | None = None
    last_offset: int | None = None
    fd = os.open(log_path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        traced_create(fd)
        out = io.BufferedWriter(io.FileIO(fd, "w", closefd=False), _WRITE_BUFFER)
        for seg, st in sources:
            bytes_in += st.size
            for rec, view in _records_with_bytes(seg, st):
                records_in += 1
                if rec.key is not None:
                    if latest.get(rec.key) != rec.offset:
                        continue
                    dead = dead_since_ns(rec.key, rec.value, rec.timestamp, rec.headers)
                    if dead is not None and now_ns - dead > delete_retention_ns:
                        dropped_tombstones += 1
                        continue
                if rec.timestamp > running:
                    running = rec.timestamp
                if position - last_indexed >= interval:
                    index.append(rec.offset - base, position)
                    timeindex.append(running, rec.offset - base)
                    last_indexed = position
                if first_ts is None:
                    first_ts = rec.timestamp
                out.write(view)
                position += len(view)
                records_out += 1
                last_offset = rec.offset
        out.flush()
        fsync(fd)
    except BaseException:
        os.close(fd)
        os.unlink(log_path)
        raise
    file = SharedFile(fd, log_path)
    state = SegmentState(
        position,
        base if last_offset is None else last_offset + 1,
        running,
        index,
        timeindex,
        len(index),
        0,
    )
    segment = Segment(directory, base, file, state, interval=interval, first_timestamp=first_ts)
    group = CleanedGroup(
        sources, segment, records_in, records_out, bytes_in, position, dropped_tombstones
    )
    try:
        _, index_path, time_path = group.cleaned_paths
        write_file_durably(index_path, index.to_bytes())
        write_file_durably(time_path, timeindex.to_bytes())
    except BaseException:
        group.discard()
        raise
    return group


def swap_files(directory: Path, group: CleanedGroup) -> None:
    """Move a cleaned group's files into place (the caller holds the log's writer lock).

    Order (each step leaves a state recovery repairs): unlink the first source's indexes;
    rename the cleaned log over the first source's log; rename the cleaned indexes; unlink
    the other sources (recovery deletes them if a crash leaves them overlapping); fsync the
    directory.
    """
    first = group.sources[0][0]
    log_c, index_c, time_c = group.cleaned_paths
    for path in (first.index_path, first.timeindex_path):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
    fsync_directory(directory)
    os.replace(log_c, first.log_path)
    os.replace(index_c, first.index_path)
    os.replace(time_c, first.timeindex_path)
    group.segment.file.path = os.fspath(first.log_path)
    for seg, _st in group.sources[1:]:
        seg.delete_files()
    fsync_directory(directory)


@attrs.define
class Rewrite:
    """The cleaned groups of one run, ready to swap in, and the run's counts."""

    groups: list[CleanedGroup]
    records_before: int
    bytes_before: int

    def report(
        self, segments_before: int, segments_after: int, aborted: str | None
    ) -> CompactionReport:
        """The run's report, once the swap was done (or abandoned: ``aborted``, which
        counts as nothing cleaned)."""
        groups = self.groups if aborted is None else []
        return CompactionReport(
            segments_before=segments_before,
            segments_after=segments_after,
            segments_cleaned=sum(len(g.sources) for g in groups),
            records_before=self.records_before,
            records_after=self.records_before - sum(g.records_in - g.records_out for g in groups),
            bytes_before=self.bytes_before,
            bytes_after=self.bytes_before - sum(g.bytes_in - g.bytes_out for g in groups),
            tombstones_dropped=sum(g.tombstones_dropped for g in groups),
            aborted=aborted,
        )


def rewrite(
    directory: Path,
    cleanable: list[tuple[Segment, SegmentState]],
    config: LogConfig,
    now_ns: int,
) -> Rewrite | CompactionReport:
    """Both passes over ``cleanable`` (no lock needed: the caller holds file leases).

    Returns the cleaned groups, or a report saying why nothing was done.

    Raises:
        OSError: writing a cleaned file failed (nothing is left behind).
    """
    if not cleanable:
        return CompactionReport(skipped="no segment is wholly below the high watermark")
    retention_ns = int(config.delete_retention_s * 1e9)
    bytes_before = sum(st.size for _, st in cleanable)
    try:
        key_map = build_key_map(cleanable, now_ns=now_ns, delete_retention_ns=retention_ns)
    except CodecError as exc:
        return CompactionReport(aborted=f"damaged: {exc}")
    groups = plan_groups(cleanable, key_map, config.segment_max_bytes)
    cleaned: list[CleanedGroup] = []
    try:
        for group in groups:
            cleaned.append(
                write_group(
                    directory,
                    [cleanable[i] for i in group],
                    key_map,
                    interval=config.index_interval_bytes,
                    now_ns=now_ns,
                    delete_retention_ns=retention_ns,
                )
            )
    except CodecError as exc:
        for done in cleaned:
            done.discard()
        return CompactionReport(aborted=f"damaged: {exc}")
    except BaseException:
        for done in cleaned:
            done.discard()
        raise
    return Rewrite(cleaned, sum(key_map.records), bytes_before)


def replace(
    current: tuple[Segment, ...], cleaned: list[CleanedGroup]
) -> tuple[tuple[Segment, ...], list[Segment]] | None:
    """The segment list with the cleaned groups in place, and the segments they replace.

    None if any source segment is gone, changed or became the active segment since it
    was read (the rewrite must then be thrown away).
    """
    index = {id(seg): i for i, seg in enumerate(current[:-1])}
    for group in cleaned:
        for seg, st in group.sources:
            if id(seg) not in index or seg.state is not st:
                return None
    new_list: list[Segment | None] = list(current)
    replaced: list[Segment] = []
    for group in cleaned:
        new_list[index[id(group.sources[0][0])]] = group.segment
        for seg, _st in group.sources[1:]:
            new_list[index[id(seg)]] = None
        replaced.extend(seg for seg, _st in group.sources)
    return tuple(seg for seg in new_list if seg is not None), replaced


def _records(seg: Segment, st: SegmentState) -> Iterator[Record]:
    for rec, _view in _records_with_bytes(seg, st):
        yield rec


def _records_with_bytes(seg: Segment, st: SegmentState) -> Iterator[tuple[Record, memoryview]]:
    """Decode the segment's records with ``pread`` in chunks.

    Not mmap: a truncation racing with compaction would turn a read past the new end of
    file into SIGBUS; ``pread`` just comes back short, which is reported as damage (the
    swap is abandoned anyway because the segment changed).
    """
    fd = seg.file.fd
    pos = 0
    while pos < st.size:
        want = min(_READ_CHUNK, st.size - pos)
        buf = pread_exact(fd, want, pos)
        if len(buf) < HEADER_SIZE:
            raise CodecError(f"{seg.log_path} is shorter than expected", reason="truncated")
        size = peek_header(buf)[3]
        if size > len(buf):  # one record bigger than the chunk
            buf = pread_exact(fd, size, pos)
        with memoryview(buf) as mv:
            at = 0
            end_of_buf = len(buf)
            while end_of_buf - at >= HEADER_SIZE and at + peek_header(mv, at)[3] <= end_of_buf:
                rec, end = decode_record(mv, at, verify=True)
                view = mv[at:end]
                try:
                    yield rec, view
                finally:
                    view.release()
                at = end
        if at == 0:
            raise CodecError(
                f"{seg.log_path}: record at byte {pos} is cut short", reason="truncated"
            )
        pos += at
