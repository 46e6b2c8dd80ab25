"""The Produce response to a request with the current-values flag (spec/protocol.md §6,
flags bit 2): each result as in :func:`jetsdk.codec.messages.encode_produce_response`,
and a WRONG_EXPECTED_KEY_OFFSET result followed by the key's current value (``nbytes32``,
-1: none or left out). With the latest-values flag too (bit 3), a success result is
followed by the key's latest offset (``i64``, -1: no later write of the key) and, when it is
one, that record's value (``nbytes32``). Results of other codes keep their 18 bytes, so the
change lies inside the per-message result."""

from __future__ import annotations

import struct
from collections.abc import Sequence

from jetsdk.codec import _wire as w
from jetsdk.codec.error_codes import AckPolicy, ErrorCode
from jetsdk.codec.errors import CodecError
from jetsdk.codec.limits import MAX_KEY_BYTES, MAX_VALUE_BYTES
from jetsdk.codec.messages import (
    PRODUCE_FLAG_CURRENT_VALUES,
    PRODUCE_FLAG_LATEST_VALUES,
    PRODUCE_FLAG_PRODUCER,
    PRODUCE_FLAG_SEQUENCE_START,
    SEPARATE_VALUE_MIN_BYTES,
    ProduceResult,
    _stream_field,
)
from jetsdk.codec.record_controls import EXPECTED_KEY_OFFSET_HEADER, parse_expected_key_offset

__all__ = [
    "LoneKeyCas",
    "decode_one_result_values",
    "decode_produce_response_values",
    "encode_key_write",
    "encode_produce_response_values",
    "encode_produce_result_values",
    "lone_key_cas",
    "lone_key_cas_at",
]

_RESULT = struct.Struct(">Hqq")
_LATEST = struct.Struct(">q")
_REFUSED = int(ErrorCode.WRONG_EXPECTED_KEY_OFFSET)
_CAS_NAME = EXPECTED_KEY_OFFSET_HEADER.lower().encode()
_CAS_HEAD = struct.Struct(">Hi")  # the subject's length (0: none), the key's
_ONE_HEADER = b"\x00\x01"
_CAS_NAME_LEN = struct.Struct(">H")
_U32 = w.U32
_MAX_CAS_VALUE_BYTES = 24
"""Longest ``Jet-Expected-Key-Offset`` value :func:`lone_key_cas` takes (an i64 and room)."""

_KEY_WRITE_HEAD = struct.Struct(">IBIBQQIHI")
"""A table write's request after the stream name: partition, ack ALL, timeout, flags,
producer id and sequence, one message, no subject, the key's length."""
_ALL = int(AckPolicy.ALL)
_WRITE_FLAGS = PRODUCE_FLAG_PRODUCER | PRODUCE_FLAG_SEQUENCE_START
"""A table numbers its writes across its partitions (one producer id): each request starts
its own sequence (spec/protocol.md, "Sequences"), duplicates are still recognised."""
_CAS_FLAGS = _WRITE_FLAGS | PRODUCE_FLAG_CURRENT_VALUES | PRODUCE_FLAG_LATEST_VALUES
_CAS_HEADER = b"\x00\x01" + _CAS_NAME_LEN.pack(len(EXPECTED_KEY_OFFSET_HEADER))
_CAS_HEADER += EXPECTED_KEY_OFFSET_HEADER.encode()
_NO_HEADER = b"\x00\x00"


def encode_key_write(
    stream: str,
    partition: int,
    timeout_ms: int,
    producer_id: int,
    seq: int,
    key: bytes,
    value: bytes,
    expected: int | None,
) -> bytes | None:
    """The body :func:`~jetsdk.codec.messages.encode_produce_request` encodes for a
    table's write of one message: ``value`` under ``key``, ack ALL, producer
    ``producer_id`` at ``seq`` (sequence start: :data:`_WRITE_FLAGS`), with
    ``Jet-Expected-Key-Offset: expected`` and the current- and latest-values flags (None:
    no header, neither flag); without the request
    object (a table's lone writer sends one per try). None if a field is out of range or
    the value is large (encode the request)."""
    if len(key) > MAX_KEY_BYTES or len(value) >= SEPARATE_VALUE_MIN_BYTES:
        return None
    flags = _WRITE_FLAGS if expected is None else _CAS_FLAGS
    try:
        head = _KEY_WRITE_HEAD.pack(
            partition, _ALL, timeout_ms, flags, producer_id, seq, 1, 0, len(key)
        )
    except struct.error:
        return None
    name_len, name = _stream_field(stream)  # (remembered per stream name)
    size = _U32.pack(len(value))
    if expected is None:
        return b"".join((name_len, name, head, key, _NO_HEADER, size, value))
    text = b"%d" % expected
    cas = _CAS_HEADER + _U32.pack(len(text)) + text
    return b"".join((name_len, name, head, key, cas, size, value))


LoneKeyCas = tuple[bytes, int, int]
"""A Produce request's one message that is a plain compare-and-set (:func:`lone_key_cas`):
its key, the offset its ``Jet-Expected-Key-Offset`` names (-1: absent) and its size as
counted against max_message_bytes (key, header name and value, value)."""


def lone_key_cas(body: bytes | bytearray | memoryview, p: int) -> LoneKeyCas | None:
    """The message at ``p`` (the first of the request body ``body``, which must hold
    nothing after it) if it is a plain compare-and-set: no subject, a key, one header,
    ``Jet-Expected-Key-Offset`` with a valid value, and a value; None for anything else
    (a malformed body too: the full decode says why). A leader answers such a message's
    lost race from this alone (``jetserver.broker.current_values.lean_refusal``), without
    building its envelope and record (a table's racing writers send one per try)."""
    found = lone_key_cas_at(body, p)
    return None if found is None else found[:3]


def lone_key_cas_at(
    body: bytes | bytearray | memoryview, p: int
) -> tuple[bytes, int, int, int, int] | None:
    """:func:`lone_key_cas` and where its message's key field ends and its value field
    (``u32`` length, bytes) starts in ``body``."""
    n = len(body)
    if p + 6 > n:
        return None
    subject_len, klen = _CAS_HEAD.unpack_from(body, p)
    if subject_len or not 0 <= klen <= MAX_KEY_BYTES:
        return None
    key_end = p + 6 + klen
    q = key_end + 2  # the header name's length
    if q + 2 > n or body[key_end:q] != _ONE_HEADER:
        return None
    (name_len,) = _CAS_NAME_LEN.unpack_from(body, q)
    name_end = q + 2 + name_len
    if name_len != len(_CAS_NAME) or name_end + 4 > n:
        return None
    if bytes(body[q + 2 : name_end]).lower() != _CAS_NAME:
        return None
    (hlen,) = _U32.unpack_from(body, name_end)
    hval_end = name_end + 4 + hlen
    if hlen > _MAX_CAS_VALUE_BYTES or hval_end + 4 > n:
        return None
    expected = parse_expected_key_offset(bytes(body[name_end + 4 : hval_end]))
    (vlen,) = _U32.unpack_from(body, hval_end)
    if expected is None or vlen > MAX_VALUE_BYTES or hval_end + 4 + vlen != n:
        return None
    size = klen + name_len + hlen + vlen
    return bytes(body[p + 6 : key_end]), expected, size, key_end, hval_end


def encode_produce_result_values(
    results: Sequence[tuple[int, int, int]],
    values: Sequence[bytes | None],
    latest: Sequence[tuple[int, bytes | None]] | None = None,
) -> bytes:
    """The response body from ``(error_code, offset, timestamp)`` results, a
    WRONG_EXPECTED_KEY_OFFSET one followed by its value from ``values`` (same index; None:
    -1). ``latest`` (the request had the latest-values flag): per result, the key's latest
    (offset, value) that follows a success result ((-1, None): no later write).

    Raises:
        CodecError: a field out of range (reason ``"limit"``).
    """
    parts = [w.U32.pack(len(results))]
    pack = _RESULT.pack
    try:
        for i, (result, value) in enumerate(zip(results, values, strict=True)):
            parts.append(pack(*result))
            if result[0] == _REFUSED:
                w.put_nbytes32(parts, value, "current value", MAX_VALUE_BYTES)
            elif latest is not None and result[0] == 0:
                moved, moved_value = latest[i]
                parts.append(_LATEST.pack(moved))
                if moved >= 0:
                    w.put_nbytes32(parts, moved_value, "latest value", MAX_VALUE_BYTES)
    except struct.error as exc:
        raise CodecError(f"produce result field out of range: {exc}", reason="limit") from None
    return b"".join(parts)


def encode_produce_response_values(results: Sequence[ProduceResult], latest: bool = False) -> bytes:
    """The response body of ``results`` (their ``current_value`` where refused; with
    ``latest``, their ``latest_offset`` and ``current_value`` where they succeeded).

    Raises:
        CodecError: a field out of range (reason ``"limit"``).
    """
    return encode_produce_result_values(
        [(r.error_code, r.offset, r.timestamp) for r in results],
        [r.current_value for r in results],
        [(r.latest_offset, r.current_value) for r in results] if latest else None,
    )


def decode_produce_response_values(
    body: bytes | bytearray | memoryview, latest: bool = False
) -> list[ProduceResult]:
    """Decode the response body of a request with the flag (``latest``: and the
    latest-values flag).

    Raises:
        CodecError: truncated, trailing bytes, or a value over MAX_VALUE_BYTES.
    """
    body = bytes(body)
    try:
        count, p = w.get_count(body, 0, _RESULT.size, "result")
        out: list[ProduceResult] = []
        for _ in range(count):
            w.need(body, p, _RESULT.size, "produce result")
            code, offset, timestamp = _RESULT.unpack_from(body, p)
            p += _RESULT.size
            value = None
            moved = -1
            if code == _REFUSED:
                value, p = w.get_nbytes32(body, p, "current value", MAX_VALUE_BYTES)
            elif latest and code == 0:
                w.need(body, p, _LATEST.size, "latest offset")
                (moved,) = _LATEST.unpack_from(body, p)
                p += _LATEST.size
                if moved >= 0:
                    value, p = w.get_nbytes32(body, p, "latest value", MAX_VALUE_BYTES)
                elif moved != -1:
                    raise CodecError(f"latest offset {moved}")
            out.append(ProduceResult(code, offset, timestamp, value, moved))
        w.check_end(body, p, "produce response")
    except w.DECODE_ERRORS as exc:
        raise w.convert(exc, "produce response") from None
    return out


_ONE_RESULT = struct.Struct(">IHqq")
_I32 = w.I32


def decode_one_result_values(
    body: bytes | bytearray | memoryview, latest: bool = False
) -> ProduceResult | None:
    """:func:`decode_produce_response_values` of a body of exactly one result, its one
    result (a table's lone write); None for any other body (decode it in full: the error
    says why)."""
    n = len(body)
    if n < _ONE_RESULT.size:
        return None
    count, code, offset, timestamp = _ONE_RESULT.unpack_from(body, 0)
    p = _ONE_RESULT.size
    value = None
    moved = -1
    if count != 1:
        return None
    if latest and code == 0:
        if p + 8 > n:
            return None
        (moved,) = _LATEST.unpack_from(body, p)
        p += 8
        if moved < -1:
            return None
    if code == _REFUSED or moved >= 0:
        if p + 4 > n:
            return None
        (size,) = _I32.unpack_from(body, p)
        p += 4
        if size >= 0:
            value = bytes(body[p : p + size])
            p += size
        elif size != -1:
            return None
    if p != n or (value is not None and len(value) > MAX_VALUE_BYTES):
        return None
    return ProduceResult(code, offset, timestamp, value, moved)
