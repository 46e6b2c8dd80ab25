"""The state of one partition log: segments, offsets, locks (see :class:`jetserver.storage.Log`).

:class:`LogState` owns the fields every part of a log reads or changes (the segment list,
LEO, high watermark, log start, the group commit) and the few operations on them that more
than one part needs: loading what recovery found, rolling to a new segment, checkpointing the
high watermark. The parts that act on it (:class:`~jetserver.storage.appender.Appender`,
:class:`~jetserver.storage.reader.Reader`,
:class:`~jetserver.storage.maintenance.Maintenance`) each hold a reference to it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

from jetserver.storage.checkpoint import (
    CLEAN_SHUTDOWN_FILE,
    HIGH_WATERMARK_FILE,
    remove_file,
    write_checkpoint,
)
from jetserver.storage.config import LogConfig
from jetserver.storage.epoch_cache import LeaderEpochCache
from jetserver.storage.errors import LogClosedError, StorageError
from jetserver.storage.files import OpenFileCache, fsync_directory
from jetserver.storage.group_commit import GroupCommit
from jetserver.storage.idle_files import IdleFiles
from jetserver.storage.recovery import RecoveryReport, recover
from jetserver.storage.segment import NO_TIMESTAMP, Segment


def _hw_on_disk(report: RecoveryReport) -> int | None:
    """The HW the next recovery would read from the checkpoint file as found (None: it
    must be written to be known). A missing file reads as the log start, so a log whose
    HW is its start needs none: a new partition, and one that stayed empty through a
    restart (writing it then cost each of 50,000 idle partitions an atomic write and its
    two fsyncs at the first housekeeping round, issue 34). A corrupt one is rewritten."""
    if report.hw_checkpoint is not None:
        return report.hw_checkpoint
    if HIGH_WATERMARK_FILE in report.corrupt_files:
        return None
    return report.log_start_offset


class LogState:
    """Segments, offsets, locks and checkpoints of one log (package-internal).

    Locks: ``write_lock`` serializes writers (append, truncate, roll, retention, close and
    compaction's swap); ``lock`` guards the segment list and offsets for short snapshots
    (readers take only this one). ``segments``, ``bases``, ``leo``, ``hw`` and ``log_start``
    change only with ``lock`` held (and ``write_lock``, except the HW).

    Invariants: ``log_start <= hw <= leo``; ``bases`` are the segments' base offsets, in
    increasing order; ``leo`` never moves back except by a truncation.
    """

    __slots__ = (
        "_ckpt_lock",
        "appended_bytes",
        "bases",
        "clock",
        "closed",
        "commit",
        "config",
        "dir",
        "epochs",
        "file_cache",
        "hw",
        "hw_on_disk",
        "idle_files",
        "last_ts",
        "leo",
        "lock",
        "log_start",
        "marker_on_disk",
        "recovery",
        "segments",
        "synced_bytes",
        "write_lock",
    )

    def __init__(
        self,
        directory: Path,
        config: LogConfig,
        clock: Callable[[], int],
        file_cache: OpenFileCache,
        idle_files: IdleFiles,
    ) -> None:
        self.dir = directory
        self.config = config
        self.clock = clock
        self.file_cache = file_cache
        self.idle_files = idle_files
        """Parks the active segment's file while the log is idle (:meth:`park_idle_file`)."""
        self.lock = threading.Lock()
        self.write_lock = threading.RLock()
        self._ckpt_lock = threading.Lock()
        self.commit = GroupCommit(0)
        """Group commit: flushed offset, fsync count, the poison of a failed fsync."""
        self.segments: tuple[Segment, ...] = ()
        """Oldest first; the last one is the active segment."""
        self.bases: list[int] = []
        """The segments' base offsets (for bisect)."""
        self.leo = 0
        self.hw = 0
        self.log_start = 0
        self.last_ts = NO_TIMESTAMP
        """The largest timestamp in the log (timestamps never decrease)."""
        self.appended_bytes = 0
        """Bytes written by appends since the log was opened (a running count)."""
        self.synced_bytes = 0
        """:attr:`appended_bytes` as the last successful fsync began (so the bytes appended
        and not yet fsynced are the difference: :attr:`Log.unflushed_bytes`)."""
        self.closed = False
        self.hw_on_disk: int | None = None
        """The value the HW checkpoint file holds, if known (read at open, or written)."""
        self.marker_on_disk = False
        """The clean-shutdown marker was kept at open (``keep_clean_marker``) and is still
        there: :meth:`drop_marker` deletes it before the first truncation."""
        self.recovery: RecoveryReport
        """What the last :meth:`load` found and repaired."""
        self.epochs: LeaderEpochCache
        """The leader-epoch cache (a new one after each :meth:`load`)."""

    def load(
        self,
        synced: int | None = None,
        *,
        keep_clean_marker: bool = False,
        sync_dir: Callable[[Path], None] = fsync_directory,
    ) -> None:
        """Recover the directory and take what it holds (``synced``: a reload after a failed
        fsync, nothing above it counts as flushed and the log stays poisoned; ``sync_dir``:
        see :func:`~jetserver.storage.recovery.recover`).

        Raises:
            StorageError: recovery could not read or repair the directory.
        """
        try:
            found = recover(
                self.dir, self.config, keep_clean_marker=keep_clean_marker, sync_dir=sync_dir
            )
        except OSError as exc:
            raise StorageError(f"recovery of {self.dir} failed: {exc}") from exc
        segments = tuple(found.segments)
        active = segments[-1]
        leo = max(active.state.next_offset, active.base_offset)
        hw = found.high_watermark  # a reload after a failed fsync keeps the HW readers see
        with self.lock:
            self.segments = segments
            self.bases = [seg.base_offset for seg in segments]
            self.leo = leo
            self.log_start = found.log_start_offset
            self.hw = hw if synced is None else min(max(self.hw, hw), leo)
        self.hw_on_disk = _hw_on_disk(found.report)
        self.marker_on_disk = found.report.clean_marker_kept
        self.last_ts = max(seg.state.max_timestamp for seg in segments)
        self.epochs = LeaderEpochCache(self.dir, self.log_end, found.epochs)
        try:
            self.epochs.truncate_from_end(leo)
            self.epochs.truncate_from_start(self.log_start)
            if not (found.report.clean_shutdown or found.report.fresh):
                # After a clean close the marker names the active segment at its current
                # size, which that close fsynced: nothing to sync (spec/storage.md §9.7).
                active.fsync()
        except OSError as exc:
            for seg in segments:
                seg.release()
            raise StorageError(f"recovery of {self.dir} failed: {exc}") from exc
        for seg in segments[:-1]:
            seg.seal(self.file_cache)
        self.commit.rebase(leo if synced is None else min(synced, leo))
        self.recovery = found.report
        self.watch_active(fresh=synced is None)

    def log_end(self) -> int:
        """The LEO (for the epoch cache: a bound method is a third of a closure's size)."""
        return self.leo

    def watch_active(self, *, fresh: bool = False) -> None:
        """The active segment changed or was opened: :attr:`idle_files` may park its
        file from now on (``fresh``: the log was just opened)."""
        active = self.segments[-1]
        active.file.on_reopen = self._file_reopened
        if active.file.fd >= 0:
            self.idle_files.opened(self, fresh=fresh)

    def _file_reopened(self) -> None:
        self.idle_files.opened(self)

    def park_idle_file(self) -> bool:
        """Close the active segment's descriptor if the log is idle now: its writer is
        not in it (the writer lock is free: taken here, never waited for), every record
        is fsynced and no fsync failed, and no lease is out (a reader, a running fsync).
        True if the log holds no active file now (parked, or the log is closed).

        Only a fully fsynced file is closed: a writeback error of pages written through
        one descriptor may not be reported by fsync on a descriptor opened after it
        (Linux reports it to the descriptors open when it happened)."""
        if not self.write_lock.acquire(blocking=False):
            return False
        try:
            if self.closed:
                return True
            commit = self.commit
            if commit.failure is not None or commit.flushed_offset < self.leo:
                return False
            return self.segments[-1].file.park_idle()
        finally:
            self.write_lock.release()

    def set_high_watermark(self, hw: int) -> int:
        """Set the high watermark, clamped into [log start, LEO]; return the value set."""
        with self.lock:
            self.hw = min(max(hw, self.log_start), self.leo)
            return self.hw

    def checkpoint_high_watermark(self) -> None:
        """Write the high watermark to ``high-watermark-checkpoint`` atomically, unless the
        file already holds it (an idle partition's close: two fsyncs fewer).

        Raises:
            StorageError: the write failed.
        """
        with self._ckpt_lock:
            hw = self.hw
            if hw == self.hw_on_disk:
                return
            self.hw_on_disk = None  # unknown until written
            try:
                write_checkpoint(self.dir, HIGH_WATERMARK_FILE, [(hw,)])
            except OSError as exc:
                raise StorageError(f"cannot write the high watermark checkpoint: {exc}") from exc
            self.hw_on_disk = hw

    def drop_marker(self) -> None:
        """Delete a clean-shutdown marker kept at open (durably), before a truncation: a
        cut and new appends could make the active segment its named size again."""
        if self.marker_on_disk:
            try:
                remove_file(self.dir, CLEAN_SHUTDOWN_FILE)
            except OSError as exc:
                raise StorageError(f"cannot remove {CLEAN_SHUTDOWN_FILE}: {exc}") from exc
            self.marker_on_disk = False

    def check_open(self) -> None:
        """Raise LogClosedError after the log was closed."""
        if self.closed:
            raise LogClosedError(f"log {self.dir} is closed")

    def roll(self, new_base: int) -> None:
        """Finish the active segment (indexes, fsync) and start one at ``new_base``
        (writer lock held).

        Raises:
            StorageError: a file operation failed (an fsync failure poisons the log).
        """
        old = self.segments[-1]
        try:
            old.write_indexes()
            old.fsync()
        except OSError as exc:
            self.commit.fail(f"fsync at the roll of {old.log_path} failed ({exc})")
            raise StorageError(f"cannot finish segment {old.log_path}: {exc}") from exc
        new = Segment.create(self.dir, new_base, self.config.index_interval_bytes)
        try:
            fsync_directory(self.dir)
        except OSError as exc:
            new.release()
            raise StorageError(f"cannot fsync {self.dir}: {exc}") from exc
        with self.lock:
            self.segments = (*self.segments, new)
            self.bases = [*self.bases, new_base]
        old.seal(self.file_cache)
        # The old segment was just fsynced, and so was every one before it.
        self.commit.advance(self.leo)
        self.watch_active()

    def replace_empty_active(self, new_base: int) -> None:
        """Replace the empty active segment with one based at ``new_base`` (writer lock
        held): a batch whose offsets do not fit the old base's 32-bit relative range."""
        old = self.segments[-1]
        new = Segment.create(self.dir, new_base, self.config.index_interval_bytes)
        with self.lock:
            self.segments = (*self.segments[:-1], new)
            self.bases = [*self.bases[:-1], new_base]
        old.delete_files()
        old.release()
        fsync_directory(self.dir)
        self.watch_active()

    def release_all(self) -> None:
        """Mark the log closed and release every segment's files (writer lock held)."""
        with self.lock:
            self.closed = True
            segments, self.segments = self.segments, ()
            self.bases = []
        for seg in segments:
            seg.release()
        self.idle_files.forget(self)
        self.commit.wake()
