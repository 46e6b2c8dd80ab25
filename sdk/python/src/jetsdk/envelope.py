"""Publish enveloped messages from any NATS application (spec/envelope.md, spec/acks.md).

A jet stream stores every message published on its subject. Plain payloads are stored as
they are; a payload wrapped in the jet envelope can carry a key, headers, an idempotent
producer id, and ask the partition leader for an ack on an inbox of your choice. This module
only builds and parses bytes: use it with any NATS client. Example with nats-py::

    import asyncio, nats
    from jetsdk.envelope import AckPolicy, build_message, new_ack_inbox, parse_ack

    async def main() -> None:
        nc = await nats.connect("nats://127.0.0.1:4222")
        inbox = new_ack_inbox()
        acks = await nc.subscribe(inbox)          # subscribe BEFORE publishing
        payload = build_message(
            b"42 EUR", key=b"order-17", headers={"source": "shop"},
            ack_inbox=inbox, correlation_id="req-1", ack_policy=AckPolicy.ALL,
        )
        await nc.publish("orders", payload)
        msg = await acks.next_msg(timeout=5)
        for ack in parse_ack(msg.data):           # a kind 2 payload may hold several acks
            if ack.error_code:
                print("failed:", ack.error_code, ack.error_message)
            else:
                print(ack.correlation_id, "stored at", ack.stream, ack.partition, ack.offset)
        await nc.close()

    asyncio.run(main())

Several messages may share one ack inbox (tell them apart by ``correlation_id``); the
leader then may batch their acks into one payload. No ack arriving in time means the
outcome is unknown: the message may or may not be stored (spec/acks.md).

A plain NATS request (a message with a reply subject and no envelope) to a stream subject
is acked on its reply subject with policy LEADER, in JSON that any client reads
(``{"stream":"orders","partition":0,"offset":18}``, or ``{"stream":...,"error":{"code",
"name","description"}}``); :func:`parse_ack` decodes that too.

Everything here is pure and thread-safe.
"""

from __future__ import annotations

import secrets
import warnings
from collections.abc import Iterable, Mapping

from jetsdk.codec.envelope import (
    COOKIE,
    EnvelopeAck,
    EnvelopeMessage,
    decode_acks,
    encode_message,
    parse_nats_payload,
)
from jetsdk.codec.error_codes import AckPolicy, ErrorCode
from jetsdk.codec.errors import CodecError
from jetsdk.codec.json_ack import decode_json_ack

__all__ = [
    "COOKIE",
    "AckPolicy",
    "CodecError",
    "EnvelopeAck",
    "EnvelopeMessage",
    "ErrorCode",
    "HeadersLike",
    "build_message",
    "new_ack_inbox",
    "new_correlation_id",
    "parse_ack",
    "parse_message",
]


def __getattr__(name: str) -> object:
    """``Ack``: the old name of :class:`EnvelopeAck` (deprecated; ``jetsdk.Ack`` is the
    outcome of a send, a different thing)."""
    if name == "Ack":
        warnings.warn(
            "jetsdk.envelope.Ack is now jetsdk.envelope.EnvelopeAck",
            DeprecationWarning,
            stacklevel=2,
        )
        return EnvelopeAck
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


HeadersLike = Mapping[str, bytes | str] | Iterable[tuple[str, bytes | str]]
"""Headers as a mapping or as (name, value) pairs (to repeat a name); str values are UTF-8
encoded."""

INBOX_PREFIX = "_INBOX."


def _normalize_headers(headers: HeadersLike | None) -> tuple[tuple[str, bytes], ...]:
    if headers is None:
        return ()
    items = headers.items() if isinstance(headers, Mapping) else headers
    out: list[tuple[str, bytes]] = []
    for name, value in items:
        out.append((name, value.encode() if isinstance(value, str) else bytes(value)))
    return tuple(out)


def build_message(
    value: bytes,
    *,
    key: bytes | str | None = None,
    headers: HeadersLike | None = None,
    ack_inbox: str = "",
    correlation_id: str = "",
    ack_policy: AckPolicy = AckPolicy.LEADER,
    producer_id: int | None = None,
    producer_seq: int = 0,
) -> bytes:
    """The payload of an enveloped message, ready for ``nc.publish(subject, payload)``.

    Args:
        value: the message payload.
        key: the key (str is UTF-8 encoded), None for a keyless message.
        headers: a mapping or (name, value) pairs; stored with the record.
        ack_inbox: subject the partition leader publishes the ack to ("" = no ack); see
            :func:`new_ack_inbox`.
        correlation_id: echoed in the ack, to match acks to messages on a shared inbox.
        ack_policy: NONE, LEADER (after the leader's local append) or ALL (after commit).
            Ignored (no ack) without an ack inbox.
        producer_id: idempotent producer identity, with ``producer_seq`` (a duplicate
            is refused with DUPLICATE_SEQUENCE); None for none.
        producer_seq: the message's sequence number for ``producer_id``.

    Raises:
        CodecError: a field over its limit (reason ``"limit"``).
    """
    raw_key = key.encode() if isinstance(key, str) else key
    return encode_message(
        EnvelopeMessage(
            value=bytes(value),
            key=raw_key,
            headers=_normalize_headers(headers),
            ack_inbox=ack_inbox,
            correlation_id=correlation_id,
            ack_policy=AckPolicy(ack_policy),
            producer_id=producer_id,
            producer_seq=producer_seq,
        )
    )


def new_ack_inbox() -> str:
    """A fresh, unguessable NATS inbox subject: ``"_INBOX."`` + 22 random characters."""
    return INBOX_PREFIX + secrets.token_urlsafe(16)


def new_correlation_id() -> str:
    """A random correlation id (16 hex characters)."""
    return secrets.token_hex(8)


def parse_ack(payload: bytes | bytearray | memoryview) -> list[EnvelopeAck]:
    """The acks in a payload received on an ack inbox (one, or several for a batch), or
    the JSON ack of a plain request (its ``timestamp`` is -1 and ``correlation_id`` "").

    Raises:
        CodecError: the payload is neither a valid ack envelope nor a JSON ack.
    """
    data = bytes(payload)
    if data[:1] == b"{":
        stream, partition, offset, code, text = decode_json_ack(data)
        return [EnvelopeAck(stream, partition, offset, -1, "", AckPolicy.LEADER, code, text)]
    return decode_acks(data)


def parse_message(payload: bytes | bytearray | memoryview) -> EnvelopeMessage | None:
    """The envelope of a payload seen on a stream subject, or None for a plain message."""
    return parse_nats_payload(payload)
