"""Header controls of plain NATS messages (spec/envelope.md, "Header controls").

A publisher without a jet library steers how its plain message is stored with NATS
headers; names are matched without regard to case and are not stored as user headers:

- ``Jet-Ack: none|leader|all``: the ack policy of a plain request (default LEADER; no reply
  subject: no ack whatever it says).
- ``Jet-Key: <bytes>``: the record's key (compaction, partitioning by the publisher).
- ``Jet-Expected-Offset: <n>``: store the message only if it gets offset ``n``; otherwise
  it is refused with WRONG_EXPECTED_OFFSET (optimistic concurrency, like Liftbridge's
  ExpectedOffset and JetStream's ``Nats-Expected-Last-Sequence``).
- ``Nats-Msg-Id: <id>``: NATS's own name; a message whose id was stored within the
  stream's ``duplicate_window_s`` is not stored again and is acked as a duplicate. Unlike
  the ``Jet-`` controls it is stored (a new leader rebuilds the ids from its log).

A bad value (an unknown policy, an offset that is not a non-negative integer) refuses the
message with INVALID_ARGUMENT. The messages of a Produce request honour
``Jet-Expected-Offset`` and ``Nats-Msg-Id`` the same way
(:mod:`jetsdk.codec.record_controls`). Pure.
"""

from __future__ import annotations

from typing import NamedTuple

from jetsdk.codec.error_codes import AckPolicy
from jetsdk.codec.record_controls import parse_expected_offset

ACK = "jet-ack"
KEY = "jet-key"
EXPECTED_OFFSET = "jet-expected-offset"
MSG_ID = "nats-msg-id"
_NAMES = frozenset((ACK, KEY, EXPECTED_OFFSET, MSG_ID))
_POLICIES = {b"none": AckPolicy.NONE, b"leader": AckPolicy.LEADER, b"all": AckPolicy.ALL}


class Controls(NamedTuple):
    """What a plain message's headers ask for."""

    headers: tuple[tuple[str, bytes], ...]
    """The headers to store (the controls removed)."""
    policy: AckPolicy | None
    """``Jet-Ack``, or None."""
    key: bytes | None
    """``Jet-Key``, or None."""
    expected_offset: int | None
    """``Jet-Expected-Offset``, or None."""
    msg_id: bytes | None
    """``Nats-Msg-Id`` (stored with the record too, so a new leader rebuilds its
    deduplication table from the log), or None."""
    error: str
    """Why a control's value is bad ("" if none is)."""


def read_controls(headers: tuple[tuple[str, bytes], ...]) -> Controls | None:
    """The controls in ``headers``, or None if there are none (the common case)."""
    if not any(name.lower() in _NAMES for name, _ in headers):
        return None
    kept: list[tuple[str, bytes]] = []
    policy: AckPolicy | None = None
    key: bytes | None = None
    expected: int | None = None
    msg_id: bytes | None = None
    error = ""
    for name, value in headers:
        lowered = name.lower()
        if lowered == ACK:
            policy = _POLICIES.get(value.strip().lower())
            if policy is None:
                error = f"Jet-Ack must be none, leader or all, not {value[:40]!r}"
        elif lowered == KEY:
            key = value
        elif lowered == EXPECTED_OFFSET:
            expected = parse_expected_offset(value)
            if expected is None:
                error = f"Jet-Expected-Offset must be a non-negative integer, not {value[:40]!r}"
        else:
            if lowered == MSG_ID:
                msg_id = value
            kept.append((name, value))
    return Controls(tuple(kept), policy, key, expected, msg_id, error)
