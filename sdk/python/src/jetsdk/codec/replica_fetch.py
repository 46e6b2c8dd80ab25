"""ReplicaFetch (api 13): one long poll for every partition a follower server fetches from
one leader server (spec/protocol.md "13 ReplicaFetch", spec/cluster.md "Fetch sessions").

Binary bodies, pure (no I/O). Decoders raise only :class:`CodecError`; encoders raise
CodecError with reason ``"limit"`` for a field out of its integer range.

Request: ``session_id u64, flags u8, max_wait_ms u32, max_bytes u32, count u32`` and
``count`` partitions of ``stream str16, partition u32, offset i64, replica_id i32,
replica_flushed i64, leader_epoch i64, max_bytes u32``. Flag ``WAKE`` (no partitions):
end the session's parked request at once.

Response: ``count u32`` and ``count`` answers of ``index u32`` (the partition's position in
the request), ``error_code u16, hw i64, log_start i64, leo i64, message str16,
records_len u32, records``. Partitions with nothing to say may be left out (see the spec).
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

import attrs

from jetsdk.codec import _wire as w
from jetsdk.codec.errors import CodecError

FLAG_WAKE = 0x01
"""The request only wakes the session's parked request (it carries no partitions)."""
_KNOWN_FLAGS = FLAG_WAKE

_HEAD = struct.Struct(">QBIII")  # session_id, flags, max_wait_ms, max_bytes, count
_PART = struct.Struct(">IqiqqI")  # partition, offset, replica_id, flushed, leader_epoch, max_bytes
_ANSWER = struct.Struct(">IHqqq")  # index, error_code, hw, log_start, leo
_COUNT = struct.Struct(">I")
MAX_MESSAGE_CHARS = 500
"""An error message longer than this is cut (it is for logs only)."""


@attrs.frozen
class ReplicaFetchPartition:
    """One partition of a ReplicaFetch request (the fields of a replica Fetch)."""

    stream: str
    """Stream name."""
    partition: int
    """Partition number."""
    offset: int
    """The follower's log end offset: the first offset wanted."""
    replica_id: int
    """The follower's index in the partition's replica list."""
    replica_flushed: int
    """Every offset below this is fsynced on the follower."""
    leader_epoch: int
    """The leader epoch the follower fetches under."""
    max_bytes: int
    """Soft bound on this partition's records."""


@attrs.frozen
class ReplicaFetchRequest:
    """Body of a ReplicaFetch request."""

    session_id: int
    """The follower's session (random, one per follower server and leader server)."""
    max_wait_ms: int
    """Long-poll bound; 0 answers at once with every partition."""
    max_bytes: int
    """Soft bound on the records of the whole answer."""
    partitions: tuple[ReplicaFetchPartition, ...] = ()
    """The partitions, in the order the answer's indexes refer to."""
    flags: int = 0
    """``FLAG_WAKE`` or 0."""

    @property
    def wake(self) -> bool:
        """True for a wake request."""
        return bool(self.flags & FLAG_WAKE)


@attrs.frozen
class ReplicaFetchAnswer:
    """One partition's answer (a Fetch response header, an error text, the records)."""

    index: int
    """Position of the partition in the request."""
    error_code: int
    """0, OFFSET_OUT_OF_RANGE, or the error a replica Fetch would have answered."""
    hw: int
    """The leader's high watermark (-1 with an error other than OFFSET_OUT_OF_RANGE)."""
    log_start: int
    """The leader's log start (-1 likewise)."""
    leo: int
    """The leader's log end offset (-1 likewise)."""
    message: str = ""
    """The error's text ("" without error)."""
    records: bytes | memoryview = b""
    """Stored records, byte for byte as on disk (may end with a partial record)."""


def encode_replica_fetch_request(req: ReplicaFetchRequest) -> bytes:
    """Encode a ReplicaFetch request body.

    Raises:
        CodecError: a field out of range, unknown flags, or partitions in a wake request
            (reason ``"limit"``).
    """
    if req.flags & ~_KNOWN_FLAGS or (req.wake and req.partitions):
        raise CodecError("bad replica fetch flags", reason="limit")
    parts: list[bytes] = []
    try:
        parts.append(
            _HEAD.pack(
                req.session_id, req.flags, req.max_wait_ms, req.max_bytes, len(req.partitions)
            )
        )
        for p in req.partitions:
            w.put_str16(parts, p.stream, "stream name")
            parts.append(
                _PART.pack(
                    p.partition,
                    p.offset,
                    p.replica_id,
                    p.replica_flushed,
                    p.leader_epoch,
                    p.max_bytes,
                )
            )
    except struct.error as exc:
        raise CodecError(f"replica fetch field out of range: {exc}", reason="limit") from None
    return b"".join(parts)


def decode_replica_fetch_request(body: bytes | bytearray | memoryview) -> ReplicaFetchRequest:
    """Decode a ReplicaFetch request body.

    Raises:
        CodecError: truncated, trailing bytes, unknown flags, a partition in a wake request.
    """
    try:
        w.need(body, 0, _HEAD.size, "replica fetch request")
        session_id, flags, max_wait_ms, max_bytes, count = _HEAD.unpack_from(body, 0)
        if flags & ~_KNOWN_FLAGS:
            raise CodecError(f"unknown replica fetch flags {flags:#x}")
        if flags & FLAG_WAKE and count:
            raise CodecError("a wake request carries no partitions")
        p = _HEAD.size
        # Each partition takes at least 2 + _PART.size bytes: a count beyond what the body
        # can hold is truncated input, not a reason to loop.
        w.need(body, p, count * (2 + _PART.size), "replica fetch request")
        out: list[ReplicaFetchPartition] = []
        for _ in range(count):
            stream, p = w.get_str16(body, p, "stream name")
            w.need(body, p, _PART.size, "replica fetch request")
            partition, offset, replica_id, flushed, epoch, pmax = _PART.unpack_from(body, p)
            p += _PART.size
            out.append(
                ReplicaFetchPartition(stream, partition, offset, replica_id, flushed, epoch, pmax)
            )
        w.check_end(body, p, "replica fetch request")
    except w.DECODE_ERRORS as exc:
        raise w.convert(exc, "replica fetch request") from None
    return ReplicaFetchRequest(session_id, max_wait_ms, max_bytes, tuple(out), flags)


def encode_replica_fetch_response(answers: Sequence[ReplicaFetchAnswer]) -> bytes:
    """Encode a ReplicaFetch response body.

    Raises:
        CodecError: a field out of range (reason ``"limit"``).
    """
    return b"".join(replica_fetch_response_parts(answers))


def replica_fetch_response_parts(
    answers: Sequence[ReplicaFetchAnswer], *, last_records_len: int | None = None
) -> list[bytes | memoryview]:
    """The pieces of :func:`encode_replica_fetch_response`'s body, in order, the records
    as given (not copied): a server joins them once with its frame header.
    ``last_records_len``: the last answer's records, that many bytes, are sent apart after
    these pieces (its ``records`` field is not used).

    Raises:
        CodecError: a field out of range (reason ``"limit"``).
    """
    parts: list[bytes | memoryview] = [_COUNT.pack(len(answers))]
    last = len(answers) - 1 if last_records_len is not None else -1
    try:
        for i, a in enumerate(answers):
            head = [_ANSWER.pack(a.index, a.error_code, a.hw, a.log_start, a.leo)]
            w.put_str16(head, a.message[:MAX_MESSAGE_CHARS], "error message")
            if i == last:
                assert last_records_len is not None
                head.append(_COUNT.pack(last_records_len))
                parts.extend(head)
                break
            head.append(_COUNT.pack(len(a.records)))
            parts.extend(head)
            parts.append(a.records)
    except struct.error as exc:
        raise CodecError(f"replica fetch answer out of range: {exc}", reason="limit") from None
    return parts


def decode_replica_fetch_response(
    body: bytes | bytearray | memoryview,
) -> list[ReplicaFetchAnswer]:
    """Decode a ReplicaFetch response body (records are views of ``body``, not copied).

    Raises:
        CodecError: truncated, or trailing bytes.
    """
    view = memoryview(body)
    try:
        w.need(view, 0, _COUNT.size, "replica fetch response")
        (count,) = _COUNT.unpack_from(view, 0)
        p = _COUNT.size
        w.need(view, p, count * (_ANSWER.size + 6), "replica fetch response")
        out: list[ReplicaFetchAnswer] = []
        for _ in range(count):
            w.need(view, p, _ANSWER.size, "replica fetch response")
            index, code, hw, log_start, leo = _ANSWER.unpack_from(view, p)
            p += _ANSWER.size
            message, p = w.get_str16(view, p, "error message")
            w.need(view, p, _COUNT.size, "replica fetch response")
            (n,) = _COUNT.unpack_from(view, p)
            p += _COUNT.size
            w.need(view, p, n, "replica fetch records")
            out.append(
                ReplicaFetchAnswer(index, code, hw, log_start, leo, message, view[p : p + n])
            )
            p += n
        w.check_end(view, p, "replica fetch response")
    except w.DECODE_ERRORS as exc:
        raise w.convert(exc, "replica fetch response") from None
    return out
