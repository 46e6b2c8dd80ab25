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
from collections.abc import Sequence

import attrs

from jetsdk.codec import _wire as w
from jetsdk.codec._envelope_frame import (
    ACK_POLICIES,
    COOKIE,
    ENVELOPE_HEADER_SIZE,
    ENVELOPE_VERSION,
    FLAG_PRODUCER,
    KIND_ACK,
    KIND_ACK_BATCH,
    KIND_MESSAGE,
    MSG_PLAIN,
    MSG_PRODUCER,
    NO_HEADERS,
    NO_KEY,
    POLICY_BY_VALUE,
    POLICY_BYTE,
    POLICY_BYTES,
    POLICY_KEY,
    PRODUCER,
    SLICE_MAX_BYTES,
    U16,
    U32,
    open_envelope,
    seal,
    str16,
)
from jetsdk.codec.crc import crc32
from jetsdk.codec.envelope_acks import (
    AckEncoder,
    AckFields,
    AckTuple,
    EnvelopeAck,
    decode_ack_tuples,
    decode_acks,
    encode_ack,
    encode_acks,
)
from jetsdk.codec.error_codes import AckPolicy
from jetsdk.codec.errors import CodecError
from jetsdk.codec.limits import (
    MAX_ACKS_PER_BATCH,
    MAX_CORRELATION_ID_BYTES,
    MAX_ERROR_MESSAGE_BYTES,
    MAX_KEY_BYTES,
    MAX_SUBJECT_BYTES,
    MAX_VALUE_BYTES,
)

__all__ = [
    "COOKIE",
    "ENVELOPE_HEADER_SIZE",
    "ENVELOPE_VERSION",
    "FLAG_PRODUCER",
    "KEY_POS",
    "KIND_ACK",
    "KIND_ACK_BATCH",
    "KIND_MESSAGE",
    "MAX_ACKS_PER_BATCH",
    "MAX_CORRELATION_ID_BYTES",
    "MAX_ERROR_MESSAGE_BYTES",
    "AckEncoder",
    "AckFields",
    "AckPolicy",
    "AckTuple",
    "EnvelopeAck",
    "EnvelopeMessage",
    "MessageEncoder",
    "MessageLayout",
    "decode_ack_tuples",
    "decode_acks",
    "decode_message",
    "encode_ack",
    "encode_acks",
    "encode_message",
    "encode_message_fields",
    "parse_nats_payload",
    "scan_message",
]


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


def encode_message(msg: EnvelopeMessage) -> bytes:
    """Encode a kind 0 envelope.

    Raises:
        CodecError: a field over its limit or out of range (reason ``"limit"``).
    """
    return encode_message_fields(
        msg.value,
        msg.key,
        msg.headers,
        msg.ack_inbox,
        msg.correlation_id,
        msg.ack_policy,
        msg.producer_id,
        msg.producer_seq,
    )


def encode_message_fields(
    value: bytes,
    key: bytes | None = None,
    headers: Sequence[tuple[str, bytes]] = (),
    ack_inbox: str = "",
    correlation_id: str = "",
    ack_policy: int = AckPolicy.NONE,
    producer_id: int | None = None,
    producer_seq: int = 0,
) -> bytes:
    """Encode a kind 0 envelope from its fields (as :func:`encode_message`, without building
    an :class:`EnvelopeMessage`).

    Raises:
        CodecError: a field over its limit or out of range (reason ``"limit"``).
    """
    return MessageEncoder(ack_inbox, ack_policy).encode(
        value, key, headers, correlation_id, producer_id, producer_seq
    )


class MessageEncoder:
    """Encodes kind 0 envelopes that share an ack inbox and ack policy (the Produce path:
    every message of a request); the shared fields are encoded once.

    Thread safety: immutable after construction.
    """

    __slots__ = ("_head_keyless", "_inbox16", "_policy_byte")

    def __init__(self, ack_inbox: str, ack_policy: int) -> None:
        """Prepare the shared fields.

        Raises:
            CodecError: an unknown ack policy or an ack inbox over its limit (``"limit"``).
        """
        if ack_policy not in ACK_POLICIES:
            raise CodecError(f"unknown ack policy {ack_policy}", reason="limit")
        self._policy_byte = POLICY_BYTE[ack_policy]
        self._inbox16 = str16(ack_inbox, "ack inbox", MAX_SUBJECT_BYTES)
        self._head_keyless = b"".join((self._policy_byte, NO_KEY, NO_HEADERS, self._inbox16))

    def encode(
        self,
        value: bytes,
        key: bytes | None = None,
        headers: Sequence[tuple[str, bytes]] = (),
        correlation_id: str = "",
        producer_id: int | None = None,
        producer_seq: int = 0,
    ) -> bytes:
        """One kind 0 envelope, byte for byte what :func:`encode_message` writes.

        Raises:
            CodecError: a field over its limit or out of range (reason ``"limit"``).
        """
        corr16 = str16(correlation_id, "correlation id", MAX_CORRELATION_ID_BYTES)
        n = len(value)
        if n > MAX_VALUE_BYTES:
            raise CodecError(f"value of {n} bytes exceeds {MAX_VALUE_BYTES}", reason="limit")
        if key is None and not headers:
            parts = [self._head_keyless, corr16]
        else:
            parts = [self._policy_byte]
            w.put_key(parts, key)
            w.put_headers(parts, headers)
            parts.append(self._inbox16)
            parts.append(corr16)
        if producer_id is None:
            sealer = MSG_PLAIN
        else:
            sealer = MSG_PRODUCER
            try:
                parts.append(PRODUCER.pack(producer_id, producer_seq))
            except struct.error as exc:
                raise CodecError(f"producer id/seq out of range: {exc}", reason="limit") from None
        parts.append(U32.pack(n))
        parts.append(value)
        return seal(sealer, b"".join(parts))


MessageLayout = tuple[int, int, w.Headers, int, str, str, int, int]
"""Where the fields of a valid kind 0 envelope lie: (ack_policy, key_len, headers,
headers_end, ack_inbox, correlation_id, producer_pos, value_pos). The key (``nbytes32``,
``key_len`` -1 for none) starts at byte :data:`KEY_POS`, the headers field right after it
and ends at ``headers_end``; the producer id and sequence are the 16 bytes at
``producer_pos`` (-1: absent); the value field (``bytes32``) runs from ``value_pos`` to the
end of the payload."""
KEY_POS = ENVELOPE_HEADER_SIZE + 1
"""Offset of a kind 0 envelope's key field (after the header and the ack policy byte)."""


def scan_message(buf: bytes) -> MessageLayout:
    """Check that ``buf`` is a valid version 1 kind 0 envelope and locate its fields (the
    decoding work of :func:`decode_message`, without copying key and value out).

    Raises:
        CodecError: as :func:`decode_message`.
    """
    if (
        buf[:8] == MSG_PLAIN[0]
        and len(buf) <= SLICE_MAX_BYTES
        and type(buf) is bytes
        and buf[12:13] in POLICY_BYTES
    ):
        # The common case, inline: a flags-0 message, CRC through a bytes slice.
        kind, flags = KIND_MESSAGE, 0
        if crc32(buf[ENVELOPE_HEADER_SIZE:], MSG_PLAIN[1]) != U32.unpack_from(buf, 8)[0]:
            raise CodecError("envelope CRC mismatch", reason="crc")
    else:
        kind, flags = open_envelope(buf)
    if kind != KIND_MESSAGE:
        raise CodecError(f"envelope kind {kind} is not a message")
    if flags & ~FLAG_PRODUCER:
        raise CodecError(f"unknown envelope flags {flags:#06x}")
    n = len(buf)
    try:
        ack_policy, klen = POLICY_KEY.unpack_from(buf, ENVELOPE_HEADER_SIZE)
        if ack_policy not in ACK_POLICIES:
            raise CodecError(f"unknown ack policy {ack_policy}")
        p = KEY_POS + 4
        if klen != -1:
            if klen < 0:
                raise CodecError(f"bad key length {klen}")
            if klen > MAX_KEY_BYTES:
                raise CodecError(f"key of {klen} bytes exceeds {MAX_KEY_BYTES}", reason="limit")
            p += klen
            if p > n:
                raise CodecError("truncated key", reason="truncated")
        if buf[p : p + 2] == NO_HEADERS:
            headers: w.Headers = ()
            p += 2
        else:
            headers, p = w.get_headers(buf, p)
        headers_end = p
        # ack_inbox and correlation_id (str16 each), inline.
        (ilen,) = U16.unpack_from(buf, p)
        if ilen > MAX_SUBJECT_BYTES:
            raise CodecError(
                f"ack inbox of {ilen} bytes exceeds {MAX_SUBJECT_BYTES}", reason="limit"
            )
        p += 2 + ilen
        if p > n:
            raise CodecError("truncated ack inbox", reason="truncated")
        ack_inbox = buf[p - ilen : p].decode() if ilen else ""
        (clen,) = U16.unpack_from(buf, p)
        if clen > MAX_CORRELATION_ID_BYTES:
            raise CodecError(
                f"correlation id of {clen} bytes exceeds {MAX_CORRELATION_ID_BYTES}",
                reason="limit",
            )
        p += 2 + clen
        if p > n:
            raise CodecError("truncated correlation id", reason="truncated")
        correlation_id = buf[p - clen : p].decode() if clen else ""
        producer_pos = -1
        if flags:
            w.need(buf, p, 16, "producer id")
            producer_pos = p
            p += 16
        (vlen,) = U32.unpack_from(buf, p)
        if vlen > MAX_VALUE_BYTES:
            raise CodecError(f"value of {vlen} bytes exceeds {MAX_VALUE_BYTES}", reason="limit")
        end = p + 4 + vlen
        if end != n:
            if end > n:
                raise CodecError("truncated value", reason="truncated")
            raise CodecError(f"{n - end} trailing bytes after envelope message")
    except UnicodeDecodeError:
        raise CodecError("envelope text field is not valid UTF-8") from None
    except w.DECODE_ERRORS as exc:
        raise w.convert(exc, "envelope message") from None
    return (ack_policy, klen, headers, headers_end, ack_inbox, correlation_id, producer_pos, p)


def decode_message(payload: bytes | bytearray | memoryview) -> EnvelopeMessage:
    """Decode a kind 0 envelope.

    Raises:
        CodecError: anything but a valid version 1 kind 0 envelope (reasons ``"truncated"``,
            ``"version"``, ``"crc"``, ``"limit"``, ``"malformed"``).
    """
    buf = payload if isinstance(payload, bytes) else bytes(payload)
    policy, klen, headers, _end, inbox, corr, producer_pos, value_pos = scan_message(buf)
    producer_id: int | None = None
    producer_seq = 0
    if producer_pos >= 0:
        producer_id, producer_seq = PRODUCER.unpack_from(buf, producer_pos)
    return EnvelopeMessage(
        value=buf[value_pos + 4 :],
        key=None if klen < 0 else buf[KEY_POS + 4 : KEY_POS + 4 + klen],
        headers=headers,
        ack_inbox=inbox,
        correlation_id=corr,
        ack_policy=POLICY_BY_VALUE[policy],
        producer_id=producer_id,
        producer_seq=producer_seq,
    )


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
