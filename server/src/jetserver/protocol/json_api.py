"""The JSON APIs: Hello, Metadata, CreateStream, DeleteStream, DescribeStream, ListOffsets.

Each function takes the decoded request object and returns the response object, raising
:class:`~jetserver.errors.ApiError` for an error response (spec/protocol.md, "APIs").
"""

from __future__ import annotations

from typing import Any

from jetsdk._version import PROTOCOL_VERSION
from jetsdk.codec.error_codes import ErrorCode
from jetsdk.codec.frames import Api
from jetserver import __version__
from jetserver.broker.local_streams import LocalStreams
from jetserver.broker.stream_info import StreamInfoCache, stream_info
from jetserver.broker.streams import StreamManager
from jetserver.config.server import ServerConfig
from jetserver.errors import ApiError, invalid_argument
from jetserver.metadata.health import IsDown, never_down

POSITIONS = ("earliest", "latest", "timestamp")
SERVED_APIS = [int(api) for api in Api]
"""Hello's ``apis``: every API key this version implements (spec/protocol.md, "0 Hello")."""


def _str_field(req: dict[str, Any], field: str) -> str:
    value = req.get(field)
    if not isinstance(value, str) or not value:
        raise invalid_argument(field, f"{field} must be a non-empty string")
    return value


def _int_field(req: dict[str, Any], field: str, default: int | None = None) -> int:
    value = req.get(field, default)
    if isinstance(value, bool) or not isinstance(value, int):
        raise invalid_argument(field, f"{field} must be an integer, got {value!r}")
    return value


def hello(req: dict[str, Any], config: ServerConfig) -> dict[str, Any]:
    """Hello: check the protocol version, describe the server."""
    protocol = req.get("protocol", PROTOCOL_VERSION)
    if protocol != PROTOCOL_VERSION:
        raise ApiError(
            ErrorCode.UNSUPPORTED_API,
            f"protocol version {protocol!r} is not supported (this server speaks "
            f"{PROTOCOL_VERSION})",
            {"protocol": PROTOCOL_VERSION},
        )
    return {
        "protocol": PROTOCOL_VERSION,
        "server_id": config.server.id,
        "version": __version__,
        "max_frame_bytes": config.limits.max_frame_bytes,
        "max_message_bytes": config.limits.max_message_bytes,
        "apis": SERVED_APIS,
    }


def metadata(
    req: dict[str, Any],
    streams: StreamManager,
    servers: list[dict[str, Any]],
    is_down: IsDown = never_down,
    cache: StreamInfoCache | None = None,
) -> dict[str, Any]:
    """Metadata: the servers and the requested streams (all if ``streams`` is null), each
    partition's ``offline`` as the liveness view ``is_down`` finds it (with ``cache``, the
    unchanged streams' answers are reused: ``servers`` holds each registered server's
    ``live``)."""
    names = req.get("streams")
    if names is None:
        metas = streams.streams()
        if cache is not None:
            cache.keep_only(m.name for m in metas)
    else:
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            raise invalid_argument("streams", "streams must be null or a list of names")
        metas = [m for m in streams.streams() if m.name in set(names)]
    if cache is None:
        return {"servers": servers, "streams": [stream_info(m, is_down=is_down) for m in metas]}
    down = frozenset(str(s["id"]) for s in servers if not s.get("live", True))
    return {"servers": servers, "streams": [cache.info(m, down, is_down) for m in metas]}


async def create_stream(req: dict[str, Any], streams: LocalStreams) -> dict[str, Any]:
    """CreateStream on a server alone (idempotent for the same settings)."""
    created, meta = await streams.create(req)
    return {"created": created, "stream": stream_info(meta)}


async def delete_stream(req: dict[str, Any], streams: LocalStreams) -> dict[str, Any]:
    """DeleteStream on a server alone: removes the stream and its data."""
    await streams.delete(_str_field(req, "name"))
    return {"deleted": True}


def describe_stream(
    req: dict[str, Any], streams: StreamManager, is_down: IsDown = never_down
) -> dict[str, Any]:
    """DescribeStream: StreamInfo with per-partition log positions and sizes."""
    meta = streams.stream(_str_field(req, "name"))
    return stream_info(meta, streams, describe=True, is_down=is_down)


def list_offsets(req: dict[str, Any], streams: StreamManager) -> dict[str, Any]:
    """ListOffsets: earliest (log start), latest (HW) or the first offset at a timestamp.

    In a cluster only the partition leader answers (NOT_LEADER elsewhere)."""
    name = _str_field(req, "stream")
    partition = _int_field(req, "partition", 0)
    position = req.get("position", "latest")
    if position not in POSITIONS:
        raise invalid_argument("position", f"position must be one of {list(POSITIONS)}")
    log = (streams.leader_replica(name, partition) or streams.replica(name, partition)).log
    hw = log.high_watermark
    if position == "earliest":
        offset = log.log_start_offset
    elif position == "latest":
        offset = hw
    else:
        ts = _int_field(req, "timestamp_ns")
        found = log.offset_for_timestamp(ts)
        offset = hw if found is None or found >= hw else found
    return {"offset": offset, "hw": hw, "log_start": log.log_start_offset}
