"""PurgeStream and UpdateStream (spec/protocol.md).

PurgeStream moves a partition's log start forward. It is answered by the partition leader
(NOT_LEADER elsewhere in a cluster). The leader moves its own log start; its followers
adopt it from the ``log_start`` of their next ReplicaFetch answer (spec/cluster.md), so a
purge goes through the same path as the leader's retention.

UpdateStream changes a stream's updatable settings through the metadata (an
:class:`~jetserver.metadata.ops.UpdateStream` op, the metadata Raft in a cluster), checked
with the create checker (:mod:`jetsdk.codec.stream_settings`); every replica then applies
the new log settings and message limit (:mod:`jetserver.broker.live_settings`).
"""

from __future__ import annotations

from typing import Any

import anyio

from jetsdk.codec.error_codes import ErrorCode
from jetserver.broker.live_settings import LiveLogSettings
from jetserver.broker.stream_info import stream_info
from jetserver.broker.streams import StreamManager
from jetserver.errors import ApiError, invalid_argument
from jetserver.metadata.store import MetadataStore
from jetserver.metadata.stream_update import update_op

__all__ = ["purge_partition", "update_stream"]


async def purge_partition(req: dict[str, Any], streams: StreamManager) -> dict[str, Any]:
    """PurgeStream for one partition: drop every record below ``before`` (default: the high
    watermark, i.e. every committed record); answer ``{"log_start", "hw"}``.

    Raises:
        ApiError: INVALID_ARGUMENT (bad field), OFFSET_OUT_OF_RANGE (``before`` above the
            high watermark: uncommitted records are never purged), STREAM_NOT_FOUND,
            PARTITION_NOT_FOUND, NOT_LEADER, UNAVAILABLE.
    """
    name = req.get("stream")
    if not isinstance(name, str) or not name:
        raise invalid_argument("stream", "stream must be a non-empty string")
    partition = req.get("partition", 0)
    if isinstance(partition, bool) or not isinstance(partition, int):
        raise invalid_argument("partition", f"partition must be an integer, got {partition!r}")
    before = req.get("before")
    if before is not None and (
        isinstance(before, bool) or not isinstance(before, int) or before < 0
    ):
        raise invalid_argument("before", f"before must be null or an offset >= 0, got {before!r}")
    log = (streams.leader_replica(name, partition) or streams.replica(name, partition)).log
    hw = log.high_watermark
    target = hw if before is None else before
    if target > hw:
        raise ApiError(
            ErrorCode.OFFSET_OUT_OF_RANGE,
            f"cannot purge {name}/{partition} before offset {target}: above the high "
            f"watermark {hw} (only committed records are purged)",
            {"stream": name, "partition": partition, "hw": hw},
        )
    start = await anyio.to_thread.run_sync(log.advance_start, target)
    return {"log_start": start, "hw": log.high_watermark}


async def update_stream(
    req: dict[str, Any], streams: StreamManager, live: LiveLogSettings
) -> dict[str, Any]:
    """UpdateStream on a server alone: write the metadata, apply the settings to the open
    logs; answer ``{"stream": StreamInfo}``.

    Raises:
        ApiError: as :func:`~jetserver.metadata.stream_update.update_op`; STORAGE_ERROR if
            the metadata cannot be written.
    """
    store = streams.store
    assert isinstance(store, MetadataStore)
    limit = streams.config.limits.max_message_bytes
    op = update_op(req, store.state.streams, limit, streams.link.max_payload)
    try:
        result = await store.propose(op)
    except OSError as exc:
        raise ApiError(ErrorCode.STORAGE_ERROR, f"cannot write metadata: {exc}") from exc
    if not result.ok:
        raise ApiError(result.error_code, result.message, {"stream": op.name})
    live.apply(streams, store.state.streams.values())
    return {"stream": stream_info(streams.stream(op.name))}
