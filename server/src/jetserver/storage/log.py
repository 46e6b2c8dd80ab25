"""The partition log: the storage engine's one public object (spec/storage.md)."""

from __future__ import annotations

import fcntl
import os
import struct
from bisect import bisect_right
from collections.abc import Callable, Sequence
from itertools import accumulate
from pathlib import Path
from types import TracebackType

from jetsdk.codec.errors import CodecError
from jetsdk.codec.record import HEADER_SIZE, MAX_BODY_BYTES, check_crc, peek_header
from jetserver.storage.checkpoint import CLEAN_SHUTDOWN_FILE, write_checkpoint
from jetserver.storage.clock import DELETION_CLOCK
from jetserver.storage.config import LogConfig
from jetserver.storage.epoch_cache import MAX_EPOCH, LeaderEpochCache
from jetserver.storage.errors import (
    CorruptRangeError,
    InvalidArgumentError,
    InvalidRecordsError,
    LogClosedError,
    OffsetOutOfRange,
    StorageError,
)
from jetserver.storage.files import SEALED_FILES, FileLease, OpenFileCache, fdatasync
from jetserver.storage.framing import frame_batch_sizes
from jetserver.storage.maintenance import LogMaintenance
from jetserver.storage.offset_index import U32_MAX, index_points
from jetserver.storage.read_slice import ReadSlice, empty_slice
from jetserver.storage.recovery import LOCK_FILE, recover
from jetserver.storage.segment import (
    NO_INDEX_ENTRIES,
    NO_TIMESTAMP,
    IndexEntries,
    Segment,
    SegmentInfo,
    batch_index_entries,
)

_I64_MIN = -(2**63)
_I64_MAX = 2**63 - 1


class Log(LogMaintenance):
    """One partition's log in one directory: segments, indexes, checkpoints.

    Open with :meth:`Log.open`. Offsets are assigned by :meth:`append` (or come with the
    records in :meth:`append_raw`); :meth:`read` returns byte ranges of stored records up to
    the high watermark; :meth:`flush` fsyncs with group commit.

    Thread-safety: writer operations (``append``, ``append_raw``, ``truncate_to``, ``roll``,
    ``enforce_retention``, ``close``) serialize on an internal lock and are meant for one
    writer task. ``read``, ``offset_for_timestamp`` and the properties may be called from any
    thread at any time. ``flush`` may be called from any number of threads (they share
    fsyncs). ``compact`` may run in a background thread; it holds the writer lock only to swap
    files in.

    The class is split over modules: :class:`~jetserver.storage.log_state.LogState` (fields, HW,
    rolling), :class:`~jetserver.storage.maintenance.LogMaintenance` (``truncate_to``,
    ``enforce_retention``, ``compact``) and this one (open/close, append, flush, read).
    """

    # -- opening and closing -----------------------------------------------------------------

    @classmethod
    def open(
        cls,
        directory: Path | str,
        config: LogConfig = LogConfig(),  # noqa: B008  (frozen, so a shared default is safe)
        *,
        clock: Callable[[], int] = DELETION_CLOCK,
        lock: bool = True,
        file_cache: OpenFileCache = SEALED_FILES,
        keep_clean_marker: bool = False,
    ) -> Log:
        """Open (creating if needed) and recover the log in ``directory``.

        Corrupt data never raises: it is repaired or fenced off and described in
        :attr:`recovery`. ``clock`` (nanoseconds) drives age-based rolling, retention and
        tombstone expiry (default: the wall clock guarded against forward jumps,
        :data:`~jetserver.storage.clock.DELETION_CLOCK`). ``lock``: hold an exclusive lock
        on the directory's ``.lock`` file while open (one more open file); a caller that
        already owns the whole data directory (the server) passes False. ``file_cache``
        bounds how many of the sealed segments' files stay open (default: the process's
        :data:`~jetserver.storage.files.SEALED_FILES`). ``keep_clean_marker``: leave
        the clean-shutdown marker in place until the first truncation (appends alone never
        make it name the active segment's size again; a server opening thousands of
        partitions saves an unlink and a directory fsync each, spec/storage.md §9).

        Raises:
            StorageError: the directory cannot be created, listed or locked (another Log has
                it open), or a segment file cannot be opened.
        """
        path = directory if isinstance(directory, Path) else Path(directory)  # no re-parse
        try:
            if not os.path.isdir(path):  # one stat: a server opens thousands at its start
                path.mkdir(parents=True, exist_ok=True)
            lock_fd = os.open(path / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644) if lock else -1
        except OSError as exc:
            raise StorageError(f"cannot open log directory {path}: {exc}") from exc
        if lock_fd >= 0:
            try:
                fcntl.flock(lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as exc:
                os.close(lock_fd)
                raise StorageError(f"{path} is in use by another open Log") from exc
        log = cls(path, config, clock, lock_fd, file_cache)
        try:
            log._load(keep_clean_marker=keep_clean_marker)
        except BaseException:
            if lock_fd >= 0:
                os.close(lock_fd)
            raise
        return log

    def _load(self, synced: int | None = None, *, keep_clean_marker: bool = False) -> None:
        """Recover the directory and take what it holds (``synced``: a reload after a failed
        fsync, nothing above it counts as flushed and the log stays poisoned)."""
        try:
            found = recover(self._dir, self._config, keep_clean_marker=keep_clean_marker)
        except OSError as exc:
            raise StorageError(f"recovery of {self._dir} failed: {exc}") from exc
        self._segments = tuple(found.segments)
        self._bases = [seg.base_offset for seg in self._segments]
        active = self._segments[-1]
        self._leo = max(active.state.next_offset, active.base_offset)
        self._log_start = found.log_start_offset
        hw = found.high_watermark  # a reload after a failed fsync keeps the HW readers see
        self._hw = hw if synced is None else min(max(self._hw, hw), self._leo)
        self._hw_on_disk = found.report.hw_checkpoint
        self._marker_on_disk = found.report.clean_marker_kept
        self._last_ts = max(seg.state.max_timestamp for seg in self._segments)
        self.epochs = LeaderEpochCache(self._dir, lambda: self._leo, found.epochs)
        try:
            self.epochs.truncate_from_end(self._leo)
            self.epochs.truncate_from_start(self._log_start)
            if not found.report.clean_shutdown:
                # After a clean close the marker names the active segment at its current
                # size, which that close fsynced: nothing to sync (spec/storage.md §9.7).
                active.fsync()
        except OSError as exc:
            for seg in self._segments:
                seg.release()
            raise StorageError(f"recovery of {self._dir} failed: {exc}") from exc
        for seg in self._segments[:-1]:
            seg.seal(self._file_cache)
        self._commit.rebase(self._leo if synced is None else min(synced, self._leo))
        self.recovery = found.report

    def close(self, *, sync_marker: bool = True) -> None:
        """Write the indexes and checkpoints, fsync, release the files (idempotent).

        Read slices already handed out stay valid until they are closed. Without
        ``sync_marker`` the clean-shutdown marker is written but not fsynced: the caller
        syncs the file system once for many logs (a server's stop; spec/storage.md §5).

        Raises:
            StorageError: a final write failed (the files are released anyway; the next open
                recovers as after a crash).
        """
        with self._write_lock:
            if self._closed:
                return
            active = self._segments[-1]
            try:
                active.write_indexes(keep_absent=True)  # unless they hold them already
                commit = self._commit
                if commit.failure is not None or commit.flushed_offset < self._leo:
                    active.fsync()  # else the last flush covered every record
                self.checkpoint_high_watermark()  # unless the file holds it already
                write_checkpoint(
                    self._dir,
                    CLEAN_SHUTDOWN_FILE,
                    [(active.base_offset, active.state.size)],
                    sync=sync_marker,
                )
            except OSError as exc:
                raise StorageError(f"close of {self._dir} failed: {exc}") from exc
            finally:
                self._release_all()

    def _release_all(self) -> None:
        with self._lock:
            self._closed = True
            segments, self._segments = self._segments, ()
            self._bases = []
        for seg in segments:
            seg.release()
        if self._lock_fd >= 0:
            os.close(self._lock_fd)
        self._commit.wake()

    def _crash(self) -> None:
        """Tests only: drop the files as a killed process would (no index, no checkpoint)."""
        with self._write_lock:
            if not self._closed:
                self._release_all()

    def __enter__(self) -> Log:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # -- properties -------------------------------------------------------------------------

    @property
    def directory(self) -> Path:
        """The partition directory."""
        return self._dir

    @property
    def config(self) -> LogConfig:
        """The settings the log was opened with."""
        return self._config

    @property
    def closed(self) -> bool:
        """True after :meth:`close`."""
        return self._closed

    @property
    def log_start_offset(self) -> int:
        """First offset a read may ask for."""
        return self._log_start

    @property
    def log_end_offset(self) -> int:
        """LEO: the offset the next appended record gets."""
        return self._leo

    @property
    def high_watermark(self) -> int:
        """Offsets below this are committed and served by :meth:`read` by default."""
        return self._hw

    @property
    def flushed_offset(self) -> int:
        """Every offset below this is on disk (fsynced)."""
        return self._commit.flushed_offset

    @property
    def sync_failure(self) -> str | None:
        """Why the log is poisoned (an fsync failed; see :meth:`recover_unsynced`), or None."""
        return self._commit.failure

    @property
    def size_bytes(self) -> int:
        """Bytes of records in all segments."""
        return sum(seg.state.size for seg in self._segments)

    @property
    def segment_count(self) -> int:
        """Number of segments (including the active one)."""
        return len(self._segments)

    @property
    def fsync_count(self) -> int:
        """Number of fsyncs :meth:`flush` has issued (for tests and metrics)."""
        return self._commit.fsync_count

    def segments(self) -> tuple[SegmentInfo, ...]:
        """A description of every segment, oldest first."""
        return tuple(
            SegmentInfo(
                seg.base_offset,
                seg.state.next_offset,
                seg.state.size,
                None if seg.state.max_timestamp == NO_TIMESTAMP else seg.state.max_timestamp,
                seg.state.entries,
                seg.corrupt_end,
            )
            for seg in self._segments
        )

    # -- appending ---------------------------------------------------------------------------

    def append(
        self, bodies: Sequence[bytes], timestamp_ns: int, leader_epoch: int
    ) -> tuple[int, int]:
        """Append records (bodies from ``jetsdk.codec.record.encode_body``) at the LEO.

        The records get consecutive offsets and one timestamp: ``timestamp_ns``, or the last
        timestamp in the log if that is larger (timestamps never decrease). Rolls the active
        segment first if the batch would overfill it, or if ``segment_max_age_s`` passed
        between the segment's first record and this batch's timestamp.

        Returns:
            ``(first_offset, timestamp_used)``; for an empty batch ``(LEO, timestamp)``.

        Raises:
            InvalidRecordsError: ``leader_epoch`` is below the latest epoch, or a body is
                larger than the record format allows.
            InvalidArgumentError: timestamp or epoch out of range.
            StorageError: the write failed (nothing was appended); DiskFull: refused by
                the space guard (free space below the floor).
        """
        if not _I64_MIN <= timestamp_ns <= _I64_MAX or not 0 <= leader_epoch <= MAX_EPOCH:
            raise InvalidArgumentError(f"bad timestamp {timestamp_ns} or epoch {leader_epoch}")
        with self._write_lock:
            self._check_open()
            ts = timestamp_ns if timestamp_ns > self._last_ts else self._last_ts
            n = len(bodies)
            first = self._leo
            if n == 0:
                return first, ts
            if leader_epoch < self.epochs.latest_epoch:
                raise InvalidRecordsError(
                    f"leader epoch {leader_epoch} is below the latest {self.epochs.latest_epoch}"
                )
            try:
                data, lens, uniform = frame_batch_sizes(first, ts, leader_epoch, bodies)
            except struct.error as exc:
                raise InvalidRecordsError(f"cannot frame the batch: {exc}") from exc
            if len(data) > MAX_BODY_BYTES and max(lens) > MAX_BODY_BYTES:
                raise InvalidRecordsError(f"a record body is over {MAX_BODY_BYTES} bytes")
            seg = self._prepare_segment(len(data), first, first + n - 1, ts)
            st = seg.state
            entries = NO_INDEX_ENTRIES
            interval = self._config.index_interval_bytes
            last_indexed = seg.last_indexed_position
            if st.size + len(data) - HEADER_SIZE - last_indexed >= interval:
                entries = batch_index_entries(
                    first, ts, lens, uniform, st.size, last_indexed, interval
                )
            seg.append(data, first + n - 1, ts, ts, entries)
            with self._lock:
                self._leo = first + n
            self._last_ts = ts
            if leader_epoch != self.epochs.latest_epoch:
                self.epochs.assign(leader_epoch, first)
            return first, ts

    def append_raw(self, data: bytes) -> int:
        """Append already-framed records (replication); return the new LEO.

        Every whole record's CRC is verified; offsets must be >= LEO and increasing (gaps are
        allowed: the leader's log may be compacted); leader epochs must not decrease. A
        trailing partial record is ignored (the returned LEO says where to fetch next).
        Timestamps are kept as they are.

        Raises:
            InvalidRecordsError: a bad CRC, an offset or epoch out of order, or a batch that
                cannot fit one segment. Nothing is appended then.
            StorageError: the write failed; DiskFull: below the free-space floor.
        """
        view = memoryview(data)
        n = len(view)
        with self._write_lock:
            self._check_open()
            prev = self._leo - 1
            latest_epoch = self.epochs.latest_epoch
            offsets: list[int] = []
            starts: list[int] = []
            stamps: list[int] = []
            new_epochs: list[tuple[int, int]] = []
            pos = 0
            while n - pos >= HEADER_SIZE:
                try:
                    offset, ts, epoch, size = peek_header(view, pos)
                    if n - pos < size:
                        break
                    check_crc(view, pos)
                except CodecError as exc:
                    raise InvalidRecordsError(f"record at byte {pos}: {exc}") from exc
                if offset <= prev:
                    raise InvalidRecordsError(
                        f"record at byte {pos} has offset {offset}, expected > {prev}"
                    )
                if epoch < latest_epoch:
                    raise InvalidRecordsError(
                        f"record {offset} has epoch {epoch} below the latest {latest_epoch}"
                    )
                if epoch > latest_epoch:
                    new_epochs.append((epoch, offset))
                    latest_epoch = epoch
                offsets.append(offset)
                starts.append(pos)
                stamps.append(ts)
                prev = offset
                pos += size
            if not offsets:
                return self._leo
            whole = bytes(view[:pos]) if pos < n or not isinstance(data, bytes) else data
            seg = self._prepare_segment(pos, offsets[0], offsets[-1], max(stamps))
            st = seg.state
            # Time-index entries carry the segment's running max timestamp (spec §4).
            running = list(accumulate(stamps, max, initial=st.max_timestamp))[1:]
            abs_starts = [st.size + s for s in starts]
            points = index_points(
                seg.last_indexed_position, self._config.index_interval_bytes, abs_starts
            )
            entries = IndexEntries(
                [offsets[i] for i in points],
                [abs_starts[i] for i in points],
                [running[i] for i in points],
            )
            seg.append(whole, offsets[-1], running[-1], stamps[0], entries)
            with self._lock:
                self._leo = offsets[-1] + 1
            self._last_ts = max(self._last_ts, running[-1])
            for epoch, offset in new_epochs:
                self.epochs.assign(epoch, offset)
            return self._leo

    def _prepare_segment(
        self, batch_bytes: int, first_offset: int, last_offset: int, timestamp: int
    ) -> Segment:
        """The segment a batch goes to, rolling first if needed (writer lock held).

        Age is measured like Kafka's ``segment.ms``: from the active segment's first record
        timestamp to the incoming batch's timestamp (not the wall clock).
        """
        if last_offset - first_offset > U32_MAX or batch_bytes > U32_MAX:
            raise InvalidRecordsError("batch too large for one segment")
        if self.space_guard is not None:
            self.space_guard(batch_bytes)  # DiskFull below the free-space floor
        seg = self._segments[-1]
        st = seg.state
        if st.size == 0:
            if last_offset - seg.base_offset > U32_MAX:
                self._replace_empty_active(first_offset)
                return self._segments[-1]
            return seg
        cfg = self._config
        if (
            st.size + batch_bytes > cfg.segment_max_bytes
            or st.size + batch_bytes > U32_MAX
            or last_offset - seg.base_offset > U32_MAX
            or (
                seg.first_timestamp is not None
                and timestamp - seg.first_timestamp >= cfg.segment_max_age_s * 1e9
            )
        ):
            self._roll(first_offset)
        return self._segments[-1]

    def roll(self) -> bool:
        """Start a new active segment at the LEO now; False if the active one is empty.

        Raises:
            StorageError: a file operation failed.
        """
        with self._write_lock:
            self._check_open()
            if self._segments[-1].state.size == 0:
                return False
            self._roll(self._leo)
            return True

    # -- flushing (group commit) -------------------------------------------------------------

    def flush(self, upto: int | None = None) -> int:
        """Block until every offset below ``upto`` (default: the LEO now) is fsynced.

        Group commit: one fsync covers everything appended before it started; a caller that
        arrives while an fsync is running waits for it and starts another only if that one
        did not cover its offsets. Call from a worker thread in async code.

        Returns:
            :attr:`flushed_offset` (>= ``upto`` clamped to the LEO).

        Raises:
            LogClosedError: the log is closed. SyncFailedError: this fsync or an earlier
                one failed; nothing above :attr:`flushed_offset` can be made durable until
                :meth:`recover_unsynced` cut it off.
        """
        return self._flush(upto, wait=True)  # type: ignore[return-value]  # never None

    def flush_unless_busy(self, upto: int | None = None) -> int | None:
        """:meth:`flush`, or None if it would wait for another thread's fsync (event loop)."""
        return self._flush(upto, wait=False)

    def _flush(self, upto: int | None, *, wait: bool) -> int | None:
        def target() -> int:
            self._check_open()
            return self._leo if upto is None else min(upto, self._leo)

        def begin() -> tuple[int, Callable[[], None]]:
            with self._lock:
                self._check_open()
                seg = self._segments[-1]
                covered = self._leo
                lease = FileLease(seg.file)

            def sync() -> None:
                try:
                    fdatasync(seg.file.fd)
                except OSError as exc:
                    raise StorageError(f"fsync of {seg.log_path} failed: {exc}") from exc
                finally:
                    lease.release()

            return covered, sync

        return self._commit.flush(target, begin, wait=wait)

    # -- reading -----------------------------------------------------------------------------

    def read(self, offset: int, max_bytes: int, max_offset: int | None = None) -> ReadSlice:
        """Stored records from ``offset`` on, as a byte range of one segment file.

        Returns whole records with offsets >= ``offset`` and < ``max_offset`` (default: the
        high watermark; never above the LEO), at most ``max_bytes`` bytes unless the first
        record alone is bigger (then exactly that record). The slice comes from one segment:
        read again at ``next_offset`` for more. An empty slice means nothing is available
        yet; its ``next_offset`` may skip a compaction gap. Close the slice when done.

        Raises:
            OffsetOutOfRange: ``offset`` is below the log start or above the LEO.
            CorruptRangeError: ``offset`` lies in a range recovery fenced off.
            InvalidArgumentError: negative ``max_bytes``.
            LogClosedError: the log is closed.
        """
        if max_bytes < 0:
            raise InvalidArgumentError(f"max_bytes must be >= 0, got {max_bytes}")
        skip_before = -1  # base offsets <= this were found empty past ``offset``
        while True:
            with self._lock:
                self._check_open()
                leo = self._leo
                if offset < self._log_start or offset > leo:
                    raise OffsetOutOfRange(offset, self._log_start, leo)
                bound = self._hw if max_offset is None else min(max_offset, leo)
                if offset >= bound:
                    return empty_slice(offset, offset)
                segments = self._segments
                i = max(bisect_right(self._bases, max(offset, skip_before)) - 1, 0)
                while i < len(segments):
                    seg = segments[i]
                    st = seg.state
                    if st.size and offset < st.next_offset and seg.base_offset > skip_before:
                        break
                    end = seg.corrupt_end
                    if end is not None and st.next_offset <= offset < end:
                        raise CorruptRangeError(st.next_offset, end, str(seg.log_path))
                    i += 1
                else:
                    return empty_slice(offset, bound)
                lease = FileLease(seg.file)
            try:
                found = seg.slice(offset, bound, max_bytes, st)
            except CodecError as exc:
                lease.release()
                raise CorruptRangeError(offset, st.next_offset, str(seg.log_path)) from exc
            except BaseException:
                lease.release()
                raise
            if found is None:  # nothing at or after ``offset`` here after all
                lease.release()
                skip_before = seg.base_offset
                continue
            start, end_pos, first, next_offset = found
            if start == end_pos:
                lease.release()
                return empty_slice(offset, next_offset)
            return ReadSlice(seg.file.fd, start, end_pos - start, first, next_offset, lease)

    def offset_for_timestamp(self, timestamp_ns: int, max_offset: int | None = None) -> int | None:
        """The first offset whose record has a timestamp >= ``timestamp_ns``.

        Only offsets in [log start, ``max_offset``) count (default: the high watermark).
        None if there is no such record (yet).
        """
        with self._lock:
            self._check_open()
            bound = self._hw if max_offset is None else min(max_offset, self._leo)
            log_start = self._log_start
            segments = self._segments
        for seg in segments:
            st = seg.state
            if st.max_timestamp < timestamp_ns:
                continue
            with self._lock:
                if seg.file.closed:
                    continue
                try:
                    lease = FileLease(seg.file)
                except LogClosedError:  # parked, and deleted by retention since
                    continue
            try:
                found = seg.find_timestamp(timestamp_ns, st)
            except CodecError:
                found = None
            finally:
                lease.release()
            if found is None:
                continue
            found = max(found, log_start)
            return found if found < bound else None
        return None
