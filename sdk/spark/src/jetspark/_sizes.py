"""Stored bytes per offset of each partition, for ``maxBytesPerTrigger``.

The driver cannot know a range's bytes without reading it, so the limit works from an
estimate: a partition's ``size_bytes`` (bytes of records in its segments, record headers
included) over the offsets it stores (``leo - log_start``), from DescribeStream. A server
answers DescribeStream only for the replicas it holds; partitions it has none of are asked
of their leader (which holds one). A partition that stores nothing yet gets the average of
the stream's other partitions, else :data:`UNKNOWN_BYTES_PER_OFFSET`.
"""

from __future__ import annotations

from collections.abc import Iterable

import anyio

from jetsdk.client import Client
from jetsdk.client_requests import parse_answer
from jetsdk.codec.frames import Api
from jetsdk.codec.messages import encode_json
from jetsdk.metadata import PartitionInfo, StreamInfo

__all__ = ["UNKNOWN_BYTES_PER_OFFSET", "BytesPerOffset", "bytes_per_offset", "estimate"]

BytesPerOffset = dict[tuple[str, int], float]
"""``{(stream, partition): stored bytes per offset}``."""

UNKNOWN_BYTES_PER_OFFSET = 1.0
"""The estimate for a stream that stores nothing yet: every offset counts one byte, so the
limit never holds back more than it would in offsets."""


def estimate(info: PartitionInfo) -> float | None:
    """Stored bytes per offset of one partition as DescribeStream reports it, or None when
    it stores no record (or the answering server holds no replica)."""
    if info.size_bytes is None or info.leo is None or info.log_start is None:
        return None
    stored = info.leo - info.log_start
    if stored <= 0 or info.size_bytes <= 0:
        return None
    return info.size_bytes / stored


async def bytes_per_offset(client: Client, streams: Iterable[str]) -> BytesPerOffset:
    """The estimate for every partition of ``streams`` (one DescribeStream per stream, plus
    one per partition the answering server holds no replica of)."""
    out: BytesPerOffset = {}

    async def one(stream: str) -> None:
        info = await client.describe_stream(stream)
        sizes: dict[int, float | None] = {}
        for part in info.partitions:
            sizes[part.partition] = estimate(part)
            if part.hw is None and part.leader is not None:
                sizes[part.partition] = await _from_leader(client, stream, part.partition)
        known = [v for v in sizes.values() if v is not None]
        fallback = sum(known) / len(known) if known else UNKNOWN_BYTES_PER_OFFSET
        for part_no, value in sizes.items():
            out[(stream, part_no)] = fallback if value is None else value

    async with anyio.create_task_group() as tg:
        for stream in streams:
            tg.start_soon(one, stream)
    return out


async def _from_leader(client: Client, stream: str, partition: int) -> float | None:
    body = encode_json({"name": stream})
    answer = await client.request_leader(stream, partition, Api.DESCRIBE_STREAM, body)
    found = parse_answer(StreamInfo.from_json, answer).partition(partition)
    return None if found is None else estimate(found)
