"""Publishing acks: the acks of one batch that go to the same inbox leave as one message.

A partition builds one :class:`PartitionAck` per acknowledged message (a tuple: this is per
message work on the ingest hot path) and hands them to :meth:`AckRouter.publish` with the
inbox each goes to. One ack alone is a kind 1 envelope; several for one inbox are a kind 2
batch, split so that no NATS message exceeds :data:`MAX_ACK_PAYLOAD_BYTES` (or the NATS
server's max_payload, if smaller) or the envelope's count limit. Every payload of one call
goes to NATS in one buffer write (:meth:`~jetserver.broker.nats_port.NatsPort.publish_many`).

The router serves acks addressed to NATS inboxes only. A Produce request this server's
leader appends directly is acked in process by its sequencer and committer, without an
inbox (:mod:`jetserver.broker.direct`). A message that came through NATS with an inbox of
this server's own Produce service (a replicated partition's LEADER acks, which keep the
NATS path) is still acked to that inbox; the router hands such acks to the service
directly (registered in :attr:`AckRouter.local_inboxes`), without encoding, NATS and
decoding (spec/acks.md, "In-process acks").
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from typing import NamedTuple

import attrs

from jetsdk.codec.envelope_acks import AckEncoder, AckFields, EnvelopeAck
from jetsdk.codec.errors import CodecError
from jetsdk.codec.json_ack import encode_json_ack
from jetsdk.codec.limits import MAX_ACKS_PER_BATCH
from jetserver.broker.direct import DirectAckTo
from jetserver.broker.nats_port import NatsPort
from jetserver.logs import fields

log = logging.getLogger(__name__)

MAX_ACK_PAYLOAD_BYTES = 256 * 1024
"""Bound on one ack batch message (well below NATS's default 1 MiB max_payload)."""
_ACK_FIXED_BYTES = 2 + 4 + 8 + 8 + 2 + 1 + 2 + 2
"""Encoded size of an ack without its strings."""
_MIN_ACK_PAYLOAD_BYTES = 4096
"""Lower bound on the split size whatever NATS says (one ack always fits)."""
_MAX_CACHED_ENCODERS = 4096

_encoders: dict[tuple[str, int], AckEncoder] = {}


class PartitionAck(NamedTuple):
    """One ack of a partition (its stream and partition are given when publishing); the
    field order is :data:`~jetsdk.codec.envelope.AckFields`."""

    offset: int
    """Assigned offset, or -1 for an error without one."""
    timestamp: int
    """Stored timestamp (ns since the epoch), or -1."""
    correlation_id: str
    """The message's correlation id (empty for a plain message)."""
    ack_policy: int
    """The policy the ack satisfies (LEADER or ALL)."""
    error_code: int = 0
    """0, or the wire error code."""
    error_message: str = ""
    """Explanation when error_code is not 0."""


class PendingAck(NamedTuple):
    """An ALL ack waiting for the high watermark to pass its offset."""

    offset: int
    """The record's offset."""
    inbox: str | DirectAckTo
    """Where the ack goes: a NATS inbox, or in process the completion of a Produce
    request appended directly (:mod:`jetserver.broker.direct`)."""
    ack: PartitionAck
    """The ack (its correlation id is empty for an ack in process)."""


JSON_ACK_MARK = "\x00"
"""Prefix of an inbox (inside the server only) whose acks go out as JSON: the reply subject
of a plain NATS request (spec/acks.md, "JSON acks for plain requests"). No NATS subject
holds a NUL, so it never collides with one."""


LocalAckReceiver = Callable[[str, str, int, Sequence[PartitionAck]], None]
"""Receives ``(token, stream, partition, acks)`` for the acks to ``<prefix>.<token>`` of a
prefix registered in :attr:`AckRouter.local_inboxes` (event loop
thread; must not raise)."""


def _text_size(text: str) -> int:
    return len(text) if text.isascii() else len(text.encode())


def ack_size(stream: str, ack: AckFields) -> int:
    """Encoded size of ``ack`` of ``stream`` inside a batch."""
    return _ACK_FIXED_BYTES + _text_size(stream) + _text_size(ack[2]) + _text_size(ack[5])


def _encoder(stream: str, partition: int) -> AckEncoder:
    key = (stream, partition)
    encoder = _encoders.get(key)
    if encoder is None:
        if len(_encoders) >= _MAX_CACHED_ENCODERS:
            _encoders.clear()
        encoder = _encoders[key] = AckEncoder(stream, partition)
    return encoder


def ack_payloads(
    stream: str,
    partition: int,
    acks: Sequence[AckFields],
    max_bytes: int = MAX_ACK_PAYLOAD_BYTES,
) -> list[bytes]:
    """The NATS payloads carrying ``acks`` of one stream partition (all for one inbox), in
    order: byte for byte what :func:`~jetsdk.codec.envelope.encode_ack` /
    ``encode_acks`` write for them.

    Raises:
        CodecError: an ack field out of range.
    """
    encoder = _encoder(stream, partition)
    if len(acks) == 1:
        return [encoder.encode(acks)]
    payloads: list[bytes] = []
    start = 0
    size = 0
    fixed = _ACK_FIXED_BYTES + _text_size(stream)
    for i, ack in enumerate(acks):
        n = fixed + _text_size(ack[2]) + (_text_size(ack[5]) if ack[5] else 0)
        if i > start and (size + n > max_bytes or i - start >= MAX_ACKS_PER_BATCH):
            payloads.append(encoder.encode(acks[start:i]))
            start, size = i, 0
        size += n
    payloads.append(encoder.encode(acks[start:]))
    return payloads


def encode_ack_payloads(
    acks: Sequence[EnvelopeAck], max_bytes: int = MAX_ACK_PAYLOAD_BYTES
) -> list[bytes]:
    """As :func:`ack_payloads` for :class:`~jetsdk.codec.envelope.EnvelopeAck` objects, which may
    mix stream partitions (each run of one partition is batched on its own).

    Raises:
        CodecError: an ack field out of range.
    """
    payloads: list[bytes] = []
    run: list[AckFields] = []
    key: tuple[str, int] | None = None
    for ack in acks:
        if run and key != (ack.stream, ack.partition):
            assert key is not None
            payloads.extend(ack_payloads(*key, run, max_bytes))
            run = []
        key = (ack.stream, ack.partition)
        run.append(ack.fields)
    if run:
        assert key is not None
        payloads.extend(ack_payloads(*key, run, max_bytes))
    return payloads


def group_by_inbox(items: Iterable[tuple[str, PartitionAck]]) -> dict[str, list[PartitionAck]]:
    """``(inbox, ack)`` pairs grouped by inbox, keeping order within each inbox."""
    out: dict[str, list[PartitionAck]] = {}
    for inbox, ack in items:
        group = out.get(inbox)
        if group is None:
            out[inbox] = [ack]
        else:
            group.append(ack)
    return out


def deliver_pending(
    router: AckRouter,
    stream: str,
    partition: int,
    acks: Sequence[tuple[PendingAck, int, str]],
) -> list[tuple[str, bytes]]:
    """Answer the pending ALL acks a commit released (``(pending, code, text)``: code 0 for
    success, else the error they fail with): those of direct Produce requests in process
    now, the others through :meth:`AckRouter.route`; the NATS messages left for
    :meth:`AckRouter.send`."""
    items: list[tuple[str, PartitionAck]] = []
    for p, code, text in acks:
        to = p.inbox
        if isinstance(to, str):
            ack = p.ack if code == 0 else p.ack._replace(error_code=code, error_message=text)
            items.append((to, ack))
        else:
            ack = p.ack  # its own code unless the commit failed it (a duplicate's, say)
            to.completion.settle(to.position, code or ack.error_code, ack.offset, ack.timestamp)
    return router.route(stream, partition, items) if items else []


@attrs.define(eq=False)
class AckRouter:
    """Sends the acks of this server's partitions: to an in-process receiver when the
    inbox belongs to this server (the Produce service registers its prefix), as JSON to
    a plain request's reply subject, otherwise as ack envelopes through NATS."""

    link: NatsPort
    """NATS link the acks for other processes go through."""
    local_inboxes: dict[str, LocalAckReceiver] = attrs.field(factory=dict)
    """Inbox prefix -> the in-process receiver of acks to ``<prefix>.<token>``."""

    async def publish(
        self, stream: str, partition: int, items: Iterable[tuple[str, PartitionAck]]
    ) -> None:
        """Send the acks of one stream partition, one message (or a few for huge batches)
        per inbox: :meth:`route`, then :meth:`send`.

        Best effort: an ack that cannot be published (NATS away, an ack inbox that is not
        a valid subject) is dropped; the publisher times out and retries (spec/acks.md).
        """
        messages = self.route(stream, partition, items)
        if messages:
            await self.send(messages)

    def route(
        self, stream: str, partition: int, items: Iterable[tuple[str, PartitionAck]]
    ) -> list[tuple[str, bytes]]:
        """Hand the in-process acks of one stream partition to their receivers now; the
        NATS messages (subject, payload) of the others, for :meth:`send`."""
        link = self.link
        max_bytes = MAX_ACK_PAYLOAD_BYTES
        if link.max_payload:
            max_bytes = max(_MIN_ACK_PAYLOAD_BYTES, min(max_bytes, link.max_payload - 64))
        messages: list[tuple[str, bytes]] = []
        local = self.local_inboxes
        for inbox, acks in group_by_inbox(items).items():
            if inbox.startswith(JSON_ACK_MARK):
                reply = inbox[1:]
                messages.extend(
                    (reply, encode_json_ack(stream, partition, a[0], a[4], a[5])) for a in acks
                )
                continue
            if local:
                prefix, _, token = inbox.rpartition(".")
                receiver = local.get(prefix)
                if receiver is not None:
                    try:
                        receiver(token, stream, partition, acks)
                    except Exception:  # a bug: the publisher times out, as for a lost ack
                        log.exception("in-process ack delivery failed", extra=fields(inbox=inbox))
                    continue
            try:
                payloads = ack_payloads(stream, partition, acks, max_bytes)
            except CodecError as exc:  # a bug: acks are built from stored records
                log.error("ack encoding failed", extra=fields(inbox=inbox, error=str(exc)))
                continue
            messages.extend((inbox, payload) for payload in payloads)
        return messages

    async def send(self, messages: list[tuple[str, bytes]]) -> None:
        """Publish what :meth:`route` left for NATS (best effort, as :meth:`publish`)."""
        link = self.link
        while messages:
            queued = await link.publish_many(messages)
            if queued >= len(messages) or not link.connected:
                return
            # Skip the one NATS refused (bad inbox subject, too large); publish the rest.
            log.debug("ack dropped", extra=fields(inbox=messages[queued][0]))
            messages = messages[queued + 1 :]
