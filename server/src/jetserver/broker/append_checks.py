"""Preconditions a message sets on its own append, checked by the partition leader's
sequencer just before the message joins the batch it appends (so atomically with the
append: nothing is appended in between). Plain NATS messages (header controls) and Produce
messages (:mod:`jetsdk.codec.record_controls`, both Produce paths) alike:

- ``Jet-Expected-Offset``: the message must get exactly that offset;
- ``Jet-Expected-Key-Offset`` (compacted streams only): the key's latest live record must
  be at that offset (-1: the key must have none), per the partition's
  :class:`~jetserver.broker.key_index.KeyIndex`.

A refusal is an error ack: WRONG_EXPECTED_OFFSET, or WRONG_EXPECTED_KEY_OFFSET whose
offset field is the key's current offset (-1: absent), or INVALID_ARGUMENT, or UNAVAILABLE
(retriable) while the key index is being rebuilt from a long log.
"""

from __future__ import annotations

from typing import Protocol

import attrs

from jetsdk.codec.error_codes import AckPolicy, ErrorCode
from jetsdk.codec.errors import CodecError
from jetsdk.codec.record_controls import RecordControls
from jetserver.broker.acks import PartitionAck
from jetserver.broker.header_controls import Controls
from jetserver.broker.key_index import ABSENT, IndexBehind, IndexFull, KeyIndex, scan_body
from jetserver.storage import Log
from jetserver.storage.errors import StorageError

Refusal = list[tuple[str, PartitionAck]]
"""The error ack to send for a refused message (empty with ack policy NONE)."""


class Appender(Protocol):
    """The partition replica whose sequencer asks."""

    log: Log
    leader_epoch: int
    compact: bool


class Asker(Protocol):
    """Who asked for the ack (the sequencer's per-message tuple)."""

    @property
    def inbox(self) -> str: ...
    @property
    def corr(self) -> str: ...
    @property
    def policy(self) -> AckPolicy: ...


@attrs.define(eq=False)
class AppendChecks:
    """The append preconditions of one partition (module docstring)."""

    keys: KeyIndex = attrs.field(factory=KeyIndex)
    """Last live offset per key (used by ``Jet-Expected-Key-Offset`` only)."""

    def refusal(
        self,
        appender: Appender,
        body: bytes,
        controls: Controls | RecordControls,
        pending: list[bytes],
        who: Asker,
    ) -> Refusal | None:
        """None if the message with record ``body`` may be appended after ``pending``
        (the bodies of its batch before it); otherwise the error ack to send."""
        log_, epoch, compact = appender.log, appender.leader_epoch, appender.compact
        expected = controls.expected_offset
        if expected is not None and expected != log_.log_end_offset + len(pending):
            got = log_.log_end_offset + len(pending)
            text = f"expected offset {expected}, but the next offset is {got}"
            return _ack(who, ErrorCode.WRONG_EXPECTED_OFFSET, text)
        expected_key = controls.expected_key_offset
        if expected_key is None:
            return None
        try:
            key, _tombstone = scan_body(body)
        except CodecError as exc:
            return _ack(who, ErrorCode.INVALID_ARGUMENT, str(exc))
        if key is None:
            return _ack(who, ErrorCode.INVALID_ARGUMENT, "Jet-Expected-Key-Offset needs a key")
        if not compact:
            text = "Jet-Expected-Key-Offset needs a compacted stream"
            return _ack(who, ErrorCode.INVALID_ARGUMENT, text)
        try:
            current = self.keys.offset_of(log_, epoch, key, pending)
        except IndexBehind as exc:  # retriable: the next check reads on
            return _ack(who, ErrorCode.UNAVAILABLE, f"{exc}; retry")
        except IndexFull:
            text = f"the key index holds {self.keys.max_keys} keys and not {key[:40]!r}"
            return _ack(who, ErrorCode.INVALID_ARGUMENT, text)
        except (CodecError, StorageError, OSError) as exc:
            return _ack(who, ErrorCode.STORAGE_ERROR, f"key index: {exc}")
        if current == expected_key:
            return None
        now = "has no live record" if current == ABSENT else f"is at offset {current}"
        text = f"key {key[:40]!r} {now}, not {expected_key}"
        return _ack(who, ErrorCode.WRONG_EXPECTED_KEY_OFFSET, text, current)


def _ack(who: Asker, code: ErrorCode, text: str, offset: int = -1) -> Refusal:
    if who.policy == AckPolicy.NONE:
        return []
    return [(who.inbox, PartitionAck(offset, -1, who.corr, who.policy, code, text))]
