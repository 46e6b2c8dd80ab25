"""FetchStream (api 18): one Fetch request answered by several responses
(spec/protocol.md, "18 FetchStream"); CancelFetchStream (api 19) ends one early
("19 CancelFetchStream"); FetchStreamCredit (api 20) grants an open one more responses
("20 FetchStreamCredit").

The request is a consumer Fetch's fields (no ``replica_id``) and ``max_responses``; each
response is a Fetch response body (:func:`jetsdk.codec.fetch_messages.decode_fetch_response`),
every one but the last in a frame with the "more" flag (``FLAG_MORE``).

Pure functions of bytes (no I/O); the decoder raises :class:`CodecError` and nothing else.
"""

from __future__ import annotations

import struct

import attrs

from jetsdk.codec import _wire as w
from jetsdk.codec.errors import CodecError

MAX_FETCH_STREAM_RESPONSES = 1024
"""Most responses one FetchStream request may ask for (``max_responses``; 0 or more is
INVALID_ARGUMENT)."""

_REQ = struct.Struct(">IqIII")  # partition, offset, max_bytes, max_wait_ms, max_responses
_CANCEL = struct.Struct(">I")  # the stream's correlation id
_CANCEL_ANSWER = struct.Struct(">B")  # 1: the stream was open and is ended; 0: none was
_CREDIT = struct.Struct(">II")  # the stream's correlation id, more responses
_CREDIT_ANSWER = struct.Struct(">I")  # responses the stream may still send; 0: none open


@attrs.frozen
class FetchStreamRequest:
    """Body of a FetchStream request."""

    stream: str
    """Stream name."""
    partition: int
    """Partition number."""
    offset: int
    """First offset wanted."""
    max_bytes: int
    """Soft bound on each response's records."""
    max_wait_ms: int
    """Idle expiry: the stream ends once no records came for this long (0: at once)."""
    max_responses: int
    """At most this many responses (1 to MAX_FETCH_STREAM_RESPONSES)."""


def encode_fetch_stream_request(req: FetchStreamRequest) -> bytes:
    """Encode a FetchStream request body.

    Raises:
        CodecError: a field out of range (reason ``"limit"``).
    """
    parts: list[bytes] = []
    w.put_str16(parts, req.stream, "stream name")
    try:
        parts.append(
            _REQ.pack(req.partition, req.offset, req.max_bytes, req.max_wait_ms, req.max_responses)
        )
    except struct.error as exc:
        raise CodecError(
            f"fetch stream request field out of range: {exc}", reason="limit"
        ) from None
    return b"".join(parts)


def decode_fetch_stream_request(body: bytes | bytearray | memoryview) -> FetchStreamRequest:
    """Decode a FetchStream request body (``max_responses`` is not range-checked here: the
    server answers a bad count with INVALID_ARGUMENT, not MALFORMED_FRAME).

    Raises:
        CodecError: truncated or trailing bytes.
    """
    what = "fetch stream request"
    try:
        stream, p = w.get_str16(body, 0, "stream name")
        w.need(body, p, _REQ.size, what)
        w.check_end(body, p + _REQ.size, what)
        return FetchStreamRequest(stream, *_REQ.unpack_from(body, p))
    except w.DECODE_ERRORS as exc:
        raise w.convert(exc, what) from None


def encode_cancel_fetch_stream(correlation_id: int) -> bytes:
    """Encode a CancelFetchStream request body: the correlation id of the FetchStream
    request (on the same connection) to end.

    Raises:
        CodecError: the id is not a u32 (reason ``"limit"``).
    """
    try:
        return _CANCEL.pack(correlation_id)
    except struct.error as exc:
        raise CodecError(f"correlation id out of range: {exc}", reason="limit") from None


def decode_cancel_fetch_stream(body: bytes | bytearray | memoryview) -> int:
    """Decode a CancelFetchStream request body: the stream's correlation id.

    Raises:
        CodecError: truncated or trailing bytes.
    """
    return _decode_one(body, _CANCEL, "cancel fetch stream request")


def encode_cancel_fetch_stream_answer(ended: bool) -> bytes:
    """Encode a CancelFetchStream response body: whether a stream was open and is ended."""
    return _CANCEL_ANSWER.pack(int(ended))


def decode_cancel_fetch_stream_answer(body: bytes | bytearray | memoryview) -> bool:
    """Decode a CancelFetchStream response body.

    Raises:
        CodecError: truncated or trailing bytes, or a value other than 0 or 1.
    """
    value = _decode_one(body, _CANCEL_ANSWER, "cancel fetch stream response")
    if value not in (0, 1):
        raise CodecError(f"cancel fetch stream response: bad value {value}", reason="malformed")
    return value == 1


@attrs.frozen
class FetchStreamCredit:
    """Body of a FetchStreamCredit request: more responses for an open FetchStream."""

    correlation_id: int
    """The correlation id of the FetchStream request (on the same connection)."""
    more_responses: int
    """Responses granted on top of those the stream may still send (1 to
    MAX_FETCH_STREAM_RESPONSES; the server answers others with INVALID_ARGUMENT)."""


def encode_fetch_stream_credit(credit: FetchStreamCredit) -> bytes:
    """Encode a FetchStreamCredit request body.

    Raises:
        CodecError: a field is not a u32 (reason ``"limit"``).
    """
    try:
        return _CREDIT.pack(credit.correlation_id, credit.more_responses)
    except struct.error as exc:
        raise CodecError(f"fetch stream credit out of range: {exc}", reason="limit") from None


def decode_fetch_stream_credit(body: bytes | bytearray | memoryview) -> FetchStreamCredit:
    """Decode a FetchStreamCredit request body (``more_responses`` is not range-checked
    here: the server answers a bad count with INVALID_ARGUMENT, not MALFORMED_FRAME).

    Raises:
        CodecError: truncated or trailing bytes.
    """
    what = "fetch stream credit request"
    try:
        w.need(body, 0, _CREDIT.size, what)
        w.check_end(body, _CREDIT.size, what)
        return FetchStreamCredit(*_CREDIT.unpack_from(body, 0))
    except w.DECODE_ERRORS as exc:
        raise w.convert(exc, what) from None


def encode_fetch_stream_credit_answer(remaining: int) -> bytes:
    """Encode a FetchStreamCredit response body: the responses the stream may still send
    after the grant (0: no such stream was in flight, the grant is void)."""
    return _CREDIT_ANSWER.pack(remaining)


def decode_fetch_stream_credit_answer(body: bytes | bytearray | memoryview) -> int:
    """Decode a FetchStreamCredit response body.

    Raises:
        CodecError: truncated or trailing bytes, or a count above
            MAX_FETCH_STREAM_RESPONSES.
    """
    value = _decode_one(body, _CREDIT_ANSWER, "fetch stream credit response")
    if value > MAX_FETCH_STREAM_RESPONSES:
        raise CodecError(f"fetch stream credit response: bad count {value}", reason="malformed")
    return value


def _decode_one(body: bytes | bytearray | memoryview, shape: struct.Struct, what: str) -> int:
    try:
        w.need(body, 0, shape.size, what)
        w.check_end(body, shape.size, what)
        value: int = shape.unpack_from(body, 0)[0]
    except w.DECODE_ERRORS as exc:
        raise w.convert(exc, what) from None
    return value
