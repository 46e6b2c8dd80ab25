"""Opening a partition directory: find the segments, repair what a crash left behind and
report it (spec/storage.md, "Recovery").

Rules, in order:

1. Delete leftovers: ``*.cleaned`` (an interrupted compaction), ``*.tmp`` (an interrupted
   checkpoint write), and ``.index``/``.timeindex`` files without a ``.log``.
2. Read and remove the ``clean-shutdown`` marker.
3. For each segment in base-offset order: a segment whose base offset is below the previous
   segment's next offset is a leftover of an interrupted compaction merge and is deleted.
   Otherwise load its indexes; CRC-scan from its last index entry to the end of the file, or
   the whole file if the indexes are missing, corrupt or do not match the log, or if it is the
   last segment and the shutdown was not clean. Rebuild indexes that differ from the scan.
4. A bad record in the last segment is a torn tail: the file is cut there and the bytes cut
   are reported. A bad record in an earlier segment (fsynced when it was rolled, so not a
   torn write) is reported and its offsets up to the next segment are refused with
   CorruptRangeError; the file is left as it is.
5. Checkpoints: the log start offset is the larger of its checkpoint and the first segment's
   base offset; the high watermark is clamped into [log start, log end]; a missing or corrupt
   leader-epoch checkpoint is rebuilt from the records' epochs, and one that lacks the
   epochs of the last records (a new epoch is written without fsync) is extended from them.
   A corrupt checkpoint is reported, never fatal.
"""

from __future__ import annotations

import contextlib
import itertools
import os
from collections.abc import Callable
from pathlib import Path

import attrs

from jetsdk.codec.errors import CodecError
from jetsdk.codec.record import HEADER_SIZE, peek_header
from jetserver.storage.checkpoint import (
    CLEAN_SHUTDOWN_FILE,
    HIGH_WATERMARK_FILE,
    LEADER_EPOCH_FILE,
    LOG_START_OFFSET_FILE,
    read_checkpoint,
    read_single_value,
    remove_file,
    write_checkpoint,
)
from jetserver.storage.config import LogConfig
from jetserver.storage.epoch_cache import EpochEntry
from jetserver.storage.errors import CorruptFileError, StorageError
from jetserver.storage.files import (
    CLEANED_SUFFIX,
    INDEX_SUFFIX,
    LOG_SUFFIX,
    TIMEINDEX_SUFFIX,
    TMP_SUFFIX,
    SharedFile,
    fsync,
    fsync_directory,
    parse_segment_file_name,
    pread_exact,
    read_file_if_exists,
    segment_file_name,
)
from jetserver.storage.offset_index import OffsetIndex
from jetserver.storage.scan import ScanOutcome, crc_scan
from jetserver.storage.segment import NO_TIMESTAMP, Segment, SegmentState
from jetserver.storage.time_index import TimeIndex

LOCK_FILE = ".lock"
QUARANTINE_SUFFIX = ".quarantined"
"""Appended to a segment file recovery cannot place in the log (kept for inspection)."""


@attrs.frozen
class RecoveryReport:
    """What :meth:`Log.open` found and repaired. Every problem is also one line in ``notes``."""

    directory: str
    """The partition directory."""
    clean_shutdown: bool
    """True if the previous ``close`` completed (its marker matched the active segment)."""
    segments: int
    """Segments in the log after recovery."""
    log_start_offset: int
    """Log start offset after recovery."""
    log_end_offset: int
    """Log end offset after recovery."""
    high_watermark: int
    """High watermark after recovery."""
    hw_checkpoint: int | None = None
    """The high-watermark checkpoint as found on disk, before clamping (None: missing or
    corrupt). A replica reads it at start without touching the file again."""
    clean_marker_kept: bool = False
    """The clean-shutdown marker was left in place (opened with ``keep_clean_marker``)."""
    bytes_truncated: int = 0
    """Bytes cut from torn tails (the last segment)."""
    truncated_files: tuple[str, ...] = ()
    """Names of ``.log`` files that were cut."""
    indexes_rebuilt: int = 0
    """Number of ``.index``/``.timeindex`` files rebuilt from the log."""
    rebuilt_files: tuple[str, ...] = ()
    """Their names."""
    corrupt_files: tuple[str, ...] = ()
    """Files found damaged (repaired, rebuilt or, for old segments, fenced off)."""
    deleted_files: tuple[str, ...] = ()
    """Leftovers removed (``.cleaned``, ``.tmp``, orphan indexes, overlapping segments)."""
    unreadable_ranges: tuple[tuple[int, int], ...] = ()
    """``[start, end)`` offset ranges that reads refuse with CorruptRangeError."""
    notes: tuple[str, ...] = ()
    """Human-readable lines, one per problem found."""
    fresh: bool = False
    """The directory was empty (a new partition): nothing was there to recover or check,
    and the new empty segment needed no fsync of its own (spec/storage.md §9)."""

    @property
    def ok(self) -> bool:
        """True if nothing had to be cut, fenced off or reported corrupt."""
        return not (self.bytes_truncated or self.corrupt_files or self.unreadable_ranges)

    def summary(self) -> str:
        """A short multi-line description."""
        lines = [
            f"recovered {self.directory}: {self.segments} segment(s), offsets "
            f"[{self.log_start_offset}, {self.log_end_offset}), hw {self.high_watermark}, "
            f"clean shutdown: {self.clean_shutdown}",
            f"bytes truncated: {self.bytes_truncated}, indexes rebuilt: {self.indexes_rebuilt}, "
            f"corrupt files: {len(self.corrupt_files)}, deleted leftovers: "
            f"{len(self.deleted_files)}, unreadable ranges: {list(self.unreadable_ranges)}",
        ]
        lines.extend(f"  - {note}" for note in self.notes)
        return "\n".join(lines)


@attrs.define
class _Findings:
    bytes_truncated: int = 0
    truncated: list[str] = attrs.Factory(list)
    rebuilt: list[str] = attrs.Factory(list)
    corrupt: list[str] = attrs.Factory(list)
    deleted: list[str] = attrs.Factory(list)
    unreadable: list[tuple[int, int]] = attrs.Factory(list)
    notes: list[str] = attrs.Factory(list)
    last_epoch: int = -1
    """Leader epoch of the last record of the last segment holding records (-1: none)."""
    dir_changed: bool = False
    marker_kept: bool = False
    listed: frozenset[str] = frozenset()
    """The directory's files at the start (an index file not among them is not opened)."""


@attrs.define
class Recovered:
    """The state :func:`recover` hands to the Log."""

    segments: list[Segment]
    log_start_offset: int
    high_watermark: int
    epochs: list[EpochEntry]
    epochs_need_write: bool
    report: RecoveryReport


def recover(
    directory: Path,
    config: LogConfig,
    *,
    keep_clean_marker: bool = False,
    sync_dir: Callable[[Path], None] = fsync_directory,
) -> Recovered:
    """Load and repair the partition in ``directory`` (which must exist).

    ``keep_clean_marker``: the clean-shutdown marker is read but not deleted
    (:attr:`RecoveryReport.clean_marker_kept`); the Log deletes it before its first
    truncation (spec/storage.md §9, step 2). ``sync_dir`` makes the directory's changes
    durable (step 7); a caller opening many logs passes one that only records the
    directory and fsyncs them all at once before it uses any of them (§9, step 8).

    Raises:
        StorageError: the directory cannot be listed or a segment file cannot be opened.
    """
    try:
        names = sorted(os.listdir(directory))
    except OSError as exc:
        raise StorageError(f"cannot list {directory}: {exc}") from exc
    found = _Findings(listed=frozenset(names))
    fresh = not names  # a new partition: nothing to recover (spec/storage.md §9)

    logs: set[int] = set()
    index_files: dict[int, list[str]] = {}
    for name in names:
        if name.endswith(CLEANED_SUFFIX) or name.endswith(TMP_SUFFIX):
            _unlink(directory, name, found, "leftover of an interrupted write")
            continue
        parsed = parse_segment_file_name(name)
        if parsed is None:
            continue
        base, suffix = parsed
        if suffix == LOG_SUFFIX:
            logs.add(base)
        else:
            index_files.setdefault(base, []).append(name)
    for base, files in index_files.items():
        if base not in logs:
            for name in files:
                _unlink(directory, name, found, "index without a .log")

    clean = _read_clean_marker(directory, found, keep_clean_marker)

    bases = sorted(logs)
    segments: list[Segment] = []
    try:
        for i, base in enumerate(bases):
            is_last = i == len(bases) - 1
            if segments and base < segments[-1].state.next_offset:
                if is_last:
                    # Compaction never merges the active segment, so this is not one of its
                    # leftovers: keep the file for inspection, out of the log.
                    _quarantine(directory, base, found)
                    break
                for suffix in (LOG_SUFFIX, INDEX_SUFFIX, TIMEINDEX_SUFFIX):
                    name = segment_file_name(base, suffix)
                    if (directory / name).exists():
                        _unlink(directory, name, found, "overlaps the previous segment")
                continue
            next_base = None if is_last else bases[i + 1]
            segments.append(
                _load_segment(
                    directory, base, config.index_interval_bytes, is_last, clean, next_base, found
                )
            )
        log_start_ckpt = _read_value(directory, LOG_START_OFFSET_FILE, found)
        if not segments:
            segments.append(
                Segment.create(directory, log_start_ckpt or 0, config.index_interval_bytes)
            )
            found.dir_changed = True
    except BaseException:
        for seg in segments:
            seg.release()
        raise

    leo = segments[-1].state.next_offset
    if segments[-1].state.size == 0:
        leo = max(leo, segments[-1].base_offset)
    log_start = max(log_start_ckpt or 0, segments[0].base_offset)
    if log_start > leo:
        found.notes.append(f"log start offset {log_start} is past the log end {leo}; using {leo}")
        log_start = leo
    # A missing checkpoint reads as 0 (a partition opened fresh writes none): rewriting it
    # then would make a restart on a full disk fail for want of one small file.
    if (log_start_ckpt or 0) != log_start or LOG_START_OFFSET_FILE in found.corrupt:
        write_checkpoint(directory, LOG_START_OFFSET_FILE, [(log_start,)])

    hw_ckpt = _read_value(directory, HIGH_WATERMARK_FILE, found)
    hw = min(max(hw_ckpt if hw_ckpt is not None else log_start, log_start), leo)

    epochs, need_write = _read_epochs(directory, segments, found, LEADER_EPOCH_FILE in names)

    if found.dir_changed:
        sync_dir(directory)
    matched = clean is not None and clean == (segments[-1].base_offset, segments[-1].state.size)
    if found.marker_kept and not matched:  # it describes nothing here: delete it as usual
        try:
            remove_file(directory, CLEAN_SHUTDOWN_FILE)
        except OSError as exc:
            raise StorageError(f"cannot remove {directory / CLEAN_SHUTDOWN_FILE}: {exc}") from exc
        found.marker_kept = False
    report = RecoveryReport(
        directory=str(directory),
        clean_shutdown=matched,
        segments=len(segments),
        log_start_offset=log_start,
        log_end_offset=leo,
        high_watermark=hw,
        hw_checkpoint=hw_ckpt,
        clean_marker_kept=found.marker_kept,
        bytes_truncated=found.bytes_truncated,
        truncated_files=tuple(found.truncated),
        indexes_rebuilt=len(found.rebuilt),
        rebuilt_files=tuple(found.rebuilt),
        corrupt_files=tuple(found.corrupt),
        deleted_files=tuple(found.deleted),
        unreadable_ranges=tuple(found.unreadable),
        notes=tuple(found.notes),
        fresh=fresh,
    )
    return Recovered(segments, log_start, hw, epochs, need_write, report)


def _unlink(directory: Path, name: str, found: _Findings, why: str) -> None:
    try:
        os.unlink(directory / name)
    except FileNotFoundError:
        return
    except OSError as exc:
        found.notes.append(f"could not delete {name} ({why}): {exc}")
        return
    found.deleted.append(name)
    found.notes.append(f"deleted {name}: {why}")
    found.dir_changed = True


def _quarantine(directory: Path, base: int, found: _Findings) -> None:
    name = segment_file_name(base, LOG_SUFFIX)
    try:
        os.replace(directory / name, directory / (name + QUARANTINE_SUFFIX))
    except OSError as exc:
        raise StorageError(f"cannot move {directory / name} aside: {exc}") from exc
    for suffix in (INDEX_SUFFIX, TIMEINDEX_SUFFIX):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(directory / segment_file_name(base, suffix))
    found.corrupt.append(name)
    found.notes.append(
        f"{name} overlaps the previous segment; renamed to {name}{QUARANTINE_SUFFIX}"
    )
    found.dir_changed = True


def _read_clean_marker(directory: Path, found: _Findings, keep: bool) -> tuple[int, int] | None:
    marker: tuple[int, int] | None = None
    try:
        entries = read_checkpoint(directory, CLEAN_SHUTDOWN_FILE, 2)
        if entries is not None and len(entries) == 1:
            marker = (entries[0][0], entries[0][1])
        elif entries is not None:
            found.notes.append(f"{CLEAN_SHUTDOWN_FILE}: {len(entries)} entries, ignored")
    except (CorruptFileError, OSError) as exc:
        found.notes.append(f"{CLEAN_SHUTDOWN_FILE} unreadable, treated as a crash: {exc}")
    if keep and marker is not None:
        found.marker_kept = True
        return marker
    try:
        remove_file(directory, CLEAN_SHUTDOWN_FILE)
    except OSError as exc:
        raise StorageError(f"cannot remove {directory / CLEAN_SHUTDOWN_FILE}: {exc}") from exc
    return marker


def _read_value(directory: Path, name: str, found: _Findings) -> int | None:
    try:
        return read_single_value(directory, name)
    except (CorruptFileError, OSError) as exc:
        found.corrupt.append(name)
        found.notes.append(f"{name} is corrupt, ignored: {exc}")
        return None


def _read_bytes(path: str) -> bytes | None:
    return read_file_if_exists(path)


def _load_indexes(
    seg_name: str, index_bytes: bytes | None, time_bytes: bytes | None, size: int
) -> tuple[OffsetIndex | None, TimeIndex | None, str | None, bool]:
    """Parse the index files; (index, timeindex, problem, corrupt)."""
    if index_bytes is None or time_bytes is None:
        return None, None, "missing", False
    try:
        index = OffsetIndex.from_bytes(index_bytes, path=seg_name + INDEX_SUFFIX)
        timeindex = TimeIndex.from_bytes(time_bytes, path=seg_name + TIMEINDEX_SUFFIX)
    except CorruptFileError as exc:
        return None, None, str(exc), True
    if list(index.relative_offsets) != list(timeindex.relative_offsets):
        return None, None, "offset and time index entries differ", True
    if len(index) and index.positions[-1] >= size:
        return None, None, "index points past the end of the log", True
    return index, timeindex, None, False


def _load_segment(
    directory: Path,
    base: int,
    interval: int,
    is_last: bool,
    clean: tuple[int, int] | None,
    next_base: int | None,
    found: _Findings,
) -> Segment:
    log_name = segment_file_name(base, LOG_SUFFIX)
    index_name = segment_file_name(base, INDEX_SUFFIX)
    time_name = segment_file_name(base, TIMEINDEX_SUFFIX)
    try:  # a str: the Path was 7 % of LogState.load at a restart (issue 34)
        file = SharedFile.open(f"{directory}/{log_name}")
    except OSError as exc:
        raise StorageError(f"cannot open {directory / log_name}: {exc}") from exc
    try:
        fd = file.fd
        size = os.fstat(fd).st_size
        listed = found.listed  # str paths: see read_checkpoint
        index_bytes = _read_bytes(f"{directory}/{index_name}") if index_name in listed else None
        time_bytes = _read_bytes(f"{directory}/{time_name}") if time_name in listed else None
        index, timeindex, problem, corrupt = _load_indexes(
            log_name[: -len(LOG_SUFFIX)], index_bytes, time_bytes, size
        )
        trusted = index is not None and (not is_last or clean == (base, size))
        outcome: ScanOutcome | None = None
        if trusted and index is not None and timeindex is not None:
            k = len(index)
            expected = base + index.relative_offsets[-1] if k else None
            outcome = crc_scan(
                fd,
                size,
                base,
                interval,
                start=index.positions[-1] if k else 0,
                index=index,
                timeindex=timeindex,
                running_max=timeindex.timestamps[-1] if k else NO_TIMESTAMP,
                min_offset=expected,
            )
            if k and outcome.first_offset != expected:
                problem, corrupt, outcome = "index does not match the log", True, None
        if outcome is None:
            outcome = crc_scan(fd, size, base, interval)
        if corrupt:
            found.corrupt.append(index_name)
            found.notes.append(f"{index_name}: {problem}; rebuilt from the log")
        new_index = outcome.index.to_bytes()
        new_time = outcome.timeindex.to_bytes()
        if new_index != (index_bytes or b"") or new_time != (time_bytes or b""):
            found.rebuilt.extend((index_name, time_name))

        if outcome.last_offset is not None:
            found.last_epoch = outcome.last_epoch
        corrupt_end: int | None = None
        valid_end = outcome.valid_end
        next_offset = outcome.last_offset + 1 if outcome.last_offset is not None else base
        if outcome.error is not None and is_last:
            cut = size - valid_end
            try:
                os.ftruncate(fd, valid_end)
                fsync(fd)
            except OSError as exc:
                raise StorageError(f"cannot truncate {directory / log_name}: {exc}") from exc
            found.bytes_truncated += cut
            found.truncated.append(log_name)
            found.notes.append(f"{log_name}: cut {cut} bytes of torn tail ({outcome.error})")
        elif outcome.error is not None and next_base is not None:
            corrupt_end = next_base
            found.corrupt.append(log_name)
            found.unreadable.append((next_offset, next_base))
            found.notes.append(
                f"{log_name}: {outcome.error}; offsets [{next_offset}, {next_base}) are "
                f"unreadable (file kept for inspection)"
            )
        first_ts: int | None = None
        if valid_end >= HEADER_SIZE:
            try:
                first_ts = peek_header(pread_exact(fd, HEADER_SIZE, 0))[1]
            except CodecError:
                first_ts = None
        seg = Segment(
            directory,
            base,
            file,
            SegmentState(
                valid_end,
                next_offset,
                outcome.max_timestamp,
                outcome.index,
                outcome.timeindex,
                len(outcome.index),
                0,
            ),
            interval=interval,
            first_timestamp=first_ts,
            corrupt_end=corrupt_end,
        )
        if index_bytes is not None and time_bytes is not None:
            seg.note_indexes_on_disk(index_bytes, time_bytes)
        seg.no_index_files = index_bytes is None and time_bytes is None
        if not is_last and (index_name in found.rebuilt):
            seg.write_indexes()
        return seg
    except BaseException:
        file.release()
        raise


def _read_epochs(
    directory: Path, segments: list[Segment], found: _Findings, listed: bool
) -> tuple[list[EpochEntry], bool]:
    """Epoch entries from the checkpoint, or rebuilt from the records; (entries, rewrite?).
    ``listed``: the directory listing holds the checkpoint (else it is not opened: a
    partition never led at an epoch above 0 has none, and a restart opens thousands)."""
    problem: str | None = None
    try:
        raw = read_checkpoint(directory, LEADER_EPOCH_FILE, 2) if listed else None
    except (CorruptFileError, OSError) as exc:
        raw, problem = None, str(exc)
    entries: list[EpochEntry] = []
    if raw is not None:
        entries = [EpochEntry(e, s) for e, s in raw]
        for prev, cur in itertools.pairwise(entries):
            if cur.epoch <= prev.epoch or cur.start_offset <= prev.start_offset:
                problem = f"{LEADER_EPOCH_FILE}: entries are not increasing"
                break
    has_records = any(seg.state.size for seg in segments)
    if problem is not None:
        found.corrupt.append(LEADER_EPOCH_FILE)
        found.notes.append(f"{problem}; rebuilt from the records")
    elif raw is None and has_records:
        found.notes.append(f"{LEADER_EPOCH_FILE} missing; rebuilt from the records")
    elif raw is not None and found.last_epoch > (entries[-1].epoch if entries else -1):
        extended = _extend_epochs(entries, segments)
        found.notes.append(
            f"{LEADER_EPOCH_FILE} lacked epochs of the last records; extended from them to "
            f"{' '.join(f'{e.epoch}@{e.start_offset}' for e in extended)}"
        )
        write_checkpoint(
            directory, LEADER_EPOCH_FILE, [(e.epoch, e.start_offset) for e in extended]
        )
        return extended, True
    else:
        return entries, False
    rebuilt = _epochs_from_log(segments)
    write_checkpoint(directory, LEADER_EPOCH_FILE, [(e.epoch, e.start_offset) for e in rebuilt])
    return rebuilt, True


def _extend_epochs(entries: list[EpochEntry], segments: list[Segment]) -> list[EpochEntry]:
    """``entries`` (a checkpoint written before the last records' epochs were) extended
    with the first offset of each later epoch the records carry, as
    :meth:`~jetserver.storage.epoch_cache.LeaderEpochCache.assign` would have added them
    (an entry starting at or past a new one is dropped). Scans the segments from the last
    one whose first record is of an epoch the checkpoint holds (normally the last)."""
    latest = entries[-1].epoch if entries else -1
    first = len(segments) - 1
    while first > 0:
        st = segments[first].state
        try:
            head = next(segments[first].iter_headers(0, st.size), None) if st.size else None
        except CodecError:
            head = None
        if head is not None and head[3] <= latest:
            break
        first -= 1
    out = list(entries)
    for seg in segments[first:]:
        st = seg.state
        if not st.size:
            continue
        try:
            for _pos, offset, _ts, epoch, _size in seg.iter_headers(0, st.size):
                if epoch > latest:
                    while out and out[-1].start_offset >= offset:
                        out.pop()
                    out.append(EpochEntry(epoch, offset))
                    latest = epoch
        except CodecError:
            continue
    return out


def _epochs_from_log(segments: list[Segment]) -> list[EpochEntry]:
    entries: list[EpochEntry] = []
    latest = -1
    for seg in segments:
        st = seg.state
        if not st.size:
            continue
        try:
            first = next(seg.iter_headers(0, st.size))
            start = st.offset_index.positions[st.entries - 1] if st.entries else 0
            last = None
            for header in seg.iter_headers(start, st.size):
                last = header
            if last is not None and first[3] == last[3]:
                headers = iter([first])
            else:
                headers = seg.iter_headers(0, st.size)
            for _pos, offset, _ts, epoch, _size in headers:
                if epoch > latest:
                    entries.append(EpochEntry(epoch, offset))
                    latest = epoch
        except CodecError:
            continue
    return entries
