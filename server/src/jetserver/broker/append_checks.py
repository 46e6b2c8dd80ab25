"""Preconditions a message sets on its own append, checked by the partition leader's
sequencer just before the message joins the batch it appends (so atomically with the
append: nothing is appended in between). Plain NATS messages (header controls) and Produce
messages (:mod:`jetsdk.codec.record_controls`, both Produce paths) alike:

- ``Jet-Expected-Offset``: the message must get exactly that offset;
- ``Jet-Expected-Key-Offset`` (compacted streams only): the key's latest live record must
  be at that offset (-1: the key must have none), per the partition's
  :class:`~jetserver.broker.key_index.KeyIndex`.

A refusal (:data:`Refusal`) becomes the message's error ack: WRONG_EXPECTED_OFFSET, or
WRONG_EXPECTED_KEY_OFFSET whose offset field is the key's current offset (-1: absent), or
INVALID_ARGUMENT, or UNAVAILABLE (retriable) while the key index is being rebuilt from a long
log. The sequencer (:meth:`jetserver.broker.sequencer.Sequencer.precondition_error`) asks.
"""

from __future__ import annotations

from collections.abc import Sequence

import attrs

from jetsdk.codec.error_codes import ErrorCode
from jetsdk.codec.errors import CodecError
from jetsdk.codec.record_controls import RecordControls
from jetserver.broker.header_controls import Controls
from jetserver.broker.key_index import ABSENT, IndexBehind, IndexFull, KeyIndex, scan_body
from jetserver.storage import Log
from jetserver.storage.errors import StorageError
from jetserver.storage.framing import Body

CONTENDED_CHECKS = 64
"""Key checks that pass after one refused while lone compare-and-sets are still tried for a
refusal ahead of their append (:attr:`AppendChecks.contended`)."""
Refusal = tuple[ErrorCode, str, int]
"""Why a message is refused: the error code, its text, and the ack's offset field (the key's
current offset for WRONG_EXPECTED_KEY_OFFSET, else -1)."""


@attrs.define(eq=False)
class AppendChecks:
    """The append preconditions of one partition (module docstring)."""

    keys: KeyIndex = attrs.field(factory=KeyIndex)
    """Last live offset per key (used by ``Jet-Expected-Key-Offset`` only)."""
    lost_races: int = 0
    """Compare-and-sets refused so far (WRONG_EXPECTED_OFFSET, WRONG_EXPECTED_KEY_OFFSET):
    each is a writer that lost a race and is likely to retry at once."""
    contended: int = 0
    """Key checks left before a lone compare-and-set is no longer tried for a refusal
    ahead of its append (:data:`CONTENDED_CHECKS` after each one refused, down by one per
    one that passes): writers race on this partition. A partition whose compare-and-sets
    all pass (a lone writer) never pays for that early check."""
    refused_at_once: int = 0
    """Of those, lone compare-and-sets answered before any append began
    (:func:`jetserver.broker.current_values.refused_now`; a metric and a test hook)."""
    refused_lean: int = 0
    """Of those, answered from the request's head and its message alone, no envelope or
    record built (:func:`jetserver.broker.current_values.lean_refusal`; a test hook)."""
    appended_lean: int = 0
    """Lone compare-and-sets with an ALL ack appended and answered in one step, none of
    the general path's per-request objects (:mod:`jetserver.broker.produce_cas`; a test
    hook)."""

    def refusal(
        self,
        log_: Log,
        epoch: int,
        compact: bool,
        body: bytes,
        controls: Controls | RecordControls,
        pending: list[bytes],
        cuts: int = 0,
    ) -> Refusal | None:
        """None if the message with record ``body`` may be appended to ``log_`` (leader
        epoch ``epoch``; ``compact``: the stream is compacted) after ``pending`` (the bodies
        of its batch before it); otherwise why not. ``cuts``: the partition's fsync
        failures so far (each cut the log back: the key index is rebuilt)."""
        expected = controls.expected_offset
        if expected is not None and expected != log_.log_end_offset + len(pending):
            got = log_.log_end_offset + len(pending)
            text = f"expected offset {expected}, but the next offset is {got}"
            self.lost_races += 1
            return (ErrorCode.WRONG_EXPECTED_OFFSET, text, -1)
        expected_key = controls.expected_key_offset
        if expected_key is None:
            return None
        try:
            key, _tombstone = scan_body(body)
        except CodecError as exc:
            return (ErrorCode.INVALID_ARGUMENT, str(exc), -1)
        if key is None:
            return (ErrorCode.INVALID_ARGUMENT, "Jet-Expected-Key-Offset needs a key", -1)
        return self.key_refusal(log_, epoch, compact, key, expected_key, pending, cuts)

    def key_refusal(
        self,
        log_: Log,
        epoch: int,
        compact: bool,
        key: bytes,
        expected_key: int,
        pending: list[bytes],
        cuts: int = 0,
    ) -> Refusal | None:
        """:meth:`refusal`'s ``Jet-Expected-Key-Offset`` check of a message whose key is
        ``key`` (from its record body, or from where it lies in the request)."""
        if not compact:
            text = "Jet-Expected-Key-Offset needs a compacted stream"
            return (ErrorCode.INVALID_ARGUMENT, text, -1)
        try:
            current = self.keys.offset_of(log_, epoch, key, pending, cuts)
        except IndexBehind as exc:  # retriable: the next check reads on
            return (ErrorCode.UNAVAILABLE, f"{exc}; retry", -1)
        except IndexFull:
            text = f"the key index holds {self.keys.max_keys} keys and not {key[:40]!r}"
            return (ErrorCode.INVALID_ARGUMENT, text, -1)
        except (CodecError, StorageError, OSError) as exc:
            return (ErrorCode.STORAGE_ERROR, f"key index: {exc}", -1)
        if current == expected_key:
            if self.contended:
                self.contended -= 1
            return None
        self.contended = CONTENDED_CHECKS
        now = "has no live record" if current == ABSENT else f"is at offset {current}"
        text = f"key {key[:40]!r} {now}, not {expected_key}"
        self.lost_races += 1
        return (ErrorCode.WRONG_EXPECTED_KEY_OFFSET, text, current)

    def appended(
        self, epoch: int, cuts: int, first: int, timestamp: int, bodies: Sequence[Body]
    ) -> None:
        """The sequencer appended ``bodies`` at ``first`` (one ``timestamp``): the key index
        takes them without reading them back (:meth:`KeyIndex.appended`) if it is caught
        up; a malformed body is left to the next check's read of the log."""
        try:  # per append on every partition: no context manager object each time
            self.keys.appended(epoch, cuts, first, timestamp, bodies)
        except CodecError:
            return  # the next check reads the log
