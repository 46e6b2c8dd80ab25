"""FetchStream (api 18): one Fetch request answered by several responses
(spec/protocol.md, "18 FetchStream").

The request is a consumer Fetch's fields (no ``replica_id``) and ``max_responses``; each
response is a Fetch response body (:func:`jetsdk.codec.messages.decode_fetch_response`),
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
