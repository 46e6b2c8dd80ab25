"""Sequence marks: an idempotent producer's Produce request carried through NATS.

A server that publishes the messages of a Produce request with a producer id to NATS,
where the partition's leader stores them (a server that does not lead the partition, a
replicated partition's NONE and LEADER acks, or the copies a replicated partition's leader
publishes of what it appended directly, for a new leader elected meanwhile), marks each
message with the NATS header ``Jet-Seq``: ``start`` on the request's first message if the
request has the sequence-start flag (Produce flags bit 1), ``next`` on every other one.
The leader checks a marked message's sequence as it checks a Produce request's
(``AppendBatch.out_of_order``, spec/protocol.md "Sequences"): a sequence that skips one
it has not stored is refused OUT_OF_ORDER_SEQUENCE (to its ack inbox; the producing
server answers its client, which sends again in order). Unmarked messages (plain NATS
publishers) are stored as before. A server that does not know the header ignores it (a
NATS header on an envelope), so mixed versions store as before (spec/envelope.md,
"Sequence marks").
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["SEQ_HEADER", "SEQ_NEXT_BLOCK", "SEQ_START_BLOCK", "marks_of", "seq_mark"]

SEQ_HEADER = "Jet-Seq"
"""The NATS header of a message a server published for a sequenced Produce request."""
SEQ_START_BLOCK = b"NATS/1.0\r\nJet-Seq: start\r\n\r\n"
"""The whole header block of the first message of a request with the sequence-start flag."""
SEQ_NEXT_BLOCK = b"NATS/1.0\r\nJet-Seq: next\r\n\r\n"
"""The whole header block of any other message of a sequenced request."""
_LOWER = SEQ_HEADER.lower()


def marks_of(has_producer: bool, starts: bool) -> tuple[bytes, bytes | None]:
    """``(header_block, first_block)`` for ``NatsLink.publish_many`` of a Produce
    request's messages: none without a producer id; else :data:`SEQ_NEXT_BLOCK` on each,
    :data:`SEQ_START_BLOCK` on the first if the request ``starts`` a sequence."""
    if not has_producer:
        return b"", None
    return SEQ_NEXT_BLOCK, SEQ_START_BLOCK if starts else None


def seq_mark(headers: Sequence[tuple[str, bytes]]) -> bool | None:
    """The mark in ``headers`` (NATS header lines): None: not marked (not checked); True:
    ``start``; False: ``next`` (or any other value: checked, not a start)."""
    for name, value in headers:
        if name.lower() == _LOWER:
            return value.strip().lower() == b"start"
    return None
