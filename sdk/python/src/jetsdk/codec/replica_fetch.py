"""ReplicaFetch (api 13): one long poll for every partition a follower server fetches from
one leader server (spec/protocol.md "13 ReplicaFetch", spec/cluster.md "Fetch sessions").

Binary bodies, pure (no I/O). Decoders raise only :class:`CodecError`; encoders raise
CodecError with reason ``"limit"`` for a field out of its integer range.

Request: ``session_id u64, flags u8, session_epoch u32, max_wait_ms u32, max_bytes u32,
count u32``, ``count`` partitions of ``slot u32, stream str16, partition u32, offset i64,
replica_id i32, replica_flushed i64, leader_epoch i64, max_bytes u32``, then
``forget_count u32`` and that many ``slot u32``. Flag ``WAKE`` (no partitions): end the
session's parked request at once. ``session_epoch`` 0 starts the session afresh (a full
request); each later request is incremental: it carries only the partitions new to the
session or changed, and the slots that leave it (KIP-227).

Response: ``flags u8`` (``POLL_ENDED``), ``count u32`` and ``count`` answers of
``index u32`` (the partition's slot in the session), ``error_code u16, hw i64,
log_start i64, leo i64, message str16, records_len u32, records``. Partitions with nothing
to say may be left out (see the spec).
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
RESPONSE_POLL_ENDED = 0x01
"""The response's flag: the request's long poll ended (``max_wait_ms`` passed). Every
partition of the session left out of it has nothing new and has been sent the leader's
current HW: it waits on, parked in the session (the follower renews its bound)."""
_KNOWN_RESPONSE_FLAGS = RESPONSE_POLL_ENDED

_HEAD = struct.Struct(">QBIIII")  # session_id, flags, session_epoch, max_wait_ms, max_bytes, count
_PART = struct.Struct(">IqiqqI")  # partition, offset, replica_id, flushed, leader_epoch, max_bytes
_ANSWER = struct.Struct(">IHqqq")  # index, error_code, hw, log_start, leo
_COUNT = struct.Struct(">I")
_RESPONSE_HEAD = struct.Struct(">BI")  # flags, count
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
    slot: int = 0
    """The partition's number in the session (the follower's choice, unique among the
    session's partitions): the answer names it, and a later request's ``forget``."""


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
    """The partitions new to the session or changed (all of them with ``session_epoch`` 0)."""
    flags: int = 0
    """``FLAG_WAKE`` or 0."""
    session_epoch: int = 0
    """0: a full request (the leader forgets what it held of the session); n > 0: the n-th
    incremental request since then."""
    forget: tuple[int, ...] = ()
    """Slots that leave the session (applied before ``partitions``)."""

    @property
    def wake(self) -> bool:
        """True for a wake request."""
        return bool(self.flags & FLAG_WAKE)


@attrs.frozen
class ReplicaFetchAnswer:
    """One partition's answer (a Fetch response header, an error text, the records)."""

    index: int
    """The partition's slot in the session."""
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


@attrs.frozen
class ReplicaFetchResponse:
    """Body of a ReplicaFetch response."""

    answers: list[ReplicaFetchAnswer]
    """The partitions with something to say, by slot."""
    flags: int = 0
    """``RESPONSE_POLL_ENDED`` or 0."""

    @property
    def poll_ended(self) -> bool:
        """True if the request's long poll ended: the partitions left out wait on."""
        return bool(self.flags & RESPONSE_POLL_ENDED)


def encode_replica_fetch_request(req: ReplicaFetchRequest) -> bytes:
    """Encode a ReplicaFetch request body.

    Raises:
        CodecError: a field out of range, unknown flags, or partitions in a wake request
            (reason ``"limit"``).
    """
    if req.flags & ~_KNOWN_FLAGS or (req.wake and (req.partitions or req.forget)):
        raise CodecError("bad replica fetch flags", reason="limit")
    parts: list[bytes] = []
    try:
        parts.append(
            _HEAD.pack(
                req.session_id,
                req.flags,
                req.session_epoch,
                req.max_wait_ms,
                req.max_bytes,
                len(req.partitions),
            )
        )
        for p in req.partitions:
            parts.append(_COUNT.pack(p.slot))
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
        parts.append(_COUNT.pack(len(req.forget)))
        parts.extend(_COUNT.pack(slot) for slot in req.forget)
    except struct.error as exc:
        raise CodecError(f"replica fetch field out of range: {exc}", reason="limit") from None
    return b"".join(parts)


def decode_replica_fetch_request(body: bytes | bytearray | memoryview) -> ReplicaFetchRequest:
    """Decode a ReplicaFetch request body.

    Raises:
        CodecError: truncated, trailing bytes, unknown flags, a partition or a forgotten
            slot in a wake request.
    """
    try:
        w.need(body, 0, _HEAD.size, "replica fetch request")
        session_id, flags, epoch_no, max_wait_ms, max_bytes, count = _HEAD.unpack_from(body, 0)
        if flags & ~_KNOWN_FLAGS:
            raise CodecError(f"unknown replica fetch flags {flags:#x}")
        if flags & FLAG_WAKE and count:
            raise CodecError("a wake request carries no partitions")
        p = _HEAD.size
        # Each partition takes at least 6 + _PART.size bytes: a count beyond what the body
        # can hold is truncated input, not a reason to loop.
        w.need(body, p, count * (6 + _PART.size) + _COUNT.size, "replica fetch request")
        out: list[ReplicaFetchPartition] = []
        for _ in range(count):
            w.need(body, p, _COUNT.size, "replica fetch request")
            (slot,) = _COUNT.unpack_from(body, p)
            stream, p = w.get_str16(body, p + _COUNT.size, "stream name")
            w.need(body, p, _PART.size, "replica fetch request")
            partition, offset, replica_id, flushed, epoch, pmax = _PART.unpack_from(body, p)
            p += _PART.size
            out.append(
                ReplicaFetchPartition(
                    stream, partition, offset, replica_id, flushed, epoch, pmax, slot
                )
            )
        w.need(body, p, _COUNT.size, "replica fetch request")
        (forgets,) = _COUNT.unpack_from(body, p)
        p += _COUNT.size
        if flags & FLAG_WAKE and forgets:
            raise CodecError("a wake request forgets no slots")
        w.need(body, p, forgets * _COUNT.size, "replica fetch request")
        forget = tuple(_COUNT.unpack_from(body, p + i * _COUNT.size)[0] for i in range(forgets))
        p += forgets * _COUNT.size
        w.check_end(body, p, "replica fetch request")
    except w.DECODE_ERRORS as exc:
        raise w.convert(exc, "replica fetch request") from None
    return ReplicaFetchRequest(
        session_id, max_wait_ms, max_bytes, tuple(out), flags, epoch_no, forget
    )


def encode_replica_fetch_response(answers: Sequence[ReplicaFetchAnswer], flags: int = 0) -> bytes:
    """Encode a ReplicaFetch response body.

    Raises:
        CodecError: a field out of range or unknown flags (reason ``"limit"``).
    """
    return b"".join(replica_fetch_response_parts(answers, flags=flags))


def replica_fetch_response_parts(
    answers: Sequence[ReplicaFetchAnswer],
    *,
    last_records_len: int | None = None,
    flags: int = 0,
) -> list[bytes | memoryview]:
    """The pieces of :func:`encode_replica_fetch_response`'s body, in order, the records
    as given (not copied): a server joins them once with its frame header.
    ``last_records_len``: the last answer's records, that many bytes, are sent apart after
    these pieces (its ``records`` field is not used).

    Raises:
        CodecError: a field out of range or unknown flags (reason ``"limit"``).
    """
    if flags & ~_KNOWN_RESPONSE_FLAGS or flags < 0:
        raise CodecError("bad replica fetch response flags", reason="limit")
    parts: list[bytes | memoryview] = [_RESPONSE_HEAD.pack(flags, len(answers))]
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
) -> ReplicaFetchResponse:
    """Decode a ReplicaFetch response body (records are views of ``body``, not copied).

    Raises:
        CodecError: truncated, trailing bytes, or unknown flags.
    """
    view = memoryview(body)
    try:
        w.need(view, 0, _RESPONSE_HEAD.size, "replica fetch response")
        flags, count = _RESPONSE_HEAD.unpack_from(view, 0)
        if flags & ~_KNOWN_RESPONSE_FLAGS:
            raise CodecError(f"unknown replica fetch response flags {flags:#x}")
        p = _RESPONSE_HEAD.size
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
    return ReplicaFetchResponse(out, flags)
