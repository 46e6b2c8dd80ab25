"""Fetch: a long poll answered as soon as records past the offset may be served.

Two kinds of reader (spec/protocol.md "Fetch"):

- a **consumer** at the leader (or a server alone): committed records, below the HW;
- a **consumer at an ISR follower** (read replicas): records below that follower's own HW;
  a server whose replica is not the leader nor an ISR follower answers NOT_LEADER.

Followers do not use Fetch: they replicate with ReplicaFetch (api 13,
:mod:`jetserver.broker.replica_fetch`), the one follower path; a Fetch with
``replica_id >= 0`` is refused with INVALID_ARGUMENT.

The answer is the response header plus :class:`~jetserver.storage.read_slices.ReadSlices`:
slices of the segment files, as many as fit ``max_bytes`` (at most ``MAX_FETCH_SLICES``);
the connection writes each with ``os.sendfile`` or pread + send (config ``fetch.io``).
Waiting uses the partition's events: no polling.

:func:`offset_for_leader_epoch` answers OffsetForLeaderEpoch (api 8) for followers.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

from jetsdk.codec.epoch_messages import OffsetForLeaderEpochRequest, OffsetForLeaderEpochResponse
from jetsdk.codec.error_codes import ErrorCode
from jetsdk.codec.errors import CodecError
from jetsdk.codec.fetch_messages import FetchRequest
from jetserver.broker.partition import PartitionReplica
from jetserver.broker.streams import StreamManager
from jetserver.config.server import LimitsConfig
from jetserver.errors import ApiError, invalid_argument
from jetserver.infra import hops
from jetserver.storage import Log, OffsetOutOfRange, ReadSlice
from jetserver.storage.read_slices import ReadSlices

MAX_GAP_SKIPS = 64
"""Empty reads (compaction gaps) skipped within one Fetch before answering empty."""
MAX_FETCH_SLICES = 64
"""Segment slices one Fetch answer may hold (each pins its file until sent)."""
FOLLOWER_FETCH_REFUSED = (
    "Fetch is for consumers (replica_id -1): followers replicate with ReplicaFetch (api 13)"
)
"""The INVALID_ARGUMENT message for a Fetch with ``replica_id >= 0``."""


class FetchAnswer(NamedTuple):
    """What to send back for one Fetch (a typed tuple: a tailing consumer gets one per
    message)."""

    error_code: int
    """NONE or OFFSET_OUT_OF_RANGE."""
    hw: int
    """High watermark."""
    log_start: int
    """First offset still stored."""
    leo: int
    """Log end offset."""
    records: ReadSlices | None = None
    """The record bytes to send (None: no records). The receiver must close it."""
    records_len: int = 0
    """Length of the records part (``records.length``, known when they were read)."""


async def fetch(
    streams: StreamManager,
    limits: LimitsConfig,
    req: FetchRequest,
    stop: Callable[[], bool] | None = None,
    replica: PartitionReplica | None = None,
) -> FetchAnswer:
    """Answer ``req``: wait (up to ``max_wait_ms``, or until ``stop()`` is true after a
    wake-up of the partition's waiters) for records past its offset.

    ``replica``: the partition's replica here as an earlier Fetch of the same caller found
    it on a server alone (a FetchStream's): used while it is open, without looking it up
    again (a deleted or recreated stream's replica is closed). In a cluster: None (this
    server's replicas and their roles change with the assignments).

    ``max_wait_ms`` and ``max_bytes`` are clamped to ``limits.max_fetch_wait_s`` and
    ``limits.max_fetch_bytes``.

    Raises:
        ApiError: STREAM_NOT_FOUND, PARTITION_NOT_FOUND, UNAVAILABLE, NOT_LEADER,
            INVALID_ARGUMENT (``replica_id >= 0``: followers fetch with ReplicaFetch).
    """
    if req.replica_id >= 0:
        raise invalid_argument("replica_id", FOLLOWER_FETCH_REFUSED)
    return await fetch_from(
        streams,
        limits,
        req.stream,
        req.partition,
        req.offset,
        req.max_bytes,
        req.max_wait_ms,
        stop,
        replica,
    )


async def fetch_from(
    streams: StreamManager,
    limits: LimitsConfig,
    stream: str,
    partition: int,
    offset: int,
    max_bytes: int,
    max_wait_ms: int,
    stop: Callable[[], bool] | None = None,
    replica: PartitionReplica | None = None,
) -> FetchAnswer:
    """:func:`fetch` of a consumer's request given by its fields (a FetchStream's answers:
    no request object built for each)."""
    if replica is None or replica.closed:
        check_holds_replica(streams, stream, partition)
        replica = streams.replica(stream, partition)
    core = replica.core
    if not core.serves_consumers():
        replica.check_leader(-1)  # raises NOT_LEADER with the leader's id
    log = replica.log
    if offset < log.log_start_offset or offset > log.log_end_offset:
        return _out_of_range(replica.log)
    # hw <= offset <= leo: wait (a follower's hw may lag the hw a consumer saw elsewhere).
    if hops.ENABLED and offset < log.high_watermark:
        hops.mark("fetch.woken")  # it came after the HW moved: no wait
    if offset >= log.high_watermark and max_wait_ms > 0:
        wait_ms = min(max_wait_ms, int(limits.max_fetch_wait_s * 1000))
        await replica.wait_for_hw_above(offset, wait_ms / 1000, stop)
        if hops.ENABLED:
            hops.mark("fetch.woken")
        if replica.closed:
            replica = streams.replica(stream, partition)  # raises if deleted
            log, core = replica.log, replica.core
        if not core.serves_consumers():
            replica.check_leader(-1)
    return read_records(log, offset, min(max_bytes, limits.max_fetch_bytes), log.high_watermark)


def check_holds_replica(streams: StreamManager, stream: str, partition: int) -> None:
    """NOT_LEADER (details ``leader``) if this server holds no replica of the partition."""
    meta = streams.stream(stream)
    if not 0 <= partition < len(meta.partitions):
        return  # streams.replica reports PARTITION_NOT_FOUND
    a = meta.partitions[partition]
    if streams.server_id not in a.replicas:
        raise ApiError(
            ErrorCode.NOT_LEADER,
            f"this server holds no replica of {stream}/{partition}; its leader is {a.leader}",
            {
                "stream": stream,
                "partition": partition,
                "leader": a.leader,
                "leader_epoch": a.leader_epoch,
            },
        )


def read_records(log: Log, offset: int, max_bytes: int, end: int) -> FetchAnswer:
    """Records from ``offset`` below ``end``, up to ``max_bytes`` across segment files
    (the first record whole even if bigger), skipping compaction gaps."""
    hw = log.high_watermark
    budget = max(max_bytes, 1)
    parts: list[ReadSlice] = []
    size = 0
    skips = 0
    try:
        while offset < end and size < budget and len(parts) < MAX_FETCH_SLICES:
            try:
                piece = log.read(offset, budget - size, end)
            except OffsetOutOfRange:
                if parts:
                    break
                return _out_of_range(log)
            except Exception:
                if parts:
                    break  # the next Fetch, from where these end, reports it
                raise
            if piece.length == 0:
                piece.close()
                # An empty slice below the end is a compaction gap: skip it silently.
                skips += 1
                if piece.next_offset <= offset or skips > MAX_GAP_SKIPS:
                    break
                offset = piece.next_offset
                continue
            if parts and size + piece.length > budget:
                piece.close()  # the next record alone is more than what is left
                break
            parts.append(piece)
            size += piece.length
            offset = piece.next_offset
    except BaseException:
        for p in parts:
            p.close()
        raise
    records = ReadSlices(tuple(parts)) if parts else None
    return FetchAnswer(ErrorCode.NONE, hw, log.log_start_offset, log.log_end_offset, records, size)


def _out_of_range(log: Log) -> FetchAnswer:
    return FetchAnswer(
        ErrorCode.OFFSET_OUT_OF_RANGE, log.high_watermark, log.log_start_offset, log.log_end_offset
    )


def offset_for_leader_epoch(streams: StreamManager, body: dict[str, Any]) -> dict[str, Any]:
    """OffsetForLeaderEpoch (api 8): where an epoch ends in this leader's log.

    Raises:
        ApiError: INVALID_ARGUMENT (bad fields), STREAM_NOT_FOUND, PARTITION_NOT_FOUND,
            UNAVAILABLE, NOT_LEADER (not the leader, or ``current_leader_epoch`` is not its
            epoch).
    """
    try:
        req = OffsetForLeaderEpochRequest.from_json(body)
    except CodecError as exc:
        raise invalid_argument("leader_epoch", str(exc)) from None
    replica = streams.replica(req.stream, req.partition)
    replica.check_leader(req.current_leader_epoch)
    epoch, end = replica.log.epochs.epoch_and_end_offset_for(req.leader_epoch)
    return OffsetForLeaderEpochResponse(leader_epoch=epoch, end_offset=end).to_json()
