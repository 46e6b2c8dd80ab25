"""Fetch request and response bodies (spec/protocol.md, "7 Fetch"), field by field (the
one place they are defined: :mod:`jetsdk.codec.messages` holds the other APIs' bodies)."""

from __future__ import annotations

import struct

import attrs

from jetsdk.codec import _wire as w
from jetsdk.codec.errors import CodecError

_FETCH_REQ = struct.Struct(">IqIIi")  # partition, offset, max_bytes, max_wait_ms, replica_id
_FETCH_REQ_REPLICA = struct.Struct(">qq")  # replica_flushed, leader_epoch (replica_id >= 0)
_FETCH_RESP = struct.Struct(">HqqqI")  # error_code, hw, log_start, leo, records_len
FETCH_RESPONSE_HEADER_SIZE = _FETCH_RESP.size  # 30
"""Size of the fixed part of a Fetch response body, before the record bytes."""


@attrs.frozen
class FetchRequest:
    """Body of a Fetch request (a long poll)."""

    stream: str
    """Stream name."""
    partition: int
    """Partition number."""
    offset: int
    """First offset wanted."""
    max_bytes: int
    """Soft bound on the size of the returned records."""
    max_wait_ms: int
    """How long to wait for committed records; 0 answers at once."""
    replica_id: int = -1
    """-1 for consumers; for a follower, its index in the partition's replica list."""
    replica_flushed: int = -1
    """Replicas only: every offset below this is fsynced on the follower (-1 for consumers)."""
    leader_epoch: int = -1
    """Replicas only: the leader epoch the follower fetches under (-1 for consumers)."""


@attrs.frozen
class FetchResponseHeader:
    """The fixed part of a Fetch response body."""

    error_code: int
    """0, or OFFSET_OUT_OF_RANGE (then records_len is 0)."""
    hw: int
    """High watermark: first offset not yet committed."""
    log_start: int
    """First offset still stored."""
    leo: int
    """Log end offset: next offset to be assigned."""
    records_len: int
    """Length of the record bytes that follow."""


def encode_fetch_request(req: FetchRequest) -> bytes:
    """Encode a Fetch request body; ``replica_flushed`` and ``leader_epoch`` follow only
    when ``replica_id >= 0``.

    Raises:
        CodecError: a field out of range, or replica fields set on a consumer request
            (reason ``"limit"``).
    """
    parts: list[bytes] = []
    w.put_str16(parts, req.stream, "stream name")
    try:
        parts.append(
            _FETCH_REQ.pack(
                req.partition, req.offset, req.max_bytes, req.max_wait_ms, req.replica_id
            )
        )
        if req.replica_id >= 0:
            parts.append(_FETCH_REQ_REPLICA.pack(req.replica_flushed, req.leader_epoch))
    except struct.error as exc:
        raise CodecError(f"fetch request field out of range: {exc}", reason="limit") from None
    if req.replica_id < 0 and (req.replica_flushed != -1 or req.leader_epoch != -1):
        raise CodecError(
            "replica_flushed and leader_epoch are sent only when replica_id >= 0", reason="limit"
        )
    return b"".join(parts)


def decode_fetch_request(body: bytes | bytearray | memoryview) -> FetchRequest:
    """Decode a Fetch request body (with the replica fields when ``replica_id >= 0``).

    Raises:
        CodecError: truncated or trailing bytes.
    """
    try:
        stream, p = w.get_str16(body, 0, "stream name")
        w.need(body, p, _FETCH_REQ.size, "fetch request")
        partition, offset, max_bytes, max_wait_ms, replica_id = _FETCH_REQ.unpack_from(body, p)
        p += _FETCH_REQ.size
        flushed = epoch = -1
        if replica_id >= 0:
            w.need(body, p, _FETCH_REQ_REPLICA.size, "fetch request")
            flushed, epoch = _FETCH_REQ_REPLICA.unpack_from(body, p)
            p += _FETCH_REQ_REPLICA.size
        w.check_end(body, p, "fetch request")
    except w.DECODE_ERRORS as exc:
        raise w.convert(exc, "fetch request") from None
    return FetchRequest(
        stream=stream,
        partition=partition,
        offset=offset,
        max_bytes=max_bytes,
        max_wait_ms=max_wait_ms,
        replica_id=replica_id,
        replica_flushed=flushed,
        leader_epoch=epoch,
    )


def encode_fetch_response_header(
    error_code: int, hw: int, log_start: int, leo: int, records_len: int
) -> bytes:
    """The 30 bytes that precede the record bytes of a Fetch response body.

    Raises:
        CodecError: a field out of range (reason ``"limit"``).
    """
    try:
        return _FETCH_RESP.pack(error_code, hw, log_start, leo, records_len)
    except struct.error as exc:
        raise CodecError(f"fetch response field out of range: {exc}", reason="limit") from None


_FETCH_FRAME_HEAD = struct.Struct(">IBBI" + _FETCH_RESP.format[1:])
"""A Fetch response frame's header (spec/protocol.md, "Frame") and its body's fixed part."""
_BODY_AFTER = _FETCH_FRAME_HEAD.size - 4
"""The frame's length field less its records: all of the head but the field itself."""


def encode_fetch_records_frame(
    api: int, correlation_id: int, flags: int, hw: int, start: int, leo: int, records: bytes
) -> bytes:
    """A whole Fetch (or FetchStream) response frame of ``records`` without error: what
    :func:`jetsdk.codec.frames.encode_frame_header` and :func:`encode_fetch_response_header`
    give, then the records, in one step (a tailing consumer's answer, one per message).
    ``flags``: FLAG_RESPONSE, or with FLAG_MORE; ``start``: the log start offset.

    Raises:
        CodecError: a field out of range (reason ``"limit"``).
    """
    n = len(records)
    try:
        head = _FETCH_FRAME_HEAD.pack(
            n + _BODY_AFTER, api, flags, correlation_id, 0, hw, start, leo, n
        )
    except struct.error as exc:
        raise CodecError(f"fetch response field out of range: {exc}", reason="limit") from None
    return head + records


def decode_fetch_response(
    body: bytes | bytearray | memoryview,
) -> tuple[FetchResponseHeader, memoryview]:
    """Split a Fetch response body into its header and its record bytes (not copied).

    Decode the records with :func:`jetsdk.codec.record.iter_records` (a trailing partial
    record is normal and ignored).

    Raises:
        CodecError: truncated, or the records length does not match the body.
    """
    if len(body) < FETCH_RESPONSE_HEADER_SIZE:
        raise CodecError("truncated fetch response", reason="truncated")
    error_code, hw, log_start, leo, records_len = _FETCH_RESP.unpack_from(body, 0)
    have = len(body) - FETCH_RESPONSE_HEADER_SIZE
    if records_len != have:
        reason = "truncated" if records_len > have else "malformed"
        raise CodecError(
            f"fetch response records_len {records_len} but {have} bytes follow", reason=reason
        )
    header = FetchResponseHeader(
        error_code=error_code, hw=hw, log_start=log_start, leo=leo, records_len=records_len
    )
    return header, memoryview(body)[FETCH_RESPONSE_HEADER_SIZE:]
