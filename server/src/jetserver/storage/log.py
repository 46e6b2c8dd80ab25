"""The partition log: the storage engine's one public object (spec/storage.md)."""

from __future__ import annotations

import fcntl
import os
from collections.abc import Callable, Sequence
from pathlib import Path

from jetserver.storage.appender import Appender
from jetserver.storage.checkpoint import CLEAN_SHUTDOWN_FILE, write_checkpoint
from jetserver.storage.clock import DELETION_CLOCK
from jetserver.storage.compaction import CompactionReport
from jetserver.storage.config import LogConfig
from jetserver.storage.epoch_cache import LeaderEpochCache
from jetserver.storage.errors import InvalidArgumentError, StorageError
from jetserver.storage.files import (
    SEALED_FILES,
    FileLease,
    OpenFileCache,
    fdatasync,
    fsync_directory,
)
from jetserver.storage.framing import Body
from jetserver.storage.group_commit import COVERED, PendingSync, Timed
from jetserver.storage.idle_files import ACTIVE_FILES, IdleFiles
from jetserver.storage.log_state import LogState
from jetserver.storage.maintenance import Maintenance
from jetserver.storage.read_slice import ReadSlice
from jetserver.storage.reader import Reader
from jetserver.storage.recovery import LOCK_FILE, RecoveryReport
from jetserver.storage.segment import NO_TIMESTAMP, SegmentInfo


class Log:
    """One partition's log in one directory: segments, indexes, checkpoints.

    Open with :meth:`Log.open`. Offsets are assigned by :meth:`append` (or come with the
    records in :meth:`append_raw`); :meth:`read` returns byte ranges of stored records up to
    the high watermark; :meth:`flush` fsyncs with group commit.

    Thread-safety: writer operations (``append``, ``append_raw``, ``truncate_to``, ``roll``,
    ``enforce_retention``, ``close``) serialize on an internal lock, for one writer task.
    ``read``, ``offset_for_timestamp``, the properties and ``flush`` (shared fsyncs) from any
    thread; ``compact`` in a background thread (the writer lock only to swap files in).

    Composed of parts with one job each, around one
    :class:`~jetserver.storage.log_state.LogState` (segments, offsets, locks, checkpoints):
    an :class:`~jetserver.storage.appender.Appender` (``append``, ``append_raw``, ``roll``),
    a :class:`~jetserver.storage.reader.Reader` (``read``, ``offset_for_timestamp``) and
    :class:`~jetserver.storage.maintenance.Maintenance` (``truncate_to``,
    ``enforce_retention``, ``compact``, ``recover_unsynced``, ``restart_at``). This class
    opens and closes the log, flushes it and answers the properties.
    """

    def __init__(self, state: LogState, lock_fd: int) -> None:
        # Use Log.open().
        self._state = state
        self._lock_fd = lock_fd
        self._appender = Appender(state)
        self._reader = Reader(state)
        self._maintenance = Maintenance(state)

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
        idle_files: IdleFiles = ACTIVE_FILES,
        keep_clean_marker: bool = False,
        sync_dir: Callable[[Path], None] = fsync_directory,
    ) -> Log:
        """Open (creating if needed) and recover the log in ``directory``.

        Corrupt data never raises: it is repaired or fenced off and described in
        :attr:`recovery`. ``clock`` (nanoseconds) drives age-based rolling, retention and
        tombstone expiry (default: the wall clock guarded against forward jumps,
        :data:`~jetserver.storage.clock.DELETION_CLOCK`). ``lock``: hold an exclusive lock
        on the directory's ``.lock`` file while open (one more open file); a caller that
        already owns the whole data directory (the server) passes False. ``file_cache``
        bounds how many of the sealed segments' files stay open (default: the process's
        :data:`~jetserver.storage.files.SEALED_FILES`); ``idle_files`` parks the active
        segment's file while the log is idle (default: the process's
        :data:`~jetserver.storage.idle_files.ACTIVE_FILES`). ``keep_clean_marker``: leave
        the clean-shutdown marker in place until the first truncation (appends alone never
        make it name the active segment's size again; a server opening thousands of
        partitions saves an unlink and a directory fsync each, spec/storage.md §9).
        ``sync_dir``: makes the directory's changes at recovery durable (default: fsync it
        now); a caller opening many logs may record the directory instead and fsync them
        all at once, before it uses any of the logs (spec/storage.md §9, step 8).

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
        state = LogState(path, config, clock, file_cache, idle_files)
        try:
            state.load(keep_clean_marker=keep_clean_marker, sync_dir=sync_dir)
        except BaseException:
            if lock_fd >= 0:
                os.close(lock_fd)
            raise
        return cls(state, lock_fd)

    def close(self, *, sync_marker: bool = True) -> None:
        """Write the indexes and checkpoints, fsync, release the files (idempotent).

        Read slices already handed out stay valid until they are closed. Without
        ``sync_marker`` the clean-shutdown marker is written but not fsynced: the caller
        syncs the file system once for many logs (a server's stop; spec/storage.md §5).

        Raises:
            StorageError: a final write failed (the files are released anyway; the next open
                recovers as after a crash).
        """
        state = self._state
        with state.write_lock:
            if state.closed:
                return
            active = state.segments[-1]
            try:
                state.epochs.write_pending()  # a new epoch whose write was deferred
                active.write_indexes(keep_absent=True)  # unless they hold them already
                commit = state.commit
                if commit.failure is not None or commit.flushed_offset < state.leo:
                    active.fsync()  # else the last flush covered every record
                state.checkpoint_high_watermark()  # unless the file holds it already
                write_checkpoint(
                    state.dir,
                    CLEAN_SHUTDOWN_FILE,
                    [(active.base_offset, active.state.size)],
                    sync=sync_marker,
                )
            except OSError as exc:
                raise StorageError(f"close of {state.dir} failed: {exc}") from exc
            finally:
                self._release_all()

    def _release_all(self) -> None:
        self._state.release_all()
        if self._lock_fd >= 0:
            os.close(self._lock_fd)

    def abandon(self) -> None:
        """Release the files without writing anything, as a killed process would (no index,
        no checkpoint, no clean-shutdown marker): the next open recovers as after a crash.
        For a log that must not be used (its directory did not sync at open)."""
        with self._state.write_lock:
            if not self._state.closed:
                self._state.epochs.drop_pending()  # a killed process would not write it
                self._release_all()

    def _crash(self) -> None:
        """Tests only: drop the files as a killed process would (:meth:`abandon`)."""
        self.abandon()

    def __enter__(self) -> Log:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- properties -------------------------------------------------------------------------

    @property
    def directory(self) -> Path:
        """The partition directory."""
        return self._state.dir

    @property
    def config(self) -> LogConfig:
        """The settings the log was opened with."""
        return self._state.config

    def update_config(self, config: LogConfig) -> None:
        """Use ``config`` from now on (a stream update): appends roll, and retention and
        compaction remove, by the new settings from their next run.
        ``index_interval_bytes`` cannot change (the indexes on disk are built with it).

        Raises:
            InvalidArgumentError: ``config`` has another ``index_interval_bytes``.
        """
        if config.index_interval_bytes != self._state.config.index_interval_bytes:
            raise InvalidArgumentError("index_interval_bytes cannot change on an open log")
        self._state.config = config  # one reference swap: readers see old or new whole

    @property
    def closed(self) -> bool:
        """True after :meth:`close`."""
        return self._state.closed

    @property
    def recovery(self) -> RecoveryReport:
        """What :meth:`open` found and repaired (or the reload of :meth:`recover_unsynced`)."""
        return self._state.recovery

    @property
    def epochs(self) -> LeaderEpochCache:
        """The leader-epoch cache (KIP-101): assign, latest_epoch, end_offset_for."""
        return self._state.epochs

    @property
    def space_guard(self) -> Callable[[int], None] | None:
        """Called by ``append`` and ``append_raw`` with the bytes they are about to write;
        raises DiskFull to refuse them (a server sets
        :meth:`jetserver.storage.space.DiskSpace.check`)."""
        return self._appender.space_guard

    @space_guard.setter
    def space_guard(self, guard: Callable[[int], None] | None) -> None:
        self._appender.space_guard = guard

    @property
    def log_start_offset(self) -> int:
        """First offset a read may ask for."""
        return self._state.log_start

    @property
    def log_end_offset(self) -> int:
        """LEO: the offset the next appended record gets."""
        return self._state.leo

    @property
    def high_watermark(self) -> int:
        """Offsets below this are committed and served by :meth:`read` by default."""
        return self._state.hw

    def ends(self) -> tuple[int, int, int]:
        """The high watermark, log start and LEO at once (one call, not three properties:
        a tailing consumer's answer per message)."""
        state = self._state
        return state.hw, state.log_start, state.leo

    @property
    def flushed_offset(self) -> int:
        """Every offset below this is on disk (fsynced)."""
        return self._state.commit.flushed_offset

    @property
    def sync_failure(self) -> str | None:
        """Why the log is poisoned (an fsync failed; see :meth:`recover_unsynced`), or None."""
        return self._state.commit.failure

    @property
    def size_bytes(self) -> int:
        """Bytes of records in all segments."""
        return sum(seg.state.size for seg in self._state.segments)

    @property
    def segment_count(self) -> int:
        """Number of segments (including the active one)."""
        return len(self._state.segments)

    @property
    def fsync_count(self) -> int:
        """Number of fsyncs :meth:`flush` has issued (for tests and metrics)."""
        return self._state.commit.fsync_count

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
            for seg in self._state.segments
        )

    def set_high_watermark(self, hw: int) -> int:
        """Set the high watermark, clamped into [log start, LEO]; return the value set."""
        return self._state.set_high_watermark(hw)

    @property
    def checkpointed_high_watermark(self) -> int | None:
        """The HW that recovery would read from the checkpoint file now (None: unknown,
        until it is written); a missing file reads as the log start."""
        return self._state.hw_on_disk

    def checkpoint_high_watermark(self) -> None:
        """Write the high watermark to ``high-watermark-checkpoint`` atomically, unless the
        file already holds it (an idle partition's close: two fsyncs fewer).

        Raises:
            StorageError: the write failed.
        """
        self._state.checkpoint_high_watermark()

    # -- appending ---------------------------------------------------------------------------

    def append(
        self, bodies: Sequence[Body], timestamp_ns: int, leader_epoch: int
    ) -> tuple[int, int]:
        """Append records (bodies from ``jetsdk.codec.record.encode_body``) at the LEO.

        A body may be given in two parts, ``(head, tail)``: the record holds their
        concatenation, framed around them without joining them (the tail may be a view).

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
                the space guard (free space below the floor); InvariantViolation: the log's
                state broke an invariant (a bug; nothing was appended).
        """
        return self._appender.append(bodies, timestamp_ns, leader_epoch)

    def append_one(self, body: Body, timestamp_ns: int, leader_epoch: int) -> tuple[int, int]:
        """:meth:`append` of the one record ``body``, a small one framed and written
        directly (:meth:`Appender.append_one`): the same bytes, result and errors."""
        return self._appender.append_one(body, timestamp_ns, leader_epoch)

    def append_raw(self, data: bytes | memoryview) -> int:
        """Append already-framed records (replication); return the new LEO.

        Every whole record's CRC is verified; offsets must be >= LEO and increasing (gaps are
        allowed: the leader's log may be compacted); leader epochs must not decrease. A
        trailing partial record is ignored (the returned LEO says where to fetch next).
        Timestamps are kept as they are.

        Raises:
            InvalidRecordsError: a bad CRC, an offset or epoch out of order, or a batch that
                cannot fit one segment. Nothing is appended then.
            StorageError: the write failed; DiskFull: below the free-space floor;
                InvariantViolation: the log's state broke an invariant (a bug; nothing was
                appended).
        """
        return self._appender.append_raw(data)

    def roll(self) -> bool:
        """Start a new active segment at the LEO now; False if the active one is empty.

        Raises:
            StorageError: a file operation failed.
        """
        return self._appender.roll()

    # -- removing records --------------------------------------------------------------------

    def truncate_to(self, offset: int) -> None:
        """Drop every record with offset >= ``offset``; the LEO becomes ``offset``.

        Used by followers to cut a divergent tail. Below the log start, the whole log is
        dropped and restarts empty at ``offset``. The leader-epoch cache is truncated too;
        the high watermark and flushed offset are clamped. The cut is fsynced.

        Raises:
            InvalidArgumentError: negative offset. StorageError: a file operation failed.
        """
        self._maintenance.truncate_to(offset)

    def recover_unsynced(self) -> int:
        """After a failed fsync: cut the log back to the last successful sync; return it.

        What a failed fsync covered, and everything appended after it, may be missing from
        the disk even though the page cache still shows it (Linux drops the dirty pages of a
        failed writeback and reports the error once), so it is dropped here, as recovery
        after a crash would find it, and must come back from its source (a producer's retry,
        the leader). Clears the poison: new appends are flushed as usual. A no-op returning
        the flushed offset when no fsync failed.

        Raises:
            StorageError: the cut failed (the log stays poisoned; close it and reopen).
        """
        return self._maintenance.recover_unsynced()

    def restart_at(self, offset: int) -> None:
        """Drop every record and restart the log empty at ``offset`` (> LEO): log start,
        LEO and high watermark become ``offset``.

        Used by a follower that is behind its leader's log start (retention on the leader
        removed what it would fetch next). The new log start is checkpointed first.

        Raises:
            InvalidArgumentError: ``offset`` is not above the LEO. StorageError: a file
                operation failed.
        """
        self._maintenance.restart_at(offset)

    def enforce_retention(self) -> int:
        """Delete the oldest whole segments beyond the retention limits; return how many.

        Never deletes the active segment or a segment with offsets at or above the high
        watermark. The new log start offset is checkpointed before any file is deleted.

        Raises:
            StorageError: a file operation failed.
        """
        return self._maintenance.enforce_retention()

    def advance_start(self, offset: int) -> int:
        """Move the log start forward to ``offset`` (a purge: Kafka's delete-records);
        return the log start after the call.

        Reads below ``offset`` are refused from then on; whole segments below it are
        deleted (the active one too if ``offset`` is the LEO: a new one starts there). The
        new log start is checkpointed first; the high watermark is raised to it if lower.
        A no-op at or below the log start.

        Raises:
            InvalidArgumentError: ``offset`` is above the LEO. StorageError: a file
                operation failed.
        """
        return self._maintenance.advance_start(offset)

    def compact(self) -> CompactionReport:
        """Key-compact the segments below the high watermark (see spec/storage.md).

        Safe to run in a background thread while the writer appends and readers read: the
        rewrite happens without locks, and the swap takes the writer lock briefly. If the
        log changed underneath (truncation, retention) the rewrite is discarded and the
        report says so. A no-op (``skipped``) unless ``config.compact``.

        Raises:
            StorageError: a file operation failed.
        """
        return self._maintenance.compact()

    # -- flushing (group commit) -------------------------------------------------------------

    def flush(self, upto: int | None = None) -> int:
        """Block until every offset below ``upto`` (default: the LEO now) is fsynced.

        Group commit: one fsync covers everything appended before it started; a caller that
        arrives during one waits for it, then starts another if needed. From a worker thread.

        Returns:
            :attr:`flushed_offset` (>= ``upto`` clamped to the LEO).

        Raises:
            LogClosedError: the log is closed. SyncFailedError: this fsync or an earlier
                one failed; nothing above :attr:`flushed_offset` can be made durable until
                :meth:`recover_unsynced` cut it off.
        """
        return self._flush(upto, wait=True)  # type: ignore[return-value]  # never None

    @property
    def unflushed_bytes(self) -> int:
        """Bytes appended since the last good fsync began (where the next one runs)."""
        state = self._state
        return state.appended_bytes - state.synced_bytes

    def flush_unless_busy(self, upto: int | None = None, timed: Timed = None) -> int | None:
        """:meth:`flush`, or None if it would wait for another thread's fsync (event loop);
        ``timed(fdatasync, fd)`` makes the system call if given (the runner times it alone).
        To the LEO: :meth:`begin_sync`, the call, :meth:`end_sync` (fewer lines)."""
        if upto is not None:
            return self._flush(upto, wait=False, timed=timed)
        pending = self.begin_sync()
        if pending is None or isinstance(pending, int):
            return pending
        error: BaseException | None = None
        try:
            fdatasync(pending.fd) if timed is None else timed(fdatasync, pending.fd)
        except BaseException as exc:  # (recorded: the log is poisoned, as by flush)
            error = exc
        return self.end_sync(pending, error)  # (SyncFailedError if it failed)

    def begin_sync(self) -> PendingSync | int | None:
        """:meth:`flush`'s bookkeeping before the fsync (``os.fdatasync(pending.fd)``),
        ended by :meth:`end_sync` (a worker thread's, ``FsyncRunner.sync_in_thread_then``,
        or the loop's, :meth:`flush_unless_busy`). The flushed offset if it covers the LEO
        already; None if another fsync of this log runs (the caller flushes another way).

        Raises:
            LogClosedError: the log is closed. SyncFailedError: an earlier fsync failed.
        """
        state = self._state
        state.check_open()
        commit = state.commit
        generation = commit.try_start(state.leo)
        if generation < 0:
            return commit.flushed_offset if generation == COVERED else None
        try:
            with state.lock:
                state.check_open()
                seg = state.segments[-1]
                pending = PendingSync(
                    seg.file.fd,
                    state.leo,
                    state.appended_bytes,
                    FileLease(seg.file),
                    generation,
                    seg,
                )
        except BaseException:
            commit.finish(generation, -1, None)
            raise
        return pending

    def end_sync(self, pending: PendingSync, error: BaseException | None) -> int:
        """:meth:`flush`'s bookkeeping after the fsync :meth:`begin_sync` began ended
        (``error``: how it failed): the flushed offset. Any thread (the fsync's).

        Raises:
            SyncFailedError: it failed (the log is poisoned, as after :meth:`flush`).
        """
        pending.lease.release()
        state = self._state
        if error is None:
            state.synced_bytes = pending.appended
        elif isinstance(error, OSError):
            error = StorageError(f"fsync of {pending.segment.log_path} failed: {error}")
        return state.commit.finish(pending.generation, pending.covered, error)

    def _flush(self, upto: int | None, *, wait: bool, timed: Timed = None) -> int | None:
        state = self._state

        def target() -> int:
            state.check_open()
            return state.leo if upto is None else min(upto, state.leo)

        def begin() -> tuple[int, Callable[[], None]]:
            with state.lock:
                state.check_open()
                seg = state.segments[-1]
                covered = state.leo
                appended = state.appended_bytes
                lease = FileLease(seg.file)

            def sync() -> None:
                try:
                    fdatasync(seg.file.fd) if timed is None else timed(fdatasync, seg.file.fd)
                except OSError as exc:
                    raise StorageError(f"fsync of {seg.log_path} failed: {exc}") from exc
                finally:
                    lease.release()
                state.synced_bytes = appended

            return covered, sync

        return state.commit.flush(target, begin, wait=wait)

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
        return self._reader.read(offset, max_bytes, max_offset)

    def read_tail(self, offset: int, max_bytes: int) -> tuple[bytes, int] | None:
        """The bytes of the log's last append and the offset after them, if that append
        starts at ``offset``, lies below the high watermark and fits ``max_bytes``: what
        :meth:`read` (to the high watermark) returns then, in memory, for a reader that
        kept up (a tailing consumer's next answer), without locating the records.

        None if not (or the log is closed): :meth:`read` as usual.
        """
        return self._reader.read_tail(offset, max_bytes)

    def offset_for_timestamp(self, timestamp_ns: int, max_offset: int | None = None) -> int | None:
        """The first offset whose record has a timestamp >= ``timestamp_ns``.

        Only offsets in [log start, ``max_offset``) count (default: the high watermark).
        None if there is no such record (yet).
        """
        return self._reader.offset_for_timestamp(timestamp_ns, max_offset)
