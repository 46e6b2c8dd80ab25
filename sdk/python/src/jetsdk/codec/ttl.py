"""Per-key TTL: the stored ``Jet-TTL`` header of a keyed record (spec/storage.md §11.2).

A keyed record with a non-empty value and ``Jet-TTL: <ms>`` expires ``ms`` milliseconds
after its timestamp; from then on the key index, compaction and tables treat it as a
tombstone written at the expiry instant. A malformed value means no TTL (for every reader
alike; the server stores the header as it came). Pure.
"""

from __future__ import annotations

TTL_HEADER = "Jet-TTL"
"""The header's name (matched without regard to case)."""
MAX_TTL_MS = 3_155_760_000_000
"""Longest TTL: 100 years in milliseconds (13 digits)."""
_MAX_DIGITS = 13
_LOWER = TTL_HEADER.lower()


def parse_ttl_ms(value: bytes) -> int | None:
    """The TTL a ``Jet-TTL`` value names, in ms, or None if it is malformed (not 1 to 13
    ASCII digits, or 0, or above :data:`MAX_TTL_MS`)."""
    if not 0 < len(value) <= _MAX_DIGITS or not value.isdigit():
        return None
    ms = int(value)
    return ms if 0 < ms <= MAX_TTL_MS else None


def ttl_ms(headers: tuple[tuple[str, bytes], ...]) -> int | None:
    """The TTL of a record with ``headers`` (the first ``Jet-TTL``), or None."""
    for name, value in headers:
        if len(name) == 7 and name.lower() == _LOWER:
            return parse_ttl_ms(value)
    return None


def expiry_ns(
    key: bytes | None, value: bytes, timestamp: int, headers: tuple[tuple[str, bytes], ...]
) -> int | None:
    """When a record expires (ns since the epoch), or None if it does not: only a keyed
    record with a value and a well-formed ``Jet-TTL`` does."""
    if key is None or not value or not headers:
        return None
    ms = ttl_ms(headers)
    return None if ms is None else timestamp + ms * 1_000_000


def dead_since_ns(
    key: bytes | None, value: bytes, timestamp: int, headers: tuple[tuple[str, bytes], ...]
) -> int | None:
    """Since when a keyed record reads as a delete: a tombstone's timestamp, an expiring
    record's expiry (possibly in the future), else None (compaction's rule, storage.md §11)."""
    if key is None:
        return None
    if not value:
        return timestamp
    return expiry_ns(key, value, timestamp, headers)
