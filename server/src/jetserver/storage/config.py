"""Per-partition log settings (spec/storage.md, "Configuration")."""

from __future__ import annotations

import attrs

from jetsdk.codec.stream_settings import (
    DEFAULT_DELETE_RETENTION_S,
    DEFAULT_SEGMENT_MAX_AGE_S,
    DEFAULT_SEGMENT_MAX_BYTES,
    MAX_COUNT,
    MAX_DURATION_S,
    MAX_SEGMENT_MAX_BYTES,
)
from jetserver.config.validators import at_most, optional, positive, positive_int

DEFAULT_OPEN_SEALED_FILES = 1024
"""How many sealed segment files an :class:`~jetserver.storage.files.OpenFileCache` keeps
open by default (``[storage] open_sealed_files``)."""

__all__ = [
    "DEFAULT_DELETE_RETENTION_S",
    "DEFAULT_INDEX_INTERVAL_BYTES",
    "DEFAULT_SEGMENT_MAX_AGE_S",
    "DEFAULT_SEGMENT_MAX_BYTES",
    "MAX_INDEX_INTERVAL_BYTES",
    "MAX_SEGMENT_BYTES",
    "LogConfig",
]

DEFAULT_INDEX_INTERVAL_BYTES = 4096
"""Bytes of log between two offset-index (and time-index) entries."""

MAX_SEGMENT_BYTES = MAX_SEGMENT_MAX_BYTES
"""Largest ``segment_max_bytes``: index positions are u32, and one batch may overshoot."""
MAX_INDEX_INTERVAL_BYTES = 2**30
"""Largest ``index_interval_bytes``."""


_positive_int = positive_int


# Durations and sizes are bounded above as well (the stream settings' limits,
# spec/protocol.md): ``int(seconds * 1e9)`` and ``now_ns - age_ns`` never overflow.
_positive_float = positive(maximum=MAX_DURATION_S)


_optional_duration = optional(at_most(MAX_DURATION_S))


_optional_count = optional(at_most(MAX_COUNT))


_non_negative_float = at_most(MAX_DURATION_S)


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
    retention_max_age_s: float | None = attrs.field(default=None, validator=_optional_duration)
    """Delete whole segments whose newest record is older than this; None: no age limit."""
    retention_max_bytes: int | None = attrs.field(default=None, validator=_optional_count)
    """Delete the oldest segments while the log is larger than this; None: no size limit."""
    retention_max_messages: int | None = attrs.field(default=None, validator=_optional_count)
    """Delete the oldest segments while the log spans more offsets; None: no limit."""
    compact: bool = False
    """Key compaction enabled (``Log.compact`` is a no-op otherwise)."""
    delete_retention_s: float = attrs.field(
        default=DEFAULT_DELETE_RETENTION_S, validator=_non_negative_float
    )
    """Compaction drops a tombstone once its timestamp is older than this."""
