"""The Produce request and answer of one plain message, without the request object: the
producer's direct send (:mod:`jetsdk.producer.direct`). The same bytes as
:func:`~jetsdk.codec.messages.encode_produce_request` (spec/protocol.md §6). Pure."""

from __future__ import annotations

import struct

from jetsdk.codec import _wire as w
from jetsdk.codec.error_codes import AckPolicy
from jetsdk.codec.messages import (
    _ACK_POLICIES,
    _PLAIN_MESSAGE_HEAD,
    _PRODUCE_HEAD,
    _PRODUCER,
    PRODUCE_FLAG_PRODUCER,
    PRODUCE_FLAG_SEQUENCE_START,
    SEPARATE_VALUE_MIN_BYTES,
    ProduceMessage,
    _stream_field,
)

__all__ = ["decode_produce_one", "encode_produce_one"]

_ONE_MESSAGE = w.U32.pack(1)
_ONE_RESULT = struct.Struct(">IHqq")  # count 1, error_code, offset, timestamp


def encode_produce_one(
    stream: str,
    partition: int,
    ack_policy: AckPolicy,
    timeout_ms: int,
    message: ProduceMessage,
    producer_id: int | None,
    base_seq: int,
    sequence_start: bool = False,
) -> bytes | None:
    """The body :func:`~jetsdk.codec.messages.encode_produce_request` encodes for
    ``ProduceRequest(stream, partition, ack_policy, timeout_ms, (message,), producer_id, base_seq,
    sequence_start=sequence_start)``, without the request object, for a plain message (no
    subject, key or headers; a value under :data:`SEPARATE_VALUE_MIN_BYTES`): the
    producer's direct send. None for any other
    message or a field out of range (encode the request)."""
    value = message.value
    if message.subject or message.key is not None or message.headers:
        return None
    if len(value) >= SEPARATE_VALUE_MIN_BYTES or ack_policy not in _ACK_POLICIES:
        return None
    try:
        if producer_id is None:
            head = _PRODUCE_HEAD.pack(partition, ack_policy, timeout_ms, 0)
        else:
            flags = PRODUCE_FLAG_PRODUCER
            if sequence_start:
                flags |= PRODUCE_FLAG_SEQUENCE_START
            head = _PRODUCE_HEAD.pack(partition, ack_policy, timeout_ms, flags)
            head += _PRODUCER.pack(producer_id, base_seq)
    except struct.error:
        return None
    name_len, name = _stream_field(stream)
    size = w.U32.pack(len(value))
    return b"".join((name_len, name, head, _ONE_MESSAGE, _PLAIN_MESSAGE_HEAD, size, value))


def decode_produce_one(body: bytes | bytearray) -> tuple[int, int, int] | None:
    """The ``(error_code, offset, timestamp)`` of a Produce response body of exactly one
    result (the one tuple of :func:`~jetsdk.codec.messages.decode_produce_result_tuples`);
    None for any other body."""
    if len(body) != _ONE_RESULT.size:
        return None
    count, code, offset, timestamp = _ONE_RESULT.unpack(body)
    return (code, offset, timestamp) if count == 1 else None
