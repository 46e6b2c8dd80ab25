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
    MAX_KEY_BYTES,
    MAX_STREAM_NAME_BYTES,
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
    "Ack",
    "AckEncoder",
    "AckFields",
    "AckPolicy",
    "AckTuple",
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
_U16 = struct.Struct(">H")
_I32 = struct.Struct(">i")
_QQ = struct.Struct(">qq")
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


def _sealer(kind: int, flags: int) -> tuple[bytes, int]:
    prefix = _PREFIX.pack(COOKIE, ENVELOPE_VERSION, kind, flags)
    return prefix, zlib.crc32(prefix)


# The 8 bytes before the CRC and their CRC, for every prefix the encoders write.
_MSG_PLAIN = _sealer(KIND_MESSAGE, 0)
_MSG_PRODUCER = _sealer(KIND_MESSAGE, FLAG_PRODUCER)
_ACK_ONE = _sealer(KIND_ACK, 0)
_ACK_BATCH = _sealer(KIND_ACK_BATCH, 0)
_POLICY_BYTE = tuple(bytes((int(p),)) for p in AckPolicy)
_NO_KEY = b"\xff\xff\xff\xff"
_NO_HEADERS = b"\x00\x00"
_POLICY_BYTES = frozenset(_POLICY_BYTE)
_POLICY_KEY = struct.Struct(">Bi")
_ACK_SUCCESS_TAIL = {int(p): bytes((int(p), 0, 0, 0, 0)) for p in AckPolicy}
"""ack_policy, error_code 0, empty error_message: the end of every success ack."""


_PREFIX_CRCS = {prefix: crc for prefix, crc in (_MSG_PLAIN, _MSG_PRODUCER, _ACK_ONE, _ACK_BATCH)}
_SLICE_MAX_BYTES = 64 * 1024
"""Payloads up to this size are CRC-checked through a bytes slice, bigger ones through a
memoryview (no copy)."""


def _seal(sealer: tuple[bytes, int], body: bytes) -> bytes:
    prefix, crc = sealer
    return b"".join((prefix, _U32.pack(zlib.crc32(body, crc)), body))


def _str16(text: str, what: str, limit: int) -> bytes:
    """``text`` as a str16 (u16 length + UTF-8), refusing more than ``limit`` bytes."""
    try:
        raw = text.encode()
    except (UnicodeEncodeError, AttributeError) as exc:
        raise CodecError(f"{what} is not encodable text: {exc}", reason="limit") from None
    n = len(raw)
    if n > limit:
        raise CodecError(f"{what} of {n} bytes exceeds {limit}", reason="limit")
    return _U16.pack(n) + raw


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
        if ack_policy not in _ACK_POLICIES:
            raise CodecError(f"unknown ack policy {ack_policy}", reason="limit")
        self._policy_byte = _POLICY_BYTE[ack_policy]
        self._inbox16 = _str16(ack_inbox, "ack inbox", MAX_SUBJECT_BYTES)
        self._head_keyless = b"".join((self._policy_byte, _NO_KEY, _NO_HEADERS, self._inbox16))

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
        corr16 = _str16(correlation_id, "correlation id", MAX_CORRELATION_ID_BYTES)
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
            sealer = _MSG_PLAIN
        else:
            sealer = _MSG_PRODUCER
            try:
                parts.append(_PRODUCER.pack(producer_id, producer_seq))
            except struct.error as exc:
                raise CodecError(f"producer id/seq out of range: {exc}", reason="limit") from None
        parts.append(_U32.pack(n))
        parts.append(value)
        return _seal(sealer, b"".join(parts))


def _put_ack(parts: list[bytes], ack: Ack) -> None:
    parts.append(_str16(ack.stream, "stream name", MAX_STREAM_NAME_BYTES))
    _put_ack_rest(
        parts,
        ack.partition,
        ack.offset,
        ack.timestamp,
        ack.correlation_id,
        ack.ack_policy,
        ack.error_code,
        ack.error_message,
    )


def _put_ack_rest(
    parts: list[bytes],
    partition: int,
    offset: int,
    timestamp: int,
    correlation_id: str,
    ack_policy: int,
    error_code: int,
    error_message: str,
) -> None:
    """An ack after its stream name."""
    if ack_policy not in _ACK_POLICIES:
        raise CodecError(f"unknown ack policy {ack_policy}", reason="limit")
    try:
        parts.append(_ACK_MID.pack(partition, offset, timestamp))
        parts.append(_str16(correlation_id, "correlation id", MAX_CORRELATION_ID_BYTES))
        if error_code == 0 and not error_message:
            parts.append(_ACK_SUCCESS_TAIL[ack_policy])
            return
        parts.append(_ACK_TAIL.pack(ack_policy, error_code))
    except struct.error as exc:
        raise CodecError(f"ack field out of range: {exc}", reason="limit") from None
    parts.append(_str16(error_message, "error message", MAX_ERROR_MESSAGE_BYTES))


def encode_ack(ack: Ack) -> bytes:
    """Encode a kind 1 envelope (one ack).

    Raises:
        CodecError: a field over its limit or out of range (reason ``"limit"``).
    """
    parts: list[bytes] = []
    _put_ack(parts, ack)
    return _seal(_ACK_ONE, b"".join(parts))


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
    return _seal(_ACK_BATCH, b"".join(parts))


AckFields = tuple[int, int, str, int, int, str]
"""The per-message fields of an ack from one partition: (offset, timestamp, correlation_id,
ack_policy, error_code, error_message)."""


class AckEncoder:
    """Encodes acks of one stream partition from plain :data:`AckFields` tuples (the
    partition leader's hot path: no :class:`Ack` objects); output is byte for byte what
    :func:`encode_ack` / :func:`encode_acks` write for the same acks.

    Thread safety: immutable after construction.
    """

    __slots__ = ("_head", "_partition", "_stream16")

    def __init__(self, stream: str, partition: int) -> None:
        """Prepare the shared fields.

        Raises:
            CodecError: a stream name or partition out of range (reason ``"limit"``).
        """
        try:
            part = _U32.pack(partition)
        except struct.error as exc:
            raise CodecError(f"ack field out of range: {exc}", reason="limit") from None
        self._stream16 = _str16(stream, "stream name", MAX_STREAM_NAME_BYTES)
        self._partition = partition
        self._head = self._stream16 + part

    def encode(self, acks: Sequence[AckFields]) -> bytes:
        """One envelope for 1 to MAX_ACKS_PER_BATCH acks: kind 1 for one, kind 2 for more.

        Raises:
            CodecError: no or too many acks, or a field out of range (reason ``"limit"``).
        """
        count = len(acks)
        if not 1 <= count <= MAX_ACKS_PER_BATCH:
            raise CodecError(
                f"an ack batch holds 1 to {MAX_ACKS_PER_BATCH} acks, not {count}", reason="limit"
            )
        head = self._head
        pack_qq = _QQ.pack
        tails = _ACK_SUCCESS_TAIL
        parts: list[bytes] = [] if count == 1 else [_U16.pack(count)]
        append = parts.append
        try:
            for offset, timestamp, corr, policy, code, message in acks:
                if (
                    code == 0
                    and not message
                    and corr.isascii()
                    and len(corr) <= MAX_CORRELATION_ID_BYTES
                ):
                    tail = tails.get(policy)
                    if tail is not None:
                        append(head)
                        append(pack_qq(offset, timestamp))
                        append(_U16.pack(len(corr)))
                        append(corr.encode())
                        append(tail)
                        continue
                append(self._stream16)
                _put_ack_rest(
                    parts, self._partition, offset, timestamp, corr, policy, code, message
                )
        except struct.error as exc:
            raise CodecError(f"ack field out of range: {exc}", reason="limit") from None
        except AttributeError as exc:
            raise CodecError(f"ack field of the wrong type: {exc}", reason="limit") from None
        return _seal(_ACK_ONE if count == 1 else _ACK_BATCH, b"".join(parts))


def _open(payload: w.Buffer) -> tuple[int, int]:
    """Check cookie, version and CRC; return (kind, flags). The body starts at byte 12."""
    if len(payload) < ENVELOPE_HEADER_SIZE:
        raise CodecError("truncated envelope header", reason="truncated")
    cookie, version, kind, flags, crc = _HEADER.unpack_from(payload, 0)
    if cookie != COOKIE:
        raise CodecError("payload does not start with the envelope cookie")
    if version != ENVELOPE_VERSION:
        raise CodecError(f"unsupported envelope version {version}", reason="version")
    if type(payload) is bytes and len(payload) <= _SLICE_MAX_BYTES:
        # Small payloads: a bytes slice is cheaper than a memoryview, and the CRC of the
        # 8 bytes before the CRC field is known for every valid prefix.
        prefix = payload[:_CRC_COVERED]
        start = _PREFIX_CRCS.get(prefix)
        if start is None:
            start = zlib.crc32(prefix)
        actual = zlib.crc32(payload[ENVELOPE_HEADER_SIZE:], start)
    else:
        mv = memoryview(payload)
        actual = zlib.crc32(mv[ENVELOPE_HEADER_SIZE:], zlib.crc32(mv[:_CRC_COVERED]))
    if actual != crc:
        raise CodecError("envelope CRC mismatch", reason="crc")
    return kind, flags


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
        buf[:8] == _MSG_PLAIN[0]
        and len(buf) <= _SLICE_MAX_BYTES
        and type(buf) is bytes
        and buf[12:13] in _POLICY_BYTES
    ):
        # The common case, inline: a flags-0 message, CRC through a bytes slice.
        kind, flags = KIND_MESSAGE, 0
        if zlib.crc32(buf[ENVELOPE_HEADER_SIZE:], _MSG_PLAIN[1]) != _U32.unpack_from(buf, 8)[0]:
            raise CodecError("envelope CRC mismatch", reason="crc")
    else:
        kind, flags = _open(buf)
    if kind != KIND_MESSAGE:
        raise CodecError(f"envelope kind {kind} is not a message")
    if flags & ~FLAG_PRODUCER:
        raise CodecError(f"unknown envelope flags {flags:#06x}")
    n = len(buf)
    try:
        ack_policy, klen = _POLICY_KEY.unpack_from(buf, ENVELOPE_HEADER_SIZE)
        if ack_policy not in _ACK_POLICIES:
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
        if buf[p : p + 2] == _NO_HEADERS:
            headers: w.Headers = ()
            p += 2
        else:
            headers, p = w.get_headers(buf, p)
        headers_end = p
        # ack_inbox and correlation_id (str16 each), inline.
        (ilen,) = _U16.unpack_from(buf, p)
        if ilen > MAX_SUBJECT_BYTES:
            raise CodecError(
                f"ack inbox of {ilen} bytes exceeds {MAX_SUBJECT_BYTES}", reason="limit"
            )
        p += 2 + ilen
        if p > n:
            raise CodecError("truncated ack inbox", reason="truncated")
        ack_inbox = buf[p - ilen : p].decode() if ilen else ""
        (clen,) = _U16.unpack_from(buf, p)
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
        (vlen,) = _U32.unpack_from(buf, p)
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
        producer_id, producer_seq = _PRODUCER.unpack_from(buf, producer_pos)
    return EnvelopeMessage(
        value=buf[value_pos + 4 :],
        key=None if klen < 0 else buf[KEY_POS + 4 : KEY_POS + 4 + klen],
        headers=headers,
        ack_inbox=inbox,
        correlation_id=corr,
        ack_policy=_POLICY_BY_VALUE[policy],
        producer_id=producer_id,
        producer_seq=producer_seq,
    )


AckTuple = tuple[str, int, int, int, str, int, int, str]
"""A decoded ack as a plain tuple: (stream, partition, offset, timestamp, correlation_id,
ack_policy, error_code, error_message)."""


def decode_ack_tuples(payload: bytes | bytearray | memoryview) -> list[AckTuple]:
    """Decode a kind 1 or kind 2 envelope into :data:`AckTuple` tuples (what
    :func:`decode_acks` returns, without building :class:`Ack` objects).

    Raises:
        CodecError: anything but a valid version 1 kind 1 or 2 envelope.
    """
    buf = payload if isinstance(payload, bytes) else bytes(payload)
    kind, flags = _open(buf)
    if kind not in (KIND_ACK, KIND_ACK_BATCH):
        raise CodecError(f"envelope kind {kind} is not an ack")
    if flags:
        raise CodecError(f"unknown envelope flags {flags:#06x}")
    n = len(buf)
    p = ENVELOPE_HEADER_SIZE
    out: list[AckTuple] = []
    try:
        if kind == KIND_ACK:
            count = 1
        else:
            w.need(buf, p, 2, "ack count")
            (count,) = _U16.unpack_from(buf, p)
            p += 2
            if count == 0:
                raise CodecError("empty ack batch")
            if count * _MIN_ACK > n - p:
                raise CodecError(f"ack count {count} exceeds the payload", reason="truncated")
        u16 = _U16.unpack_from
        mid = _ACK_MID.unpack_from
        tail = _ACK_TAIL.unpack_from
        mid_size = _ACK_MID.size
        policies = _ACK_POLICIES
        append = out.append
        prev_raw = b""
        prev_stream = ""
        for _ in range(count):
            (slen,) = u16(buf, p)
            p += 2
            if slen > MAX_STREAM_NAME_BYTES:
                raise CodecError(
                    f"stream name of {slen} bytes exceeds {MAX_STREAM_NAME_BYTES}",
                    reason="limit",
                )
            end = p + slen
            if end > n:
                raise CodecError("truncated stream name", reason="truncated")
            raw = buf[p:end]
            if raw != prev_raw:  # a batch is normally one stream: decode its name once
                prev_stream = str(raw, "utf-8")
                prev_raw = raw
            p = end
            w.need(buf, p, mid_size, "ack")
            partition, offset, timestamp = mid(buf, p)
            p += mid_size
            (clen,) = u16(buf, p)
            p += 2
            if clen > MAX_CORRELATION_ID_BYTES:
                raise CodecError(
                    f"correlation id of {clen} bytes exceeds {MAX_CORRELATION_ID_BYTES}",
                    reason="limit",
                )
            end = p + clen
            if end > n:
                raise CodecError("truncated correlation id", reason="truncated")
            corr = str(buf[p:end], "utf-8")
            p = end
            w.need(buf, p, 5, "ack")
            ack_policy, error_code = tail(buf, p)
            p += 3
            if ack_policy not in policies:
                raise CodecError(f"unknown ack policy {ack_policy}")
            if buf[p : p + 2] == _NO_HEADERS:  # empty error message
                message = ""
                p += 2
            else:
                message, p = w.get_str16(buf, p, "error message", MAX_ERROR_MESSAGE_BYTES)
            append(
                (prev_stream, partition, offset, timestamp, corr, ack_policy, error_code, message)
            )
        w.check_end(buf, p, "ack envelope")
    except UnicodeDecodeError:
        raise CodecError("ack text field is not valid UTF-8") from None
    except w.DECODE_ERRORS as exc:
        raise w.convert(exc, "ack envelope") from None
    return out


def decode_acks(payload: bytes | bytearray | memoryview) -> list[Ack]:
    """Decode a kind 1 (one ack) or kind 2 (ack batch) envelope.

    Raises:
        CodecError: anything but a valid version 1 kind 1 or 2 envelope.
    """
    return [
        Ack(
            stream=stream,
            partition=partition,
            offset=offset,
            timestamp=timestamp,
            correlation_id=corr,
            ack_policy=_POLICY_BY_VALUE[policy],
            error_code=code,
            error_message=message,
        )
        for stream, partition, offset, timestamp, corr, policy, code, message in (
            decode_ack_tuples(payload)
        )
    ]


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
