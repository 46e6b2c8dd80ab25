"""Request and response bodies of the client protocol (spec/protocol.md, "APIs").

JSON APIs (Hello, Metadata, CreateStream, DeleteStream, DescribeStream, ListOffsets) and
error responses use :func:`encode_json` / :func:`decode_json` and the error helpers;
OffsetForLeaderEpoch has its own module (:mod:`jetsdk.codec.epoch_messages`), Fetch too
(:mod:`jetsdk.codec.fetch_messages`); Produce has a binary body,
encoded and decoded here field by field.

This module is pure: no I/O. Decoders raise only :class:`CodecError`; encoders raise
CodecError with reason ``"limit"`` for a field over its limit or out of its integer range.
"""

from __future__ import annotations

import functools
import itertools
import struct
from collections.abc import Mapping, Sequence
from typing import Any

import attrs
import orjson

from jetsdk.codec import _wire as w
from jetsdk.codec.error_codes import AckPolicy, ErrorCode, error_name
from jetsdk.codec.errors import CodecError
from jetsdk.codec.limits import MAX_KEY_BYTES, MAX_SUBJECT_BYTES, MAX_VALUE_BYTES
from jetsdk.codec.slots import slot_setters

# --------------------------------------------------------------------------------------
# JSON bodies and errors


def encode_json(obj: Mapping[str, Any]) -> bytes:
    """Encode a JSON object body (UTF-8, compact, keys in insertion order).

    Raises:
        CodecError: ``obj`` holds something JSON cannot represent (reason ``"limit"``).
    """
    try:
        return orjson.dumps(obj)
    except (orjson.JSONEncodeError, TypeError) as exc:
        raise CodecError(f"body is not JSON-encodable: {exc}", reason="limit") from None


def decode_json(body: bytes | bytearray | memoryview) -> dict[str, Any]:
    """Decode a JSON body that must be an object.

    Raises:
        CodecError: not UTF-8 JSON, or not an object.
    """
    try:
        obj = orjson.loads(body)
    except (orjson.JSONDecodeError, ValueError, TypeError, RecursionError) as exc:
        raise CodecError(f"body is not valid JSON: {exc}") from None
    if not isinstance(obj, dict):
        raise CodecError(f"JSON body must be an object, not {type(obj).__name__}")
    return obj


@attrs.frozen
class ErrorBody:
    """A decoded error response body."""

    code: int
    """Wire error code (an :class:`ErrorCode` value, or a code this version does not know)."""
    name: str
    """The code's name as sent by the server."""
    message: str
    """Human-readable explanation."""
    details: dict[str, Any] = attrs.field(factory=dict)
    """Code-specific fields (spec/protocol.md, "Error codes"); empty if none."""

    @property
    def error_code(self) -> ErrorCode | None:
        """The code as an ErrorCode, or None if unknown to this version."""
        try:
            return ErrorCode(self.code)
        except ValueError:
            return None


def encode_error(code: ErrorCode, message: str, details: Mapping[str, Any] | None = None) -> bytes:
    """The JSON body of an error response: ``{"code", "name", "message", "details"}``.

    Raises:
        CodecError: ``details`` is not JSON-encodable (reason ``"limit"``).
    """
    obj = {
        "code": int(code),
        "name": error_name(code),
        "message": message,
        "details": dict(details) if details else {},
    }
    return encode_json(obj)


def decode_error(body: bytes | bytearray | memoryview) -> ErrorBody:
    """Decode an error response body.

    ``name``, ``message`` and ``details`` are optional on the wire (defaults: the code's
    name, ``""``, ``{}``); ``code`` is required.

    Raises:
        CodecError: not a JSON object, or a field of the wrong type.
    """
    obj = decode_json(body)
    code = obj.get("code")
    if not isinstance(code, int) or isinstance(code, bool):
        raise CodecError("error body has no integer 'code'")
    name = obj.get("name", error_name(code))
    message = obj.get("message", "")
    details = obj.get("details")
    if details is None:
        details = {}
    if not isinstance(name, str) or not isinstance(message, str):
        raise CodecError("error body 'name' and 'message' must be strings")
    if not isinstance(details, dict):
        raise CodecError("error body 'details' must be an object")
    return ErrorBody(code=code, name=name, message=message, details=details)


# --------------------------------------------------------------------------------------
# Produce

_PRODUCE_HEAD = struct.Struct(">IBIB")  # partition, ack_policy, timeout_ms, flags
_PRODUCER = struct.Struct(">QQ")
_RESULT = struct.Struct(">Hqq")
PRODUCE_FLAG_PRODUCER = 0x01
"""Produce request flag: producer_id and base_seq follow."""
PRODUCE_FLAG_SEQUENCE_START = 0x02
"""Produce request flag (with the producer flag): every earlier sequence of the producer
for the partition is settled, so the leader takes ``base_seq`` as the next one whatever
it remembers (spec/protocol.md, "Sequences")."""
PRODUCE_FLAG_CURRENT_VALUES = 0x04
"""Produce request flag: a WRONG_EXPECTED_KEY_OFFSET result carries the key's current value
(spec/protocol.md §6, "current values")."""
PRODUCE_FLAG_LATEST_VALUES = 0x08
"""Produce request flag, with the previous one only: a success result carries its key's
later record if any (spec/protocol.md §6)."""
_PRODUCE_FLAGS = (
    PRODUCE_FLAG_PRODUCER
    | PRODUCE_FLAG_SEQUENCE_START
    | PRODUCE_FLAG_CURRENT_VALUES
    | PRODUCE_FLAG_LATEST_VALUES
)
_MIN_PRODUCE_MESSAGE = 2 + 4 + 2 + 4  # empty subject, null key, no headers, empty value
_PLAIN_MESSAGE_HEAD = b"\x00\x00" + w.NULL_LEN + b"\x00\x00"
"""A Produce message up to its value: empty subject, no key, no headers."""
_ACK_POLICIES = frozenset(int(p) for p in AckPolicy)
_POLICY_BY_VALUE = tuple(AckPolicy)  # index by wire value: faster than AckPolicy(value)


@attrs.frozen
class ProduceMessage:
    """One message of a Produce request."""

    value: bytes
    """The payload."""
    key: bytes | None = None
    """The key, or None for a keyless message."""
    headers: tuple[tuple[str, bytes], ...] = ()
    """Ordered (name, value) pairs; names may repeat."""
    subject: str = ""
    """NATS subject to publish on; empty for the partition's subject."""


@attrs.frozen
class ProduceRequest:
    """Body of a Produce request."""

    stream: str
    """Stream name."""
    partition: int
    """Partition number."""
    ack_policy: AckPolicy
    """When the partition leader acknowledges (spec/acks.md)."""
    timeout_ms: int
    """How long the server waits for acks, in milliseconds."""
    messages: tuple[ProduceMessage, ...]
    """The messages, in order."""
    producer_id: int | None = None
    """Idempotent producer id, or None."""
    base_seq: int = 0
    """Sequence of the first message (message i has base_seq + i); with a producer id."""
    current_values: bool = False
    """Ask for the key's current value in each WRONG_EXPECTED_KEY_OFFSET result (flags bit
    2): :attr:`ProduceResult.current_value`."""
    latest_values: bool = False
    """With :attr:`current_values`: ask for a success result's later record of its key
    (flags bit 3): :attr:`ProduceResult.latest_offset`."""
    sequence_start: bool = False
    """With a producer id: every earlier sequence of the producer for this partition is
    settled (flags bit 1): the leader takes ``base_seq`` as the next one."""


@attrs.frozen
class ProduceResult:
    """Outcome of one produced message."""

    error_code: int
    """0 on success, else a wire error code (TIMEOUT: the outcome is unknown)."""
    offset: int
    """Assigned offset, or -1 (ack policy NONE, or an error without an offset)."""
    timestamp: int
    """Stored timestamp in ns since the epoch, or -1."""
    current_value: bytes | None = None
    """WRONG_EXPECTED_KEY_OFFSET of a request with :attr:`ProduceRequest.current_values`:
    the value of the key's record at :attr:`offset`, which may not be committed yet (build a
    compare-and-set on it, never treat it as committed); None: none or left out. With
    :attr:`latest_offset`: the value there (the same caveats)."""
    latest_offset: int = -1
    """With :attr:`ProduceRequest.latest_values`, a success result: its key's later offset."""


SEPARATE_VALUE_MIN_BYTES = 64 * 1024
"""The one-message encodings (:mod:`jetsdk.codec.produce_one`,
:mod:`jetsdk.codec.produce_values`) leave a value of at least this many bytes to
:func:`encode_produce_request_parts`."""
PART_VALUE_MIN_BYTES = 16 * 1024
"""A value of at least this many bytes stays a part of its own in
:func:`encode_produce_request_parts` (not joined into the body). It was 64 KiB: a 1 MiB
request of 16 KiB values was joined, one more copy of every value (issue 39)."""


def encode_produce_request(req: ProduceRequest) -> bytes:
    """Encode a Produce request body.

    Raises:
        CodecError: a field over its limit or out of range (reason ``"limit"``).
    """
    return b"".join(_produce_request_parts(req)[0])


def encode_produce_request_parts(req: ProduceRequest) -> bytes | tuple[bytes, ...]:
    """:func:`encode_produce_request`, with every value of at least
    :data:`PART_VALUE_MIN_BYTES` left as it is: the body as parts (the bytes between
    two such values joined, each such value the caller's object itself) to be written
    back to back with one gathered write, not joined first (issue 39: at 1 MiB the join
    was a fresh buffer and a copy of every value, a fifth of the producer's CPU). Without
    such a value, the joined body.

    Raises:
        CodecError: as :func:`encode_produce_request`.
    """
    parts, separate = _produce_request_parts(req)
    if not separate:
        return b"".join(parts)
    out: list[bytes] = []
    start = 0
    for i in separate:
        if i > start:
            out.append(b"".join(parts[start:i]))
        out.append(parts[i])
        start = i + 1
    if start < len(parts):
        out.append(b"".join(parts[start:]))
    return tuple(out)


def _produce_request_parts(req: ProduceRequest) -> tuple[list[bytes], list[int]]:
    """The parts of a Produce request body, and the indexes among them of the values of
    at least :data:`PART_VALUE_MIN_BYTES`."""
    if req.ack_policy not in _ACK_POLICIES:
        raise CodecError(f"unknown ack policy {req.ack_policy}", reason="limit")
    parts: list[bytes] = list(_stream_field(req.stream))
    separate: list[int] = []
    flags = 0
    if req.producer_id is not None:
        flags = PRODUCE_FLAG_PRODUCER
        if req.sequence_start:
            flags |= PRODUCE_FLAG_SEQUENCE_START
    if req.current_values:
        flags |= PRODUCE_FLAG_CURRENT_VALUES
        if req.latest_values:
            flags |= PRODUCE_FLAG_LATEST_VALUES
    try:
        parts.append(_PRODUCE_HEAD.pack(req.partition, req.ack_policy, req.timeout_ms, flags))
        if req.producer_id is not None:
            parts.append(_PRODUCER.pack(req.producer_id, req.base_seq))
        parts.append(w.U32.pack(len(req.messages)))
    except struct.error as exc:
        raise CodecError(f"produce request field out of range: {exc}", reason="limit") from None
    append = parts.append
    pack_u32 = w.U32.pack
    for msg in req.messages:
        value = msg.value
        if not msg.subject and msg.key is None and not msg.headers:
            # The common message, inline: no subject, no key, no headers.
            n = len(value)
            if n > MAX_VALUE_BYTES:
                raise CodecError(f"value of {n} bytes exceeds {MAX_VALUE_BYTES}", reason="limit")
            append(_PLAIN_MESSAGE_HEAD)
            append(pack_u32(n))
            if n >= PART_VALUE_MIN_BYTES and type(value) is bytes:  # immutable
                separate.append(len(parts))
            append(value)
            continue
        w.put_str16(parts, msg.subject, "subject", MAX_SUBJECT_BYTES)
        w.put_key(parts, msg.key)
        w.put_headers(parts, msg.headers)
        w.put_value(parts, value)
        if len(value) >= PART_VALUE_MIN_BYTES:
            separate.append(len(parts) - 1)
    return parts, separate


@functools.lru_cache(maxsize=1024)
def _stream_field(stream: str) -> tuple[bytes, bytes]:
    """A Produce request's stream name field (``str16``: a producer sends the same one in
    every request, encoded once)."""
    parts: list[bytes] = []
    w.put_str16(parts, stream, "stream name")
    return parts[0], parts[1]


ProduceHead = tuple[str, int, AckPolicy, int, int | None, int, int, int]
"""The fixed part of a Produce request: (stream, partition, ack_policy, timeout_ms,
producer_id, base_seq, message count, position of the first message)."""


def decode_produce_head(body: bytes | bytearray | memoryview) -> ProduceHead:
    """Decode the fixed part of a Produce request body (the messages are not looked at,
    beyond checking that ``count`` of them can fit).

    Raises:
        CodecError: truncated, unknown ack policy or flags, a count the body cannot hold.
    """
    try:
        stream, p = w.get_str16(body, 0, "stream name")
        w.need(body, p, _PRODUCE_HEAD.size, "produce request")
        partition, ack, timeout_ms, flags = _PRODUCE_HEAD.unpack_from(body, p)
        p += _PRODUCE_HEAD.size
        if ack not in _ACK_POLICIES:
            raise CodecError(f"unknown ack policy {ack}")
        if flags & ~_PRODUCE_FLAGS:
            raise CodecError(f"unknown produce flags {flags:#x}")
        if flags & PRODUCE_FLAG_SEQUENCE_START and not flags & PRODUCE_FLAG_PRODUCER:
            raise CodecError("produce flag sequence start (bit 1) without a producer (bit 0)")
        if flags & PRODUCE_FLAG_LATEST_VALUES and not flags & PRODUCE_FLAG_CURRENT_VALUES:
            raise CodecError("produce flag latest values (bit 3) without current values (bit 2)")
        producer_id: int | None = None
        base_seq = 0
        if flags & PRODUCE_FLAG_PRODUCER:
            w.need(body, p, 16, "producer id")
            producer_id, base_seq = _PRODUCER.unpack_from(body, p)
            p += 16
        count, p = w.get_count(body, p, _MIN_PRODUCE_MESSAGE, "message")
    except w.DECODE_ERRORS as exc:
        raise w.convert(exc, "produce request") from None
    return (
        stream,
        partition,
        _POLICY_BY_VALUE[ack],
        timeout_ms,
        producer_id,
        base_seq,
        count,
        p,
    )


def decode_produce_request(body: bytes | bytearray | memoryview) -> ProduceRequest:
    """Decode a Produce request body.

    Raises:
        CodecError: truncated, trailing bytes, unknown ack policy or flags, a field over its
            limit.
    """
    if not isinstance(body, bytes):
        body = bytes(body)  # one copy; slices of bytes are then bytes (no second copy)
    stream, partition, ack_policy, timeout_ms, producer_id, base_seq, count, p = (
        decode_produce_head(body)
    )
    try:
        messages, p = _decode_produce_messages(body, p, count)
        w.check_end(body, p, "produce request")
    except w.DECODE_ERRORS as exc:
        raise w.convert(exc, "produce request") from None
    return ProduceRequest(
        stream=stream,
        partition=partition,
        ack_policy=ack_policy,
        timeout_ms=timeout_ms,
        messages=tuple(messages),
        producer_id=producer_id,
        base_seq=base_seq,
        current_values=produce_wants_current_values(body),
        latest_values=produce_wants_latest_values(body),
        sequence_start=produce_starts_sequence(body),
    )


def produce_wants_current_values(body: bytes | bytearray | memoryview) -> bool:
    """True if a Produce request body has the current-values flag (bit 2); the body's head
    must be valid (:func:`decode_produce_head` checked it)."""
    (slen,) = w.U16.unpack_from(body, 0)
    return bool(body[2 + slen + 9] & PRODUCE_FLAG_CURRENT_VALUES)


def produce_starts_sequence(body: bytes | bytearray | memoryview) -> bool:
    """As :func:`produce_wants_current_values`, for the sequence-start flag (bit 1)."""
    (slen,) = w.U16.unpack_from(body, 0)
    return bool(body[2 + slen + 9] & PRODUCE_FLAG_SEQUENCE_START)


def produce_wants_latest_values(body: bytes | bytearray | memoryview) -> bool:
    """As :func:`produce_wants_current_values`, for the latest-values flag (bit 3)."""
    (slen,) = w.U16.unpack_from(body, 0)
    return bool(body[2 + slen + 9] & PRODUCE_FLAG_LATEST_VALUES)


def _decode_produce_messages(body: bytes, p: int, count: int) -> tuple[list[ProduceMessage], int]:
    """The ``count`` messages starting at ``p``: the hot loop of the server's Produce path,
    inlined (no helper calls per field) for speed."""
    n = len(body)
    u16 = w.U16.unpack_from
    u32 = w.U32.unpack_from
    i32 = w.I32.unpack_from
    get_headers = w.get_headers
    out: list[ProduceMessage] = []
    append = out.append
    for _ in range(count):
        (slen,) = u16(body, p)
        p += 2
        if slen:
            if slen > MAX_SUBJECT_BYTES:
                raise CodecError(f"subject of {slen} bytes exceeds limit", reason="limit")
            end = p + slen
            if end > n:
                raise CodecError("truncated subject", reason="truncated")
            subject = body[p:end].decode()
            p = end
        else:
            subject = ""
        (klen,) = i32(body, p)
        p += 4
        key: bytes | None
        if klen == -1:
            key = None
        elif 0 <= klen <= MAX_KEY_BYTES:
            end = p + klen
            if end > n:
                raise CodecError("truncated key", reason="truncated")
            key = body[p:end]
            p = end
        elif klen < 0:
            raise CodecError(f"bad key length {klen}")
        else:
            raise CodecError(f"key of {klen} bytes exceeds limit", reason="limit")
        if body[p : p + 2] == b"\x00\x00":
            headers: w.Headers = ()
            p += 2
        else:
            headers, p = get_headers(body, p)
        (vlen,) = u32(body, p)
        p += 4
        if vlen > MAX_VALUE_BYTES:
            raise CodecError(f"value of {vlen} bytes exceeds limit", reason="limit")
        end = p + vlen
        if end > n:
            raise CodecError("truncated value", reason="truncated")
        append(ProduceMessage(body[p:end], key, headers, subject))
        p = end
    return out, p


def encode_produce_response(results: Sequence[ProduceResult]) -> bytes:
    """Encode a Produce response body (one result per request message, in order; the
    answer to a request with the current-values flag: :mod:`jetsdk.codec.produce_values`).

    Raises:
        CodecError: a field out of range (reason ``"limit"``).
    """
    pack = _RESULT.pack
    try:
        return w.U32.pack(len(results)) + b"".join(
            pack(r.error_code, r.offset, r.timestamp) for r in results
        )
    except struct.error as exc:
        raise CodecError(f"produce result field out of range: {exc}", reason="limit") from None


_set_code, _set_result_offset, _set_result_ts = slot_setters(
    ProduceResult, "error_code", "offset", "timestamp"
)
_set_value, _set_key, _set_headers, _set_subject = slot_setters(
    ProduceMessage, "value", "key", "headers", "subject"
)
_new_object = object.__new__
_set_current_value, _set_latest = slot_setters(ProduceResult, "current_value", "latest_offset")


def _new_result(error_code: int, offset: int, timestamp: int) -> ProduceResult:
    result: ProduceResult = _new_object(ProduceResult)
    _set_code(result, error_code)
    _set_result_offset(result, offset)
    _set_result_ts(result, timestamp)
    _set_current_value(result, None)
    _set_latest(result, -1)
    return result


def new_produce_message(
    value: bytes, key: bytes | None, headers: tuple[tuple[str, bytes], ...], subject: str
) -> ProduceMessage:
    """``ProduceMessage(value, key, headers, subject)`` without attrs' frozen ``__init__``
    (the producer's hot path, :mod:`jetsdk.codec.slots`; the arguments are checked
    already)."""
    message: ProduceMessage = _new_object(ProduceMessage)
    _set_value(message, value)
    _set_key(message, key)
    _set_headers(message, headers)
    _set_subject(message, subject)
    return message


def encode_produce_result_tuples(results: Sequence[tuple[int, int, int]]) -> bytes:
    """Encode a Produce response body from ``(error_code, offset, timestamp)`` tuples (what
    :func:`encode_produce_response` writes for the same results).

    Raises:
        CodecError: a field out of range (reason ``"limit"``).
    """
    try:  # starmap: no comprehension frame (one result per request at light load)
        return w.U32.pack(len(results)) + b"".join(itertools.starmap(_RESULT.pack, results))
    except struct.error as exc:
        raise CodecError(f"produce result field out of range: {exc}", reason="limit") from None


def _check_result_count(body: bytes | bytearray | memoryview) -> None:
    """Raise unless ``body`` is a u32 count followed by exactly that many fixed-size
    results (a Produce response without current values)."""
    w.need(body, 0, 4, "result count")
    (count,) = w.U32.unpack_from(body, 0)
    if len(body) - 4 != count * _RESULT.size:
        reason = "truncated" if len(body) - 4 < count * _RESULT.size else "malformed"
        raise CodecError(f"produce response length does not match {count} results", reason=reason)


def decode_produce_response(body: bytes | bytearray | memoryview) -> list[ProduceResult]:
    """Decode a Produce response body (of a request without the current-values flag).

    Raises:
        CodecError: truncated or trailing bytes.
    """
    try:
        _check_result_count(body)
        new = _new_result
        return [new(e, o, t) for e, o, t in _RESULT.iter_unpack(memoryview(body)[4:])]
    except w.DECODE_ERRORS as exc:
        raise w.convert(exc, "produce response") from None


def decode_produce_result_tuples(
    body: bytes | bytearray | memoryview,
) -> list[tuple[int, int, int]]:
    """A Produce response body's results as ``(error_code, offset, timestamp)`` tuples:
    what :func:`decode_produce_response` reads, without building the result objects (the
    producer settling a batch whose messages were all stored).

    Raises:
        CodecError: truncated or trailing bytes.
    """
    try:
        _check_result_count(body)
        return list(_RESULT.iter_unpack(memoryview(body)[4:]))
    except w.DECODE_ERRORS as exc:
        raise w.convert(exc, "produce response") from None
