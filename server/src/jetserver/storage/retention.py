"""Which segments retention deletes (spec/storage.md, "Retention").

Whole segments only, oldest first, never the active (last) segment and never a segment
holding offsets at or above the high watermark. The oldest segment is deleted while any
limit is exceeded:

* age: its newest record is older than ``retention_max_age_s`` (an empty segment counts
  as expired),
* bytes: the log (all segments) is larger than ``retention_max_bytes``,
* messages: the log spans more than ``retention_max_messages`` offsets
  (``log_end_offset - log_start_offset``, gaps included).

After each deletion the log start offset becomes the next segment's base offset.
"""

from __future__ import annotations

from collections.abc import Sequence

from jetserver.storage.config import LogConfig
from jetserver.storage.segment import NO_TIMESTAMP, Segment


def segments_to_delete(
    segments: Sequence[Segment],
    *,
    config: LogConfig,
    log_start_offset: int,
    log_end_offset: int,
    high_watermark: int,
    now_ns: int,
) -> int:
    """How many of the oldest segments to delete (a prefix of ``segments``)."""
    age_ns = None if config.retention_max_age_s is None else int(config.retention_max_age_s * 1e9)
    total = sum(seg.state.size for seg in segments)
    log_start = log_start_offset
    count = 0
    for i, seg in enumerate(segments[:-1]):
        st = seg.state
        if st.next_offset > high_watermark:
            break
        by_age = age_ns is not None and (
            st.max_timestamp == NO_TIMESTAMP or now_ns - st.max_timestamp > age_ns
        )
        by_bytes = config.retention_max_bytes is not None and total > config.retention_max_bytes
        by_count = (
            config.retention_max_messages is not None
            and log_end_offset - log_start > config.retention_max_messages
        )
        if not (by_age or by_bytes or by_count):
            break
        total -= st.size
        log_start = max(log_start, segments[i + 1].base_offset)
        count += 1
    return count
