"""Publishing acks: the acks of one batch that go to the same inbox leave as one message.

One ack alone is a kind 1 envelope; several are a kind 2 batch, split so that no NATS
message exceeds :data:`MAX_ACK_PAYLOAD_BYTES` or the envelope's count limit.
"""

from __future__ import annotations

from collections.abc import Iterable

from jetsdk.codec.envelope import MAX_ACKS_PER_BATCH, Ack, encode_ack, encode_acks
from jetserver.nats_link import NatsLink

MAX_ACK_PAYLOAD_BYTES = 256 * 1024
"""Bound on one ack batch message (well below NATS's default 1 MiB max_payload)."""
_ACK_FIXED_BYTES = 2 + 4 + 8 + 8 + 2 + 1 + 2 + 2
"""Encoded size of an ack without its strings."""


def ack_size(ack: Ack) -> int:
    """Encoded size of ``ack`` inside a batch."""
    return (
        _ACK_FIXED_BYTES
        + len(ack.stream.encode())
        + len(ack.correlation_id.encode())
        + len(ack.error_message.encode())
    )


def encode_ack_payloads(acks: list[Ack]) -> list[bytes]:
    """The NATS payloads carrying ``acks`` (all for one inbox), in order."""
    if len(acks) == 1:
        return [encode_ack(acks[0])]
    payloads: list[bytes] = []
    chunk: list[Ack] = []
    size = 0
    for ack in acks:
        n = ack_size(ack)
        if chunk and (size + n > MAX_ACK_PAYLOAD_BYTES or len(chunk) >= MAX_ACKS_PER_BATCH):
            payloads.append(encode_ack(chunk[0]) if len(chunk) == 1 else encode_acks(chunk))
            chunk, size = [], 0
        chunk.append(ack)
        size += n
    if chunk:
        payloads.append(encode_ack(chunk[0]) if len(chunk) == 1 else encode_acks(chunk))
    return payloads


def group_by_inbox(items: Iterable[tuple[str, Ack]]) -> dict[str, list[Ack]]:
    """``(inbox, ack)`` pairs grouped by inbox, keeping order within each inbox."""
    out: dict[str, list[Ack]] = {}
    for inbox, ack in items:
        out.setdefault(inbox, []).append(ack)
    return out


async def publish_acks(link: NatsLink, items: Iterable[tuple[str, Ack]]) -> None:
    """Publish the acks, one message (or a few for huge batches) per inbox.

    Best effort: an ack that cannot be published while NATS is away is dropped (the
    producer times out and retries; see spec/acks.md).
    """
    for inbox, acks in group_by_inbox(items).items():
        for payload in encode_ack_payloads(acks):
            await link.publish_best_effort(inbox, payload)
