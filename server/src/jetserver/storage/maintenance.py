"""Truncation, retention and compaction of a partition log (spec/storage.md §9-11)."""

from __future__ import annotations

import contextlib
import os
from bisect import bisect_right

import attrs

from jetserver.storage import compaction
from jetserver.storage.checkpoint import LOG_START_OFFSET_FILE, write_checkpoint
from jetserver.storage.compaction import CompactionReport
from jetserver.storage.errors import InvalidArgumentError, StorageError
from jetserver.storage.files import FileLease, fsync_directory
from jetserver.storage.log_state import LogState
from jetserver.storage.retention import segments_to_delete
from jetserver.storage.segment import NO_TIMESTAMP, Segment, SegmentState


class LogMaintenance(LogState):
    """The writer-side operations that remove records; mixed into :class:`Log`."""

    def truncate_to(self, offset: int) -> None:
        """Drop every record with offset >= ``offset``; the LEO becomes ``offset``.

        Used by followers to cut a divergent tail. Below the log start, the whole log is
        dropped and restarts empty at ``offset``. The leader-epoch cache is truncated too;
        the high watermark and flushed offset are clamped. The cut is fsynced.

        Raises:
            InvalidArgumentError: negative offset. StorageError: a file operation failed.
        """
        if offset < 0:
            raise InvalidArgumentError(f"offset must be >= 0, got {offset}")
        with self._write_lock:
            self._check_open()
            if offset >= self._leo:
                return
            self._drop_marker()
            if offset < self._log_start:
                self._truncate_fully(offset)
                return
            segments = self._segments
            keep = max(bisect_right(self._bases, offset) - 1, 0)
            target = segments[keep]
            dropped = segments[keep + 1 :]
            target.pin()  # it becomes the active segment: appends need its file open
            try:
                target.truncate_to(offset)
                target.fsync()
            except OSError as exc:
                self._commit.fail(f"truncate of {target.log_path} failed ({exc})")
                raise StorageError(f"truncate of {target.log_path} failed: {exc}") from exc
            with self._lock:
                self._segments = segments[: keep + 1]
                self._bases = self._bases[: keep + 1]
                self._leo = offset
                self._hw = min(self._hw, offset)
            for seg in dropped:
                seg.delete_files()
                seg.release()
            # The target is the active segment now: its index files are rewritten at roll or
            # close, and recovery does not trust them before that.
            for path in (target.index_path, target.timeindex_path):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(path)
            fsync_directory(self._dir)
            self._commit.clamp(offset)
            self._last_ts = max(seg.state.max_timestamp for seg in self._segments)
            self.epochs.truncate_from_end(offset)
            if target.state.next_offset < offset:
                # The cut landed in a compaction gap: start a new segment at ``offset`` so
                # the LEO survives a restart (recovery derives it from the last segment).
                self._roll(offset)

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
        with self._write_lock:
            self._check_open()
            if self._commit.failure is None:
                return self._commit.flushed_offset
            synced = self._commit.flushed_offset
            hw, old = self._hw, self._segments
            # What the files hold now (a dropped writeback may have left a torn tail), with
            # the recovery scan a restart would run.
            self._load(synced)
            for seg in old:
                seg.release()
            with self._lock:
                self._hw = min(max(hw, self._hw), self._leo)
            if synced < self._leo:
                # The page cache may still show records the disk lacks: cut them too.
                self.truncate_to(synced)
            else:
                self._commit.clamp(self._leo)
            return self._leo

    def restart_at(self, offset: int) -> None:
        """Drop every record and restart the log empty at ``offset`` (> LEO): log start,
        LEO and high watermark become ``offset``.

        Used by a follower that is behind its leader's log start (retention on the leader
        removed what it would fetch next). The new log start is checkpointed first.

        Raises:
            InvalidArgumentError: ``offset`` is not above the LEO. StorageError: a file
                operation failed.
        """
        with self._write_lock:
            self._check_open()
            if offset <= self._leo:
                raise InvalidArgumentError(f"restart offset {offset} is not above LEO {self._leo}")
            try:
                self._truncate_fully(offset)
            except OSError as exc:
                raise StorageError(f"cannot restart the log at {offset}: {exc}") from exc

    def _truncate_fully(self, offset: int) -> None:
        self._drop_marker()
        segments = self._segments
        new = Segment.create(self._dir, offset, self._config.index_interval_bytes)
        write_checkpoint(self._dir, LOG_START_OFFSET_FILE, [(offset,)])
        with self._lock:
            self._segments = (new,)
            self._bases = [offset]
            self._leo = self._log_start = self._hw = offset
        for seg in segments:
            seg.delete_files()
            seg.release()
        fsync_directory(self._dir)
        self._commit.reset(offset)
        self._last_ts = NO_TIMESTAMP
        self.epochs.clear()

    def enforce_retention(self) -> int:
        """Delete the oldest whole segments beyond the retention limits; return how many.

        Never deletes the active segment or a segment with offsets at or above the high
        watermark. The new log start offset is checkpointed before any file is deleted.

        Raises:
            StorageError: a file operation failed.
        """
        with self._write_lock:
            self._check_open()
            segments = self._segments
            count = segments_to_delete(
                segments,
                config=self._config,
                log_start_offset=self._log_start,
                log_end_offset=self._leo,
                high_watermark=self._hw,
                now_ns=self._clock(),
            )
            if not count:
                return 0
            new_start = max(self._log_start, segments[count].base_offset)
            try:
                write_checkpoint(self._dir, LOG_START_OFFSET_FILE, [(new_start,)])
            except OSError as exc:
                raise StorageError(f"cannot checkpoint the log start offset: {exc}") from exc
            with self._lock:
                self._segments = segments[count:]
                self._bases = self._bases[count:]
                self._log_start = new_start
                self._hw = max(self._hw, new_start)
            for seg in segments[:count]:
                seg.delete_files()
                seg.release()
            fsync_directory(self._dir)
            self.epochs.truncate_from_start(new_start)
            return count

    def compact(self) -> CompactionReport:
        """Key-compact the segments below the high watermark (see spec/storage.md).

        Safe to run in a background thread while the writer appends and readers read: the
        rewrite happens without locks, and the swap takes the writer lock briefly. If the
        log changed underneath (truncation, retention) the rewrite is discarded and the
        report says so. A no-op (``skipped``) unless ``config.compact``.

        Raises:
            StorageError: a file operation failed.
        """
        if not self._config.compact:
            return CompactionReport(skipped="compaction is disabled for this log")
        with self._compact_lock:
            with self._lock:
                self._check_open()
                segments = self._segments
                hw = self._hw
                cleanable = []
                for seg in segments[:-1]:
                    st = seg.state
                    if st.next_offset > hw or seg.corrupt_end is not None:
                        break
                    cleanable.append((seg, st))
                leases = [FileLease(seg.file) for seg, _ in cleanable]
            try:
                return self._compact(len(segments), cleanable)
            except OSError as exc:
                raise StorageError(f"compaction of {self._dir} failed: {exc}") from exc
            finally:
                for lease in leases:
                    lease.release()

    def _compact(
        self, segments_before: int, cleanable: list[tuple[Segment, SegmentState]]
    ) -> CompactionReport:
        rewrite = compaction.rewrite(self._dir, cleanable, self._config, self._clock())
        if isinstance(rewrite, CompactionReport):
            return attrs.evolve(
                rewrite, segments_before=segments_before, segments_after=segments_before
            )
        aborted = self._swap_in(rewrite.groups)
        return rewrite.report(segments_before, len(self._segments), aborted)

    def _swap_in(self, cleaned: list[compaction.CleanedGroup]) -> str | None:
        """Swap cleaned groups in under the writer lock; a reason string if abandoned."""
        if not cleaned:
            return None
        with self._write_lock:
            replacement = None if self._closed else compaction.replace(self._segments, cleaned)
            if replacement is None:
                for group in cleaned:
                    group.discard()
                return "the log changed during compaction (truncation, retention or close)"
            segments, replaced = replacement
            for group in cleaned:
                compaction.swap_files(self._dir, group)
            with self._lock:
                self._segments = segments
                self._bases = [seg.base_offset for seg in segments]
            for group in cleaned:
                group.segment.seal(self._file_cache)
            for seg in replaced:
                seg.release()
            return None
