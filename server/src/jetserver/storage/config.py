"""Per-partition log settings (spec/storage.md, "Configuration")."""

from __future__ import annotations

import attrs

from jetserver.validators import non_negative, optional_non_negative, positive, positive_int

DEFAULT_SEGMENT_MAX_BYTES = 256 * 1024 * 1024
"""Roll the active segment once appending would take it past this size."""
DEFAULT_SEGMENT_MAX_AGE_S = 7 * 24 * 3600.0
"""Roll the active segment once a new record is this much newer than its first one."""
DEFAULT_INDEX_INTERVAL_BYTES = 4096
"""Bytes of log between two offset-index (and time-index) entries."""
DEFAULT_DELETE_RETENTION_S = 86400.0
"""How long compaction keeps a tombstone after its timestamp."""

MAX_SEGMENT_BYTES = 2**31 - 1
"""Largest ``segment_max_bytes``: index positions are u32, and one batch may overshoot."""
MAX_INDEX_INTERVAL_BYTES = 2**30
"""Largest ``index_interval_bytes``."""


_positive_int = positive_int


_positive_float = positive()


_optional_non_negative = optional_non_negative()


_non_negative_float = non_negative()


@attrs.frozen
class LogConfig:
    """Settings of one partition log. Invalid values raise ConfigError (a ValueError) at
    construction."""

    segment_max_bytes: int = attrs.field(
        default=DEFAULT_SEGMENT_MAX_BYTES, validator=_positive_int(MAX_SEGMENT_BYTES)
    )
    """Roll before an append would grow the active segment past this many bytes."""
    segment_max_age_s: float = attrs.field(
        default=DEFAULT_SEGMENT_MAX_AGE_S, validator=_positive_float
    )
    """Roll before appending a batch whose timestamp is this much later than the active
    segment's first record."""
    index_interval_bytes: int = attrs.field(
        default=DEFAULT_INDEX_INTERVAL_BYTES, validator=_positive_int(MAX_INDEX_INTERVAL_BYTES)
    )
    """Bytes of log between index entries (smaller: faster lookups, bigger indexes)."""
    retention_max_age_s: float | None = attrs.field(default=None, validator=_optional_non_negative)
    """Delete whole segments whose newest record is older than this; None: no age limit."""
    retention_max_bytes: int | None = attrs.field(default=None, validator=_optional_non_negative)
    """Delete the oldest segments while the log is larger than this; None: no size limit."""
    retention_max_messages: int | None = attrs.field(default=None, validator=_optional_non_negative)
    """Delete the oldest segments while the log spans more offsets; None: no limit."""
    compact: bool = False
    """Key compaction enabled (``Log.compact`` is a no-op otherwise)."""
    delete_retention_s: float = attrs.field(
        default=DEFAULT_DELETE_RETENTION_S, validator=_non_negative_float
    )
    """Compaction drops a tombstone once its timestamp is older than this."""
