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

from collections.abc import Awaitable, Callable, Sequence

from jetsdk.codec.transcode import EnvelopeBytes

__all__ = ["SEQ_HEADER", "SEQ_NEXT_BLOCK", "SEQ_START_BLOCK", "publish_marked", "seq_mark"]

SEQ_HEADER = "Jet-Seq"
"""The NATS header of a message a server published for a sequenced Produce request."""
SEQ_START_BLOCK = b"NATS/1.0\r\nJet-Seq: start\r\n\r\n"
"""The whole header block of the first message of a request with the sequence-start flag."""
SEQ_NEXT_BLOCK = b"NATS/1.0\r\nJet-Seq: next\r\n\r\n"
"""The whole header block of any other message of a sequenced request."""
_LOWER = SEQ_HEADER.lower()

Publish = Callable[[Sequence[tuple[str, EnvelopeBytes]], bytes], Awaitable[int]]
"""Publishes messages in order with a NATS header block; how many leading ones went."""


async def publish_marked(
    publish: Publish, messages: list[tuple[str, EnvelopeBytes]], sequenced: bool, starts: bool
) -> int:
    """``publish`` (``NatsPort.publish_many`` or ``publish_unstored_copies``) a Produce
    request's ``messages``: unmarked unless ``sequenced`` (a producer id and an ack), else
    :data:`SEQ_START_BLOCK` on the first if the request ``starts`` a sequence and
    :data:`SEQ_NEXT_BLOCK` on the others. Returns how many leading ones were queued."""
    if not sequenced or not messages:
        return await publish(messages, b"")
    if not starts:
        return await publish(messages, SEQ_NEXT_BLOCK)
    first = await publish(messages[:1], SEQ_START_BLOCK)
    if first < 1 or len(messages) == 1:
        return first
    return first + await publish(messages[1:], SEQ_NEXT_BLOCK)


def seq_mark(headers: Sequence[tuple[str, bytes]]) -> bool | None:
    """The mark in ``headers`` (NATS header lines): None: not marked (not checked); True:
    ``start``; False: ``next`` (or any other value: checked, not a start)."""
    for name, value in headers:
        if name.lower() == _LOWER:
            return value.strip().lower() == b"start"
    return None
