"""Truncation, retention and compaction of a partition log (spec/storage.md §9-11).

:class:`Maintenance` holds the operations that remove records from a
:class:`~jetserver.storage.log_state.LogState`; it owns the compaction lock.

Thread-safety: as :class:`~jetserver.storage.Log` says for these methods.
"""

from __future__ import annotations

import contextlib
import os
import threading
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


class Maintenance:
    """Truncation, retention and compaction of one log (see :class:`~jetserver.storage.Log`)."""

    def __init__(self, state: LogState) -> None:
        self._state = state
        self._compact_lock = threading.Lock()
        """One compaction at a time."""

    def truncate_to(self, offset: int) -> None:
        """See :meth:`Log.truncate_to <jetserver.storage.log.Log.truncate_to>`."""
        st = self._state
        if offset < 0:
            raise InvalidArgumentError(f"offset must be >= 0, got {offset}")
        with st.write_lock:
            st.check_open()
            if offset >= st.leo:
                return
            st.drop_marker()
            if offset < st.log_start:
                self._truncate_fully(offset)
                return
            segments = st.segments
            keep = max(bisect_right(st.bases, offset) - 1, 0)
            target = segments[keep]
            dropped = segments[keep + 1 :]
            target.pin()  # it becomes the active segment: appends need its file open
            try:
                target.truncate_to(offset)
                target.fsync()
            except OSError as exc:
                st.commit.fail(f"truncate of {target.log_path} failed ({exc})")
                raise StorageError(f"truncate of {target.log_path} failed: {exc}") from exc
            with st.lock:
                st.segments = segments[: keep + 1]
                st.bases = st.bases[: keep + 1]
                st.leo = offset
                st.hw = min(st.hw, offset)
            for seg in dropped:
                seg.delete_files()
                seg.release()
            # The target is the active segment now: its index files are rewritten at roll or
            # close, and recovery does not trust them before that.
            for path in (target.index_path, target.timeindex_path):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(path)
            fsync_directory(st.dir)
            st.commit.clamp(offset)
            st.last_ts = max(seg.state.max_timestamp for seg in st.segments)
            st.epochs.truncate_from_end(offset)
            if target.state.next_offset < offset:
                # The cut landed in a compaction gap: start a new segment at ``offset`` so
                # the LEO survives a restart (recovery derives it from the last segment).
                st.roll(offset)
            else:
                st.watch_active()

    def recover_unsynced(self) -> int:
        """See :meth:`Log.recover_unsynced <jetserver.storage.log.Log.recover_unsynced>`."""
        st = self._state
        with st.write_lock:
            st.check_open()
            if st.commit.failure is None:
                return st.commit.flushed_offset
            synced = st.commit.flushed_offset
            hw, old = st.hw, st.segments
            # What the files hold now (a dropped writeback may have left a torn tail), with
            # the recovery scan a restart would run.
            st.load(synced)
            for seg in old:
                seg.release()
            with st.lock:
                st.hw = min(max(hw, st.hw), st.leo)
            if synced < st.leo:
                # The page cache may still show records the disk lacks: cut them too.
                self.truncate_to(synced)
            else:
                st.commit.clamp(st.leo)
            return st.leo

    def restart_at(self, offset: int) -> None:
        """See :meth:`Log.restart_at <jetserver.storage.log.Log.restart_at>`."""
        st = self._state
        with st.write_lock:
            st.check_open()
            if offset <= st.leo:
                raise InvalidArgumentError(f"restart offset {offset} is not above LEO {st.leo}")
            try:
                self._truncate_fully(offset)
            except OSError as exc:
                raise StorageError(f"cannot restart the log at {offset}: {exc}") from exc

    def _truncate_fully(self, offset: int) -> None:
        st = self._state
        st.drop_marker()
        segments = st.segments
        new = Segment.create(st.dir, offset, st.config.index_interval_bytes)
        write_checkpoint(st.dir, LOG_START_OFFSET_FILE, [(offset,)])
        with st.lock:
            st.segments = (new,)
            st.bases = [offset]
            st.leo = st.log_start = st.hw = offset
        for seg in segments:
            seg.delete_files()
            seg.release()
        fsync_directory(st.dir)
        st.commit.reset(offset)
        st.last_ts = NO_TIMESTAMP
        st.epochs.clear()
        st.watch_active()

    def enforce_retention(self) -> int:
        """See :meth:`Log.enforce_retention <jetserver.storage.log.Log.enforce_retention>`."""
        st = self._state
        with st.write_lock:
            st.check_open()
            segments = st.segments
            count = segments_to_delete(
                segments,
                config=st.config,
                log_start_offset=st.log_start,
                log_end_offset=st.leo,
                high_watermark=st.hw,
                now_ns=st.clock(),
            )
            if not count:
                return 0
            self._move_start(segments, count, max(st.log_start, segments[count].base_offset))
            return count

    def advance_start(self, offset: int) -> int:
        """Move the log start forward to ``offset`` (a purge: Kafka's delete-records);
        return the log start after the call.

        Reads below ``offset`` are refused from then on. Whole segments below it are
        deleted; if ``offset`` is the LEO and the active segment holds records, a new
        active segment is started there first so that its files go too. The new log start
        is checkpointed before any file is deleted; the high watermark is raised to it if
        lower (a follower behind its leader). A no-op at or below the log start.

        Raises:
            InvalidArgumentError: ``offset`` is above the LEO. StorageError: a file
                operation failed.
        """
        st = self._state
        with st.write_lock:
            st.check_open()
            if offset > st.leo:
                raise InvalidArgumentError(f"log start {offset} is above the LEO {st.leo}")
            if offset <= st.log_start:
                return st.log_start
            active = st.segments[-1]
            if offset == st.leo and active.state.next_offset > active.base_offset:
                st.roll(offset)
            segments = st.segments
            count = 0
            while count < len(segments) - 1 and segments[count].state.next_offset <= offset:
                count += 1
            self._move_start(segments, count, offset)
            return offset

    def _move_start(self, segments: tuple[Segment, ...], count: int, new_start: int) -> None:
        """Checkpoint ``new_start`` as the log start, then drop the first ``count`` of
        ``segments`` (the log's, all below it) with their files; the HW is raised to it if
        lower and the leader epochs below it are forgotten. Under the write lock.

        Raises:
            StorageError: the checkpoint could not be written (nothing changed).
        """
        st = self._state
        try:
            write_checkpoint(st.dir, LOG_START_OFFSET_FILE, [(new_start,)])
        except OSError as exc:
            raise StorageError(f"cannot checkpoint the log start offset: {exc}") from exc
        with st.lock:
            st.segments = segments[count:]
            st.bases = st.bases[count:]
            st.log_start = new_start
            st.hw = max(st.hw, new_start)
        for seg in segments[:count]:
            seg.delete_files()
            seg.release()
        if count:
            fsync_directory(st.dir)
        st.epochs.truncate_from_start(new_start)

    def compact(self) -> CompactionReport:
        """See :meth:`Log.compact <jetserver.storage.log.Log.compact>`."""
        st = self._state
        if not st.config.compact:
            return CompactionReport(skipped="compaction is disabled for this log")
        with self._compact_lock:
            with st.lock:
                st.check_open()
                segments = st.segments
                hw = st.hw
                cleanable = []
                for seg in segments[:-1]:
                    seg_state = seg.state
                    if seg_state.next_offset > hw or seg.corrupt_end is not None:
                        break
                    cleanable.append((seg, seg_state))
                leases = [FileLease(seg.file) for seg, _ in cleanable]
            try:
                return self._compact(len(segments), cleanable)
            except OSError as exc:
                raise StorageError(f"compaction of {st.dir} failed: {exc}") from exc
            finally:
                for lease in leases:
                    lease.release()

    def _compact(
        self, segments_before: int, cleanable: list[tuple[Segment, SegmentState]]
    ) -> CompactionReport:
        st = self._state
        rewrite = compaction.rewrite(st.dir, cleanable, st.config, st.clock())
        if isinstance(rewrite, CompactionReport):
            return attrs.evolve(
                rewrite, segments_before=segments_before, segments_after=segments_before
            )
        aborted = self.swap_in(rewrite.groups)
        return rewrite.report(segments_before, len(st.segments), aborted)

    def swap_in(self, cleaned: list[compaction.CleanedGroup]) -> str | None:
        """Swap cleaned groups in under the writer lock; a reason string if abandoned."""
        st = self._state
        if not cleaned:
            return None
        with st.write_lock:
            replacement = None if st.closed else compaction.replace(st.segments, cleaned)
            if replacement is None:
                for group in cleaned:
                    group.discard()
                return "the log changed during compaction (truncation, retention or close)"
            segments, replaced = replacement
            for group in cleaned:
                compaction.swap_files(st.dir, group)
            with st.lock:
                st.segments = segments
                st.bases = [seg.base_offset for seg in segments]
            for group in cleaned:
                group.segment.seal(st.file_cache)
            for seg in replaced:
                seg.release()
            return None
