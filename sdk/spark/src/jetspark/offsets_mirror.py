"""Mirror a Spark query's processed offsets into the compacted ``__offsets`` stream.

Spark keeps a streaming query's offsets in its checkpoint, where lag tools cannot see them.
With option ``group`` the source also writes, after each committed micro-batch, one record
per changed partition into ``__offsets`` (created compacted on first use):

- key: ``<group>/<stream>/<partition>`` (UTF-8), so compaction keeps the latest per partition;
- value: JSON ``{"v": 1, "group", "stream", "partition", "offset", "metadata",
  "committed_ns"}`` where ``offset`` is the next offset to process (every record below it
  is done) and ``metadata`` is ``"jetspark"``.

This is a mirror, not the source of truth: Spark restarts from its checkpoint, never from
here. :func:`committed_offsets` and :func:`group_lag` read it back for lag tooling.

The SDK's consumer-group offsets (issue 5) were not merged when this was written; the
format is spec/spark.md's ("Offsets mirror") until spec/groups.md settles a shared one.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence

import anyio
import attrs
import orjson

from jetsdk.client import Client
from jetsdk.codec.error_codes import AckPolicy, ErrorCode
from jetsdk.codec.frames import Api
from jetsdk.codec.messages import ProduceMessage, ProduceRequest, decode_json, encode_json
from jetsdk.codec.record import iter_records
from jetsdk.errors import StreamExists, StreamNotFound
from jetsdk.metadata import StreamInfo
from jetsdk.partitioner import partition_for_key
from jetspark._bridge import shared_bridge
from jetspark.errors import SinkWriteError

__all__ = [
    "OFFSETS_STREAM",
    "CommittedOffset",
    "committed_offsets",
    "group_lag",
    "offset_key",
    "write_offsets",
]

OFFSETS_STREAM = "__offsets"
"""The compacted internal stream holding committed offsets."""
MIRROR_VERSION = 1
"""Value format version written."""
_ACK_TIMEOUT_MS = 30_000
_SCAN_MAX_BYTES = 1 << 20


@attrs.frozen
class CommittedOffset:
    """One mirrored offset."""

    group: str
    """Group name (option ``group``)."""
    stream: str
    """Stream name."""
    partition: int
    """Partition number."""
    offset: int
    """Next offset to process."""
    metadata: str
    """Who wrote it (``"jetspark"``)."""
    committed_ns: int
    """When, ns since the epoch."""


def offset_key(group: str, stream: str, partition: int) -> bytes:
    """The ``__offsets`` key of one group's partition."""
    return f"{group}/{stream}/{partition}".encode()


async def _offsets_partitions(client: Client) -> int:
    try:
        info = await client.stream_info(OFFSETS_STREAM, refresh=True)
    except StreamNotFound:
        try:
            # Internal streams need "internal": true, which Client.create_stream does not send.
            body = {
                "name": OFFSETS_STREAM,
                "subject": OFFSETS_STREAM,
                "partitions": 1,
                "compact": True,
                "internal": True,
            }
            answer = decode_json(await client.request_any(Api.CREATE_STREAM, encode_json(body)))
            info = StreamInfo.from_json(answer["stream"])
        except StreamExists:  # created meanwhile with other settings: use it as it is
            info = await client.stream_info(OFFSETS_STREAM, refresh=True)
    return info.partition_count


async def write_offsets(
    client: Client, group: str, offsets: Mapping[str, Mapping[int, int]]
) -> None:
    """Write ``{stream: {partition: next offset}}`` of ``group`` (ack ALL).

    Raises:
        SinkWriteError: the server refused a record; JetError: other SDK errors.
    """
    count = await _offsets_partitions(client)
    now = time.time_ns()
    by_partition: dict[int, list[ProduceMessage]] = {}
    for stream in sorted(offsets):
        for part in sorted(offsets[stream]):
            key = offset_key(group, stream, part)
            value = orjson.dumps(
                {
                    "v": MIRROR_VERSION,
                    "group": group,
                    "stream": stream,
                    "partition": part,
                    "offset": offsets[stream][part],
                    "metadata": "jetspark",
                    "committed_ns": now,
                }
            )
            target = partition_for_key(key, count)
            by_partition.setdefault(target, []).append(ProduceMessage(value, key))

    async def send(partition: int, messages: Sequence[ProduceMessage]) -> None:
        request = ProduceRequest(
            stream=OFFSETS_STREAM,
            partition=partition,
            ack_policy=AckPolicy.ALL,
            timeout_ms=_ACK_TIMEOUT_MS,
            messages=tuple(messages),
        )
        for result in await client.produce(request):
            if result.error_code != ErrorCode.NONE:
                raise SinkWriteError(OFFSETS_STREAM, partition, f"error code {result.error_code}")

    async with anyio.create_task_group() as tg:
        for partition, messages in by_partition.items():
            tg.start_soon(send, partition, messages)


async def _scan(client: Client, group: str | None) -> dict[tuple[str, str, int], CommittedOffset]:
    try:
        info = await client.stream_info(OFFSETS_STREAM, refresh=True)
    except StreamNotFound:
        return {}
    out: dict[tuple[str, str, int], CommittedOffset] = {}
    for part in info.partitions:
        bounds = await client.list_offsets(OFFSETS_STREAM, part.partition, "earliest")
        offset = bounds.log_start
        while offset < bounds.hw:
            _header, raw = await client.fetch(
                OFFSETS_STREAM, part.partition, offset, max_bytes=_SCAN_MAX_BYTES, max_wait=0.0
            )
            records = list(iter_records(raw))
            if not records:
                break
            for record in records:
                entry = _decode(record.value)
                if entry is not None and (group is None or entry.group == group):
                    out[(entry.group, entry.stream, entry.partition)] = entry
            offset = records[-1].offset + 1
    return out


def _decode(value: bytes) -> CommittedOffset | None:
    try:
        obj = orjson.loads(value)
        if not isinstance(obj, dict) or obj.get("v") != MIRROR_VERSION:
            return None
        return CommittedOffset(
            group=str(obj["group"]),
            stream=str(obj["stream"]),
            partition=int(obj["partition"]),
            offset=int(obj["offset"]),
            metadata=str(obj.get("metadata", "")),
            committed_ns=int(obj.get("committed_ns", 0)),
        )
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
        return None  # a record in another format (e.g. the SDK's own commits)


def committed_offsets(servers: Sequence[str], group: str) -> dict[tuple[str, int], int]:
    """``{(stream, partition): next offset}`` mirrored for ``group`` (blocking; scans
    ``__offsets``).

    Raises:
        JetError: the SDK's errors.
    """
    bridge = shared_bridge(servers)
    entries = bridge.call(_scan, bridge.client, group)
    return {(s, p): e.offset for (_g, s, p), e in entries.items()}


async def _lag(
    client: Client, committed: Mapping[tuple[str, int], int]
) -> dict[tuple[str, int], int]:
    out: dict[tuple[str, int], int] = {}
    for (stream, part), offset in sorted(committed.items()):
        try:
            hw = (await client.list_offsets(stream, part, "latest")).hw
        except StreamNotFound:
            continue
        out[(stream, part)] = max(0, hw - offset)
    return out


def group_lag(servers: Sequence[str], group: str) -> dict[tuple[str, int], int]:
    """``{(stream, partition): high watermark - mirrored offset}`` for ``group`` (blocking).

    Raises:
        JetError: the SDK's errors.
    """
    committed = committed_offsets(servers, group)
    bridge = shared_bridge(servers)
    return bridge.call(_lag, bridge.client, committed)
