"""The append path of a partition log: offsets, framing, indexes, rolling (spec/storage.md).

:class:`Appender` writes batches at the LEO of a :class:`~jetserver.storage.log_state.LogState`:
leader appends (:meth:`Appender.append`, offsets and timestamps assigned here) and replicated
ones (:meth:`Appender.append_raw`, records framed by the leader). It checks, on every batch,
the invariants the rest of the log relies on (offsets strictly increasing, HW <= LEO): cheap
comparisons that stay on in production, TigerBeetle-style, made before any record is written;
a failure is a bug, raised as :class:`~jetserver.storage.errors.InvariantViolation`.

Thread-safety: the methods take the log's writer lock; one writer task is expected.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence
from itertools import accumulate

from jetsdk.codec.crc import crc32
from jetsdk.codec.record import CRC_COVERED_HEADER, HEADER, HEADER_SIZE, MAX_BODY_BYTES
from jetserver.storage.epoch_cache import MAX_EPOCH
from jetserver.storage.errors import InvalidArgumentError, InvalidRecordsError, InvariantViolation
from jetserver.storage.framing import GATHER_MIN_RECORD, Body, frame_batch_sizes, frame_small
from jetserver.storage.log_state import LogState
from jetserver.storage.offset_index import U32_MAX, index_points
from jetserver.storage.segment import (
    NO_INDEX_ENTRIES,
    IndexEntries,
    Segment,
    batch_index_entries,
)

_I64_MIN = -(2**63)
_I64_MAX = 2**63 - 1


class Appender:
    """Appends batches to one log's active segment, rolling it when due."""

    def __init__(self, state: LogState) -> None:
        self._state = state
        self.space_guard: Callable[[int], None] | None = None
        """Called with the bytes about to be written; raises DiskFull to refuse them."""

    def append(
        self, bodies: Sequence[Body], timestamp_ns: int, leader_epoch: int
    ) -> tuple[int, int]:
        """See :meth:`jetserver.storage.Log.append`."""
        if not _I64_MIN <= timestamp_ns <= _I64_MAX or not 0 <= leader_epoch <= MAX_EPOCH:
            raise InvalidArgumentError(f"bad timestamp {timestamp_ns} or epoch {leader_epoch}")
        state = self._state
        with state.write_lock:
            if not bodies:
                state.check_open()
                return state.leo, max(timestamp_ns, state.last_ts)
            first, ts, latest_epoch = self._begin(timestamp_ns, leader_epoch)
            n = len(bodies)
            try:
                data, lens, uniform, size = frame_batch_sizes(first, ts, leader_epoch, bodies)
            except struct.error as exc:
                raise InvalidRecordsError(f"cannot frame the batch: {exc}") from exc
            if size > MAX_BODY_BYTES and max(lens) > MAX_BODY_BYTES:
                raise InvalidRecordsError(f"a record body is over {MAX_BODY_BYTES} bytes")
            seg = self._segment_for(size, first, first + n - 1, ts)
            st = seg.state
            entries = NO_INDEX_ENTRIES
            interval = state.config.index_interval_bytes
            last_indexed = seg.last_indexed_position
            if st.size + size - HEADER_SIZE - last_indexed >= interval:
                entries = batch_index_entries(
                    first, ts, lens, uniform, st.size, last_indexed, interval
                )
            seg.append(data, first + n - 1, ts, ts, entries, size, first)
            self._appended(first + n, size, ts, leader_epoch, latest_epoch)
            return first, ts

    def append_one(self, body: Body, timestamp_ns: int, leader_epoch: int) -> tuple[int, int]:
        """:meth:`append` of one record (a Produce of one message at light load). A small
        body in two parts (``(head, tail)``: ``broker.direct.record_body``) is framed here
        into one buffer, written with one ``pwrite``, without a batch's framing, sizes and
        index arithmetic; anything else (a whole body, a known value CRC, a record of
        ``GATHER_MIN_RECORD`` bytes or more, an argument out of range) goes through
        :meth:`append`. The stored bytes, offsets and index entries are the same."""
        if (
            type(body) is not tuple
            or not _I64_MIN <= timestamp_ns <= _I64_MAX
            or not 0 <= leader_epoch <= MAX_EPOCH
        ):
            return self.append((body,), timestamp_ns, leader_epoch)
        head, tail = body
        length = len(head) + len(tail)
        size = HEADER_SIZE + length
        if size >= GATHER_MIN_RECORD:
            return self.append((body,), timestamp_ns, leader_epoch)
        state = self._state
        with state.write_lock:
            first, ts, latest_epoch = self._begin(timestamp_ns, leader_epoch)
            data = frame_small(first, ts, leader_epoch, head, tail, length)
            seg = self._segment_for(size, first, first, ts)
            position = seg.state.size
            entries = NO_INDEX_ENTRIES
            # The rule of index_points for one record at ``position``.
            if position - seg.last_indexed_position >= state.config.index_interval_bytes:
                entries = IndexEntries((first,), (position,), (ts,))
            seg.append(data, first, ts, ts, entries, size, first)
            self._appended(first + 1, size, ts, leader_epoch, latest_epoch)
            return first, ts

    def _begin(self, timestamp_ns: int, leader_epoch: int) -> tuple[int, int, int]:
        """The first offset, the timestamp and the latest epoch before a leader append of
        ``leader_epoch`` at the LEO (writer lock held; the log open, the epoch not below
        the latest: else raises)."""
        state = self._state
        state.check_open()
        last_ts = state.last_ts
        latest_epoch = state.epochs.latest_epoch  # read once: its writers hold the write lock
        if leader_epoch < latest_epoch:
            raise InvalidRecordsError(
                f"leader epoch {leader_epoch} is below the latest {latest_epoch}"
            )
        return state.leo, timestamp_ns if timestamp_ns > last_ts else last_ts, latest_epoch

    def _segment_for(self, size: int, first: int, last: int, ts: int) -> Segment:
        """The segment a leader append of ``size`` bytes at the LEO ``first`` goes to
        (:meth:`_prepare_segment`), after the invariants it relies on (HW <= LEO, the
        active segment ends at or below the LEO), checked before anything is written."""
        state = self._state
        if not state.log_start <= state.hw <= first:
            raise InvariantViolation(
                f"append at LEO {first}: HW {state.hw}, log start {state.log_start} in {state.dir}"
            )
        seg = self._prepare_segment(size, first, last, ts)
        if seg.state.next_offset > first:
            raise InvariantViolation(
                f"append at LEO {first}: {seg.log_path} already ends at {seg.state.next_offset}"
            )
        return seg

    def _appended(self, leo: int, size: int, ts: int, leader_epoch: int, latest_epoch: int) -> None:
        """After a leader append of ``size`` bytes up to ``leo``, stamped ``ts``."""
        state = self._state
        first = state.leo
        with state.lock:
            state.leo = leo
        state.appended_bytes += size
        state.last_ts = ts
        if leader_epoch != latest_epoch:
            state.epochs.assign(leader_epoch, first)

    def append_raw(self, data: bytes | memoryview) -> int:
        """See :meth:`jetserver.storage.Log.append_raw`."""
        view = memoryview(data)
        n = len(view)
        state = self._state
        with state.write_lock:
            state.check_open()
            leo = state.leo
            prev = leo - 1
            latest_epoch = state.epochs.latest_epoch
            offsets: list[int] = []
            starts: list[int] = []
            stamps: list[int] = []
            new_epochs: list[tuple[int, int]] = []
            pos = 0
            unpack = HEADER.unpack_from
            while n - pos >= HEADER_SIZE:
                # One header read per record and its CRC over the bytes as they will be
                # stored (peek_header then check_crc read each header twice).
                offset, ts, epoch, length, crc = unpack(view, pos)
                if length > MAX_BODY_BYTES:
                    raise InvalidRecordsError(f"record at byte {pos}: length {length} over limit")
                size = HEADER_SIZE + length
                if n - pos < size:
                    break
                head = crc32(view[pos : pos + CRC_COVERED_HEADER], 0)
                if crc32(view[pos + HEADER_SIZE : pos + size], head) != crc:
                    raise InvalidRecordsError(f"record at byte {pos}: CRC mismatch")
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
                return leo
            if not state.log_start <= state.hw <= leo:  # HW <= LEO, checked before writing
                raise InvariantViolation(
                    f"append_raw at LEO {leo}: HW {state.hw}, log start {state.log_start} "
                    f"in {state.dir}"
                )
            # The leader's bytes are written as they arrived (a view, not a copy).
            whole = view[:pos] if pos < n else view
            seg = self._prepare_segment(pos, offsets[0], offsets[-1], max(stamps))
            st = seg.state
            # Offsets increase across the log too: the active segment ends below the batch
            # (the records were checked against the LEO above).
            if st.next_offset > offsets[0]:
                raise InvariantViolation(
                    f"append_raw of {offsets[0]}..: {seg.log_path} already ends at "
                    f"{st.next_offset} (LEO {leo})"
                )
            # Time-index entries carry the segment's running max timestamp (spec §4).
            running = list(accumulate(stamps, max, initial=st.max_timestamp))[1:]
            abs_starts = [st.size + s for s in starts]
            points = index_points(
                seg.last_indexed_position, state.config.index_interval_bytes, abs_starts
            )
            entries = IndexEntries(
                [offsets[i] for i in points],
                [abs_starts[i] for i in points],
                [running[i] for i in points],
            )
            seg.append(whole, offsets[-1], running[-1], stamps[0], entries, None, offsets[0])
            new_leo = offsets[-1] + 1
            with state.lock:
                state.leo = new_leo
            state.appended_bytes += pos
            state.last_ts = max(state.last_ts, running[-1])
            for epoch, offset in new_epochs:
                state.epochs.assign(epoch, offset)
            return new_leo

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
        state = self._state
        seg = state.segments[-1]
        st = seg.state
        if st.size == 0:
            if last_offset - seg.base_offset > U32_MAX:
                state.replace_empty_active(first_offset)
                return state.segments[-1]
            return seg
        cfg = state.config
        if (
            st.size + batch_bytes > cfg.segment_max_bytes
            or st.size + batch_bytes > U32_MAX
            or last_offset - seg.base_offset > U32_MAX
            or (
                seg.first_timestamp is not None
                and timestamp - seg.first_timestamp >= cfg.segment_max_age_s * 1e9
            )
        ):
            state.roll(first_offset)
        return state.segments[-1]

    def roll(self) -> bool:
        """See :meth:`jetserver.storage.Log.roll`."""
        state = self._state
        with state.write_lock:
            state.check_open()
            if state.segments[-1].state.size == 0:
                return False
            state.roll(state.leo)
            return True
