"""Fetch: a long poll answered as soon as committed records exist at or after the offset.

The answer is the response header plus a :class:`~jetserver.storage.ReadSlice` of the
segment file; the connection writes the slice with ``os.sendfile`` or pread + send (config
``fetch.io``). Waiting uses the partition's HW event: no polling.
"""

from __future__ import annotations

import attrs

from jetsdk.codec.error_codes import ErrorCode
from jetsdk.codec.messages import FetchRequest
from jetserver.broker.streams import StreamManager
from jetserver.config import LimitsConfig
from jetserver.storage import Log, OffsetOutOfRange, ReadSlice

MAX_GAP_SKIPS = 64
"""Empty reads (compaction gaps) skipped within one Fetch before answering empty."""


@attrs.frozen
class FetchAnswer:
    """What to send back for one Fetch."""

    error_code: int
    """NONE or OFFSET_OUT_OF_RANGE."""
    hw: int
    """High watermark."""
    log_start: int
    """First offset still stored."""
    leo: int
    """Log end offset."""
    records: ReadSlice | None = None
    """The record bytes to send (None: no records). The receiver must close it."""

    @property
    def records_len(self) -> int:
        """Length of the records part."""
        return 0 if self.records is None else self.records.length


async def fetch(streams: StreamManager, limits: LimitsConfig, req: FetchRequest) -> FetchAnswer:
    """Answer ``req``: wait (up to ``max_wait_ms``) for committed data past its offset.

    Raises:
        ApiError: STREAM_NOT_FOUND, PARTITION_NOT_FOUND, UNAVAILABLE.
    """
    replica = streams.replica(req.stream, req.partition)
    log = replica.log
    if req.offset < log.log_start_offset or req.offset > log.log_end_offset:
        return _out_of_range(replica.log)
    # hw <= offset <= leo: wait (a follower's hw may lag the hw a consumer saw elsewhere).
    if req.offset >= log.high_watermark and req.max_wait_ms > 0:
        wait_ms = min(req.max_wait_ms, limits.max_fetch_wait_ms)
        await replica.wait_for_hw_above(req.offset, wait_ms / 1000)
        if replica.closed:
            replica = streams.replica(req.stream, req.partition)  # raises if deleted
            log = replica.log
    hw = log.high_watermark
    if req.offset >= hw:
        return FetchAnswer(ErrorCode.NONE, hw, log.log_start_offset, log.log_end_offset)
    offset = req.offset
    for _ in range(MAX_GAP_SKIPS):
        try:
            records = log.read(offset, max(req.max_bytes, 1), hw)
        except OffsetOutOfRange:
            return _out_of_range(log)
        if records.length:
            return FetchAnswer(
                ErrorCode.NONE, hw, log.log_start_offset, log.log_end_offset, records
            )
        records.close()
        # An empty slice below the HW is a compaction gap: skip it silently.
        if records.next_offset <= offset or records.next_offset >= hw:
            break
        offset = records.next_offset
    return FetchAnswer(ErrorCode.NONE, hw, log.log_start_offset, log.log_end_offset)


def _out_of_range(log: Log) -> FetchAnswer:
    return FetchAnswer(
        ErrorCode.OFFSET_OUT_OF_RANGE, log.high_watermark, log.log_start_offset, log.log_end_offset
    )
