"""Header controls a Produce message carries to the leader (spec/protocol.md §6, "Header
controls"), shared by the SDK, which writes them, and the server, which reads them.

Two of the header controls of plain NATS messages (spec/envelope.md) apply to a message of
a Produce request too, with the same meaning:

- ``Jet-Expected-Offset: <n>``: store the message only if it gets offset ``n``; otherwise
  it is refused with WRONG_EXPECTED_OFFSET. Not stored as a header.
- ``Nats-Msg-Id: <id>``: a message whose id was stored within the stream's
  ``duplicate_window_s`` is not stored again and is answered DUPLICATE_SEQUENCE with the
  stored offset. Stored as a header (a new leader rebuilds the ids from its log).

- ``Jet-Expected-Key-Offset: <n>|-1``: on a compacted stream, store the keyed message only
  if its key's latest live record is at offset ``n`` (-1: the key has none); otherwise it is
  refused with WRONG_EXPECTED_KEY_OFFSET naming the key's offset (per-key compare-and-set).
  Not stored as a header.

Names are matched without regard to case. A bad ``Jet-Expected-Offset`` or
``Jet-Expected-Key-Offset`` value refuses the message with INVALID_ARGUMENT. Pure.
"""

from __future__ import annotations

from typing import NamedTuple

__all__ = [
    "EXPECTED_KEY_OFFSET_HEADER",
    "EXPECTED_OFFSET_HEADER",
    "MAX_EXPECTED_OFFSET_DIGITS",
    "MSG_ID_HEADER",
    "RecordControls",
    "parse_expected_key_offset",
    "parse_expected_offset",
    "record_controls",
]

EXPECTED_OFFSET_HEADER = "Jet-Expected-Offset"
"""Header name of the expected offset (optimistic concurrency)."""
EXPECTED_KEY_OFFSET_HEADER = "Jet-Expected-Key-Offset"
"""Header name of the expected offset of the key's latest live record (per-key CAS)."""
MSG_ID_HEADER = "Nats-Msg-Id"
"""Header name of the message id (deduplication within the stream's window)."""
MAX_EXPECTED_OFFSET_DIGITS = 19
"""Most digits of a ``Jet-Expected-Offset`` value (offsets are i64)."""

_EXPECTED = EXPECTED_OFFSET_HEADER.lower()
_EXPECTED_KEY = EXPECTED_KEY_OFFSET_HEADER.lower()
_MSG_ID = MSG_ID_HEADER.lower()
_NAMES = frozenset((_EXPECTED, _EXPECTED_KEY, _MSG_ID))


class RecordControls(NamedTuple):
    """What a Produce message's headers ask of the leader."""

    headers: tuple[tuple[str, bytes], ...]
    """The headers to store (``Jet-Expected-Offset`` removed)."""
    expected_offset: int | None
    """``Jet-Expected-Offset``, or None."""
    msg_id: bytes | None
    """``Nats-Msg-Id``, or None."""
    error: str
    """Why a control's value is bad ("" if none is)."""
    expected_key_offset: int | None = None
    """``Jet-Expected-Key-Offset`` (-1: the key must have no live record), or None."""


def parse_expected_offset(value: bytes) -> int | None:
    """The offset a ``Jet-Expected-Offset`` value names, or None if it is not a
    non-negative integer of at most :data:`MAX_EXPECTED_OFFSET_DIGITS` digits."""
    text = value.strip()
    if text.isdigit() and len(text) <= MAX_EXPECTED_OFFSET_DIGITS:
        return int(text)
    return None


def parse_expected_key_offset(value: bytes) -> int | None:
    """The offset a ``Jet-Expected-Key-Offset`` value names (-1: absent), or None if it is
    neither -1 nor a non-negative integer of at most :data:`MAX_EXPECTED_OFFSET_DIGITS`
    digits."""
    return -1 if value.strip() == b"-1" else parse_expected_offset(value)


def record_controls(headers: tuple[tuple[str, bytes], ...]) -> RecordControls | None:
    """The controls among ``headers``, or None if there are none (the common case)."""
    if not any(name.lower() in _NAMES for name, _ in headers):
        return None
    kept: list[tuple[str, bytes]] = []
    expected: int | None = None
    msg_id: bytes | None = None
    key_offset: int | None = None
    error = ""
    for name, value in headers:
        lowered = name.lower()
        if lowered == _EXPECTED_KEY:
            key_offset = parse_expected_key_offset(value)
            if key_offset is None:
                error = f"Jet-Expected-Key-Offset must be -1 or an offset, not {value[:40]!r}"
            continue
        if lowered == _EXPECTED:
            expected = parse_expected_offset(value)
            if expected is None:
                error = f"Jet-Expected-Offset must be a non-negative integer, not {value[:40]!r}"
            continue
        if lowered == _MSG_ID:
            msg_id = value
        kept.append((name, value))
    return RecordControls(tuple(kept), expected, msg_id, error, key_offset)
