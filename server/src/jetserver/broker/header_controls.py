"""Header controls of plain NATS messages (spec/envelope.md, "Header controls").

A publisher without a jet library steers how its plain message is stored with NATS
headers; names are matched without regard to case and are not stored as user headers:

- ``Jet-Ack: none|leader|all``: the ack policy of a plain request (default LEADER; no reply
  subject: no ack whatever it says).
- ``Jet-Key: <bytes>``: the record's key (compaction, partitioning by the publisher).
- ``Jet-Expected-Offset: <n>``: store the message only if it gets offset ``n``; otherwise
  it is refused with WRONG_EXPECTED_OFFSET (optimistic concurrency, like Liftbridge's
  ExpectedOffset and JetStream's ``Nats-Expected-Last-Sequence``).
- ``Jet-Expected-Key-Offset: <n>|-1``: on a compacted stream, store the keyed message only
  if its key's last live record is at offset ``n`` (-1: the key has none); otherwise it is
  refused with WRONG_EXPECTED_KEY_OFFSET naming the key's offset (per-key compare-and-set,
  like JetStream's ``Nats-Expected-Last-Subject-Sequence``; broker/append_checks.py).
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
from jetsdk.codec.record_controls import (
    EXPECTED_KEY_OFFSET_HEADER,
    EXPECTED_OFFSET_HEADER,
    MSG_ID_HEADER,
    RecordControls,
    record_controls,
)

ACK = "jet-ack"
KEY = "jet-key"
EXPECTED_OFFSET = EXPECTED_OFFSET_HEADER.lower()
EXPECTED_KEY_OFFSET = EXPECTED_KEY_OFFSET_HEADER.lower()
MSG_ID = MSG_ID_HEADER.lower()
_NAMES = frozenset((ACK, KEY, EXPECTED_OFFSET, EXPECTED_KEY_OFFSET, MSG_ID))
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
    expected_key_offset: int | None = None
    """``Jet-Expected-Key-Offset`` (-1: the key must have no live record), or None."""


def read_controls(headers: tuple[tuple[str, bytes], ...]) -> Controls | None:
    """The controls in ``headers``, or None if there are none (the common case).

    ``Jet-Ack`` and ``Jet-Key`` are read here; the controls a Produce message has too
    (``Jet-Expected-Offset``, ``Jet-Expected-Key-Offset``, ``Nats-Msg-Id``) by
    :func:`~jetsdk.codec.record_controls.record_controls`, the one parser of both paths.
    With more than one bad value, ``error`` names a record control's first."""
    if not any(name.lower() in _NAMES for name, _ in headers):
        return None
    rest: list[tuple[str, bytes]] = []
    policy: AckPolicy | None = None
    key: bytes | None = None
    error = ""
    for name, value in headers:
        lowered = name.lower()
        if lowered == ACK:
            policy = _POLICIES.get(value.strip().lower())
            if policy is None:
                error = f"Jet-Ack must be none, leader or all, not {value[:40]!r}"
        elif lowered == KEY:
            key = value
        else:
            rest.append((name, value))
    record = record_controls(tuple(rest)) or RecordControls(tuple(rest), None, None, "")
    return Controls(
        record.headers,
        policy,
        key,
        record.expected_offset,
        record.msg_id,
        record.error or error,
        record.expected_key_offset,
    )
