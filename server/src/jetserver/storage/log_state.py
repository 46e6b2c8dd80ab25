"""The state of a partition log shared by its parts (see :class:`jetserver.storage.Log`)."""

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
from jetserver.storage.recovery import RecoveryReport
from jetserver.storage.segment import NO_TIMESTAMP, Segment


class LogState:
    """Fields and locks of a Log, and the segment-list operations every part needs.

    Locks: ``_write_lock`` serializes writers (append, truncate, roll, retention, close and
    compaction's swap); ``_lock`` guards the segment list and offsets for short snapshots
    (readers take only this one).
    """

    def __init__(
        self,
        directory: Path,
        config: LogConfig,
        clock: Callable[[], int],
        lock_fd: int,
        file_cache: OpenFileCache,
    ) -> None:
        # Use Log.open(); this constructor only prepares the fields.
        self._dir = directory
        self._config = config
        self._clock = clock
        self._lock_fd = lock_fd
        self._file_cache = file_cache
        self._lock = threading.Lock()
        self._write_lock = threading.RLock()
        self._compact_lock = threading.Lock()
        self._ckpt_lock = threading.Lock()
        self._commit = GroupCommit(0)
        self._segments: tuple[Segment, ...] = ()
        self._bases: list[int] = []
        self._leo = 0
        self._hw = 0
        self._hw_on_disk: int | None = None
        """The value the HW checkpoint file holds, if known (read at open, or written)."""
        self._marker_on_disk = False
        """The clean-shutdown marker was kept at open (``keep_clean_marker``) and is still
        there: :meth:`_drop_marker` deletes it before the first truncation."""
        self._log_start = 0
        self._last_ts = NO_TIMESTAMP
        self._closed = False
        self.recovery: RecoveryReport
        """What :meth:`open` found and repaired."""
        self.epochs: LeaderEpochCache
        """The leader-epoch cache (KIP-101): assign, latest_epoch, end_offset_for."""
        self.space_guard: Callable[[int], None] | None = None
        """Called by ``append`` and ``append_raw`` with the bytes they are about to write;
        raises DiskFull to refuse them (a server sets
        :meth:`jetserver.storage.space.DiskSpace.check`)."""

    def set_high_watermark(self, hw: int) -> int:
        """Set the high watermark, clamped into [log start, LEO]; return the value set."""
        with self._lock:
            self._hw = min(max(hw, self._log_start), self._leo)
            return self._hw

    def checkpoint_high_watermark(self) -> None:
        """Write the high watermark to ``high-watermark-checkpoint`` atomically, unless the
        file already holds it (an idle partition's close: two fsyncs fewer).

        Raises:
            StorageError: the write failed.
        """
        with self._ckpt_lock:
            hw = self._hw
            if hw == self._hw_on_disk:
                return
            self._hw_on_disk = None  # unknown until written
            try:
                write_checkpoint(self._dir, HIGH_WATERMARK_FILE, [(hw,)])
            except OSError as exc:
                raise StorageError(f"cannot write the high watermark checkpoint: {exc}") from exc
            self._hw_on_disk = hw

    def _drop_marker(self) -> None:
        """Delete a clean-shutdown marker kept at open (durably), before a truncation: a
        cut and new appends could make the active segment its named size again."""
        if self._marker_on_disk:
            try:
                remove_file(self._dir, CLEAN_SHUTDOWN_FILE)
            except OSError as exc:
                raise StorageError(f"cannot remove {CLEAN_SHUTDOWN_FILE}: {exc}") from exc
            self._marker_on_disk = False

    def _load(self, synced: int | None = None, *, keep_clean_marker: bool = False) -> None:
        """Recover the directory and take what it holds (implemented by the Log)."""
        raise NotImplementedError

    def _check_open(self) -> None:
        if self._closed:
            raise LogClosedError(f"log {self._dir} is closed")

    def _roll(self, new_base: int) -> None:
        old = self._segments[-1]
        try:
            old.write_indexes()
            old.fsync()
        except OSError as exc:
            self._commit.fail(f"fsync at the roll of {old.log_path} failed ({exc})")
            raise StorageError(f"cannot finish segment {old.log_path}: {exc}") from exc
        new = Segment.create(self._dir, new_base, self._config.index_interval_bytes)
        try:
            fsync_directory(self._dir)
        except OSError as exc:
            new.release()
            raise StorageError(f"cannot fsync {self._dir}: {exc}") from exc
        with self._lock:
            self._segments = (*self._segments, new)
            self._bases = [*self._bases, new_base]
        old.seal(self._file_cache)
        # The old segment was just fsynced, and so was every one before it.
        self._commit.advance(self._leo)

    def _replace_empty_active(self, new_base: int) -> None:
        old = self._segments[-1]
        new = Segment.create(self._dir, new_base, self._config.index_interval_bytes)
        with self._lock:
            self._segments = (*self._segments[:-1], new)
            self._bases = [*self._bases[:-1], new_base]
        old.delete_files()
        old.release()
        fsync_directory(self._dir)
