"""The NATS payload envelope (spec/envelope.md): publish messages and acks.

Layout (big-endian)::

    cookie    4 bytes   FF 4A 45 54  (b"\\xffJET")
    version   uint8     1
    kind      uint8     0 message, 1 ack, 2 ack batch
    flags     uint16    kind 0: bit 0 = producer id and sequence present; otherwise 0
    crc       uint32    CRC-32 (zlib) of the 8 bytes before it, then of the body
    body      the rest of the payload, by kind:

    kind 0  ack_policy u8 | key nbytes32 | headers | ack_inbox str16 | correlation_id str16
            | [producer_id u64 | producer_seq u64 if flags & 1] | value bytes32
    kind 1  ack
    kind 2  count u16 (>= 1) | ack * count
    ack  =  stream str16 | partition u32 | offset i64 | timestamp i64 | correlation_id str16
            | ack_policy u8 | error_code u16 | error_message str16

A payload that does not start with the cookie, or starts with it but fails to decode as a
kind 0 message, is a plain message (:func:`parse_nats_payload` returns None).

This module is pure: no I/O. Decoders raise only :class:`CodecError`; encoders raise it with
reason ``"limit"`` for a field over its limit or out of range.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Sequence

import attrs

from jetsdk.codec import _wire as w
from jetsdk.codec.error_codes import AckPolicy
from jetsdk.codec.errors import CodecError
from jetsdk.codec.limits import (
    MAX_ACKS_PER_BATCH,
    MAX_CORRELATION_ID_BYTES,
    MAX_ERROR_MESSAGE_BYTES,
    MAX_STREAM_NAME_BYTES,
    MAX_SUBJECT_BYTES,
)

__all__ = [
    "COOKIE",
    "ENVELOPE_HEADER_SIZE",
    "ENVELOPE_VERSION",
    "FLAG_PRODUCER",
    "KIND_ACK",
    "KIND_ACK_BATCH",
    "KIND_MESSAGE",
    "MAX_ACKS_PER_BATCH",
    "MAX_CORRELATION_ID_BYTES",
    "MAX_ERROR_MESSAGE_BYTES",
    "Ack",
    "AckPolicy",
    "EnvelopeMessage",
    "decode_acks",
    "decode_message",
    "encode_ack",
    "encode_acks",
    "encode_message",
    "parse_nats_payload",
]

COOKIE = b"\xffJET"
"""The four bytes every envelope starts with."""
ENVELOPE_VERSION = 1
"""The only version this codec reads and writes."""
KIND_MESSAGE = 0
KIND_ACK = 1
KIND_ACK_BATCH = 2
FLAG_PRODUCER = 0x0001
"""Kind 0 flag: producer_id and producer_seq are present."""

_HEADER = struct.Struct(">4sBBHI")  # cookie, version, kind, flags, crc
ENVELOPE_HEADER_SIZE = _HEADER.size  # 12
_CRC_COVERED = 8
_PREFIX = struct.Struct(">4sBBH")
_PRODUCER = struct.Struct(">QQ")
_ACK_MID = struct.Struct(">Iqq")  # partition, offset, timestamp
_ACK_TAIL = struct.Struct(">BH")  # ack_policy, error_code
_U32 = struct.Struct(">I")
_ACK_POLICIES = frozenset(int(p) for p in AckPolicy)
_POLICY_BY_VALUE = tuple(AckPolicy)  # index by wire value: faster than AckPolicy(value)
_MIN_ACK = 2 + _ACK_MID.size + 2 + _ACK_TAIL.size + 2


@attrs.frozen
class EnvelopeMessage:
    """A message published on a stream subject inside an envelope (kind 0)."""

    value: bytes
    """The payload."""
    key: bytes | None = None
    """The key, or None for a keyless message (distinct from an empty key)."""
    headers: tuple[tuple[str, bytes], ...] = ()
    """Ordered (name, value) pairs; names may repeat."""
    ack_inbox: str = ""
    """NATS subject the partition leader publishes the ack to; empty: no ack."""
    correlation_id: str = ""
    """Opaque id echoed in the ack so the publisher can match it."""
    ack_policy: AckPolicy = AckPolicy.NONE
    """When to ack (spec/acks.md); no ack is sent without an ack inbox."""
    producer_id: int | None = None
    """Idempotent producer id, or None."""
    producer_seq: int = 0
    """Producer sequence number (only meaningful with a producer id)."""


@attrs.frozen
class Ack:
    """An acknowledgement from a partition leader (kind 1, or one entry of kind 2)."""

    stream: str
    """Stream the message was stored in."""
    partition: int
    """Partition number."""
    offset: int
    """Assigned offset, or -1 when error_code is not 0 and no offset applies."""
    timestamp: int
    """Stored timestamp in ns since the epoch, or -1."""
    correlation_id: str
    """The message's correlation id (empty for a plain message)."""
    ack_policy: AckPolicy
    """The policy this ack satisfies."""
    error_code: int = 0
    """0 for success, else a wire error code (spec/protocol.md)."""
    error_message: str = ""
    """Explanation when error_code is not 0."""


def _seal(kind: int, flags: int, body: bytes) -> bytes:
    prefix = _PREFIX.pack(COOKIE, ENVELOPE_VERSION, kind, flags)
    return prefix + _U32.pack(zlib.crc32(body, zlib.crc32(prefix))) + body


def encode_message(msg: EnvelopeMessage) -> bytes:
    """Encode a kind 0 envelope.

    Raises:
        CodecError: a field over its limit or out of range (reason ``"limit"``).
    """
    if msg.ack_policy not in _ACK_POLICIES:
        raise CodecError(f"unknown ack policy {msg.ack_policy}", reason="limit")
    parts: list[bytes] = [bytes((msg.ack_policy,))]
    w.put_key(parts, msg.key)
    w.put_headers(parts, msg.headers)
    w.put_str16(parts, msg.ack_inbox, "ack inbox", MAX_SUBJECT_BYTES)
    w.put_str16(parts, msg.correlation_id, "correlation id", MAX_CORRELATION_ID_BYTES)
    flags = 0
    if msg.producer_id is not None:
        flags = FLAG_PRODUCER
        try:
            parts.append(_PRODUCER.pack(msg.producer_id, msg.producer_seq))
        except struct.error as exc:
            raise CodecError(f"producer id/seq out of range: {exc}", reason="limit") from None
    w.put_value(parts, msg.value)
    return _seal(KIND_MESSAGE, flags, b"".join(parts))


def _put_ack(parts: list[bytes], ack: Ack) -> None:
    if ack.ack_policy not in _ACK_POLICIES:
        raise CodecError(f"unknown ack policy {ack.ack_policy}", reason="limit")
    w.put_str16(parts, ack.stream, "stream name", MAX_STREAM_NAME_BYTES)
    try:
        parts.append(_ACK_MID.pack(ack.partition, ack.offset, ack.timestamp))
        w.put_str16(parts, ack.correlation_id, "correlation id", MAX_CORRELATION_ID_BYTES)
        parts.append(_ACK_TAIL.pack(ack.ack_policy, ack.error_code))
    except struct.error as exc:
        raise CodecError(f"ack field out of range: {exc}", reason="limit") from None
    w.put_str16(parts, ack.error_message, "error message", MAX_ERROR_MESSAGE_BYTES)


def encode_ack(ack: Ack) -> bytes:
    """Encode a kind 1 envelope (one ack).

    Raises:
        CodecError: a field over its limit or out of range (reason ``"limit"``).
    """
    parts: list[bytes] = []
    _put_ack(parts, ack)
    return _seal(KIND_ACK, 0, b"".join(parts))


def encode_acks(acks: Sequence[Ack]) -> bytes:
    """Encode a kind 2 envelope: 1 to MAX_ACKS_PER_BATCH acks for one ack inbox.

    Raises:
        CodecError: empty or too many acks, or a field over its limit (reason ``"limit"``).
    """
    if not 1 <= len(acks) <= MAX_ACKS_PER_BATCH:
        raise CodecError(
            f"an ack batch holds 1 to {MAX_ACKS_PER_BATCH} acks, not {len(acks)}", reason="limit"
        )
    parts: list[bytes] = [w.U16.pack(len(acks))]
    for ack in acks:
        _put_ack(parts, ack)
    return _seal(KIND_ACK_BATCH, 0, b"".join(parts))


def _open(payload: w.Buffer) -> tuple[int, int]:
    """Check cookie, version and CRC; return (kind, flags). The body starts at byte 12."""
    if len(payload) < ENVELOPE_HEADER_SIZE:
        raise CodecError("truncated envelope header", reason="truncated")
    cookie, version, kind, flags, crc = _HEADER.unpack_from(payload, 0)
    if cookie != COOKIE:
        raise CodecError("payload does not start with the envelope cookie")
    if version != ENVELOPE_VERSION:
        raise CodecError(f"unsupported envelope version {version}", reason="version")
    mv = memoryview(payload)
    if zlib.crc32(mv[ENVELOPE_HEADER_SIZE:], zlib.crc32(mv[:_CRC_COVERED])) != crc:
        raise CodecError("envelope CRC mismatch", reason="crc")
    return kind, flags


def decode_message(payload: bytes | bytearray | memoryview) -> EnvelopeMessage:
    """Decode a kind 0 envelope.

    Raises:
        CodecError: anything but a valid version 1 kind 0 envelope (reasons ``"truncated"``,
            ``"version"``, ``"crc"``, ``"limit"``, ``"malformed"``).
    """
    kind, flags = _open(payload)
    if kind != KIND_MESSAGE:
        raise CodecError(f"envelope kind {kind} is not a message")
    if flags & ~FLAG_PRODUCER:
        raise CodecError(f"unknown envelope flags {flags:#06x}")
    buf = payload
    p = ENVELOPE_HEADER_SIZE
    try:
        ack_policy = buf[p]
        p += 1
        if ack_policy not in _ACK_POLICIES:
            raise CodecError(f"unknown ack policy {ack_policy}")
        key, p = w.get_key(buf, p)
        headers, p = w.get_headers(buf, p)
        ack_inbox, p = w.get_str16(buf, p, "ack inbox", MAX_SUBJECT_BYTES)
        correlation_id, p = w.get_str16(buf, p, "correlation id", MAX_CORRELATION_ID_BYTES)
        producer_id: int | None = None
        producer_seq = 0
        if flags & FLAG_PRODUCER:
            w.need(buf, p, 16, "producer id")
            producer_id, producer_seq = _PRODUCER.unpack_from(buf, p)
            p += 16
        value, p = w.get_value(buf, p)
        w.check_end(buf, p, "envelope message")
    except w.DECODE_ERRORS as exc:
        raise w.convert(exc, "envelope message") from None
    return EnvelopeMessage(
        value=value,
        key=key,
        headers=headers,
        ack_inbox=ack_inbox,
        correlation_id=correlation_id,
        ack_policy=_POLICY_BY_VALUE[ack_policy],
        producer_id=producer_id,
        producer_seq=producer_seq,
    )


def _get_ack(buf: w.Buffer, p: int) -> tuple[Ack, int]:
    stream, p = w.get_str16(buf, p, "stream name", MAX_STREAM_NAME_BYTES)
    w.need(buf, p, _ACK_MID.size, "ack")
    partition, offset, timestamp = _ACK_MID.unpack_from(buf, p)
    p += _ACK_MID.size
    correlation_id, p = w.get_str16(buf, p, "correlation id", MAX_CORRELATION_ID_BYTES)
    w.need(buf, p, _ACK_TAIL.size, "ack")
    ack_policy, error_code = _ACK_TAIL.unpack_from(buf, p)
    p += _ACK_TAIL.size
    if ack_policy not in _ACK_POLICIES:
        raise CodecError(f"unknown ack policy {ack_policy}")
    error_message, p = w.get_str16(buf, p, "error message", MAX_ERROR_MESSAGE_BYTES)
    ack = Ack(
        stream=stream,
        partition=partition,
        offset=offset,
        timestamp=timestamp,
        correlation_id=correlation_id,
        ack_policy=_POLICY_BY_VALUE[ack_policy],
        error_code=error_code,
        error_message=error_message,
    )
    return ack, p


def decode_acks(payload: bytes | bytearray | memoryview) -> list[Ack]:
    """Decode a kind 1 (one ack) or kind 2 (ack batch) envelope.

    Raises:
        CodecError: anything but a valid version 1 kind 1 or 2 envelope.
    """
    kind, flags = _open(payload)
    if kind not in (KIND_ACK, KIND_ACK_BATCH):
        raise CodecError(f"envelope kind {kind} is not an ack")
    if flags:
        raise CodecError(f"unknown envelope flags {flags:#06x}")
    p = ENVELOPE_HEADER_SIZE
    try:
        if kind == KIND_ACK:
            ack, p = _get_ack(payload, p)
            acks = [ack]
        else:
            w.need(payload, p, 2, "ack count")
            (count,) = w.U16.unpack_from(payload, p)
            p += 2
            if count == 0:
                raise CodecError("empty ack batch")
            if count * _MIN_ACK > len(payload) - p:
                raise CodecError(f"ack count {count} exceeds the payload", reason="truncated")
            acks = []
            for _ in range(count):
                ack, p = _get_ack(payload, p)
                acks.append(ack)
        w.check_end(payload, p, "ack envelope")
    except w.DECODE_ERRORS as exc:
        raise w.convert(exc, "ack envelope") from None
    return acks


def parse_nats_payload(payload: bytes | bytearray | memoryview) -> EnvelopeMessage | None:
    """The envelope in a NATS message payload, or None for a plain message.

    A payload is plain if it does not start with the cookie, or starts with it but does not
    decode as a version 1 kind 0 envelope (wrong version, bad CRC, an ack, truncated...):
    such payloads are stored as they are (spec/envelope.md, "Plain-message fallback").
    Never raises.
    """
    if payload[:4] != COOKIE:
        return None
    try:
        return decode_message(payload)
    except CodecError:
        return None
