"""The read side of a partition log: byte ranges of stored records, lookups by time.

:class:`Reader` reads a :class:`~jetserver.storage.log_state.LogState` under its short
snapshot lock only, so reads never wait for a writer's I/O.

Thread-safety: any thread, any time (see :class:`~jetserver.storage.Log`).
"""

from __future__ import annotations

from bisect import bisect_right

from jetsdk.codec.errors import CodecError
from jetserver.storage.errors import (
    CorruptRangeError,
    InvalidArgumentError,
    LogClosedError,
    OffsetOutOfRange,
)
from jetserver.storage.files import FileLease
from jetserver.storage.log_state import LogState
from jetserver.storage.read_slice import ReadSlice, empty_slice


class Reader:
    """Reads one log's records (see :meth:`jetserver.storage.Log.read`)."""

    def __init__(self, state: LogState) -> None:
        self._state = state

    def read(self, offset: int, max_bytes: int, max_offset: int | None = None) -> ReadSlice:
        """See :meth:`jetserver.storage.Log.read`."""
        if max_bytes < 0:
            raise InvalidArgumentError(f"max_bytes must be >= 0, got {max_bytes}")
        state = self._state
        skip_before = -1  # base offsets <= this were found empty past ``offset``
        while True:
            with state.lock:
                state.check_open()
                leo = state.leo
                if offset < state.log_start or offset > leo:
                    raise OffsetOutOfRange(offset, state.log_start, leo)
                bound = state.hw if max_offset is None else min(max_offset, leo)
                if offset >= bound:
                    return empty_slice(offset, offset)
                segments = state.segments
                i = max(bisect_right(state.bases, max(offset, skip_before)) - 1, 0)
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
                if bound >= st.next_offset:  # a reader keeping up: the last append's bytes?
                    tail = seg.read_tail(offset, max_bytes, st)
                    if tail is not None:
                        pos, last = tail
                        return ReadSlice(-1, pos, len(last), offset, st.next_offset, data=last)
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
            data = seg.tail_bytes(start, end_pos, st.generation)
            if data is not None:  # what the last append wrote: from memory
                lease.release()
                return ReadSlice(-1, start, end_pos - start, first, next_offset, data=data)
            return ReadSlice(seg.file.fd, start, end_pos - start, first, next_offset, lease)

    def read_tail(self, offset: int, max_bytes: int) -> tuple[bytes, int] | None:
        """See :meth:`jetserver.storage.Log.read_tail`."""
        state = self._state
        with state.lock:
            segments = state.segments
            if state.closed or offset < state.log_start or not segments:
                return None
            seg = segments[-1]
            st = seg.state
            if st.next_offset > state.hw:
                return None
            tail = seg.read_tail(offset, max_bytes, st)
            return None if tail is None else (tail[1], st.next_offset)

    def offset_for_timestamp(self, timestamp_ns: int, max_offset: int | None = None) -> int | None:
        """See :meth:`jetserver.storage.Log.offset_for_timestamp`."""
        state = self._state
        with state.lock:
            state.check_open()
            bound = state.hw if max_offset is None else min(max_offset, state.leo)
            log_start = state.log_start
            segments = state.segments
        for seg in segments:
            st = seg.state
            if st.max_timestamp < timestamp_ns:
                continue
            with state.lock:
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
