"""Header controls a Produce message carries to the leader (spec/protocol.md §6, "Header
controls"), shared by the SDK, which writes them, and the server, which reads them.

Two of the header controls of plain NATS messages (spec/envelope.md) apply to a message of
a Produce request too, with the same meaning:

- ``Jet-Expected-Offset: <n>``: store the message only if it gets offset ``n``; otherwise
  it is refused with WRONG_EXPECTED_OFFSET. Not stored as a header.
- ``Nats-Msg-Id: <id>``: a message whose id was stored within the stream's
  ``duplicate_window_s`` is not stored again and is answered DUPLICATE_SEQUENCE with the
  stored offset. Stored as a header (a new leader rebuilds the ids from its log).

Names are matched without regard to case. A bad ``Jet-Expected-Offset`` value refuses the
message with INVALID_ARGUMENT. Pure.
"""

from __future__ import annotations

from typing import NamedTuple

__all__ = [
    "EXPECTED_OFFSET_HEADER",
    "MAX_EXPECTED_OFFSET_DIGITS",
    "MSG_ID_HEADER",
    "RecordControls",
    "parse_expected_offset",
    "record_controls",
]

EXPECTED_OFFSET_HEADER = "Jet-Expected-Offset"
"""Header name of the expected offset (optimistic concurrency)."""
MSG_ID_HEADER = "Nats-Msg-Id"
"""Header name of the message id (deduplication within the stream's window)."""
MAX_EXPECTED_OFFSET_DIGITS = 19
"""Most digits of a ``Jet-Expected-Offset`` value (offsets are i64)."""

_EXPECTED = EXPECTED_OFFSET_HEADER.lower()
_MSG_ID = MSG_ID_HEADER.lower()
_NAMES = frozenset((_EXPECTED, _MSG_ID))


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


def parse_expected_offset(value: bytes) -> int | None:
    """The offset a ``Jet-Expected-Offset`` value names, or None if it is not a
    non-negative integer of at most :data:`MAX_EXPECTED_OFFSET_DIGITS` digits."""
    text = value.strip()
    if text.isdigit() and len(text) <= MAX_EXPECTED_OFFSET_DIGITS:
        return int(text)
    return None


def record_controls(headers: tuple[tuple[str, bytes], ...]) -> RecordControls | None:
    """The controls among ``headers``, or None if there are none (the common case)."""
    if not any(name.lower() in _NAMES for name, _ in headers):
        return None
    kept: list[tuple[str, bytes]] = []
    expected: int | None = None
    msg_id: bytes | None = None
    error = ""
    for name, value in headers:
        lowered = name.lower()
        if lowered == _EXPECTED:
            expected = parse_expected_offset(value)
            if expected is None:
                error = f"Jet-Expected-Offset must be a non-negative integer, not {value[:40]!r}"
            continue
        if lowered == _MSG_ID:
            msg_id = value
        kept.append((name, value))
    return RecordControls(tuple(kept), expected, msg_id, error)
