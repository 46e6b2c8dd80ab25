"""A stream described partition by partition at each partition's leader
(``Client.stream_info(refresh=True)``): offsets, size and segments as the leader sees them.

A DescribeStream answer describes the partitions the answering server holds, as that server
sees them; only a partition's leader has its committed offsets for sure, so each leader is
asked once (no retries: a leader that does not answer leaves its partitions without them).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping

import attrs

from jetsdk.client_requests import parse_answer
from jetsdk.codec.frames import Api
from jetsdk.codec.messages import encode_json
from jetsdk.connection import Connection
from jetsdk.errors import ClientClosed, JetError, StreamNotFound
from jetsdk.metadata import StreamInfo

__all__ = ["describe_at_leaders", "merge_described"]


async def describe_at_leaders(
    info: StreamInfo, connect: Callable[[str], Awaitable[Connection]], timeout: float
) -> StreamInfo:
    """``info`` with each partition as its leader describes it (see the module doc).

    Raises:
        StreamNotFound: the stream was deleted meanwhile. ClientClosed: the client closed.
    """
    body = encode_json({"name": info.name})
    described: dict[str, StreamInfo] = {}
    for leader in dict.fromkeys(p.leader for p in info.partitions if p.leader is not None):
        try:
            conn = await connect(leader)
            answer = await conn.request(Api.DESCRIBE_STREAM, body, timeout=timeout)
            described[leader] = parse_answer(StreamInfo.from_json, answer)
        except (ClientClosed, StreamNotFound):
            raise
        except JetError:  # no answer: its partitions keep what the metadata has
            continue
    return merge_described(info, described)


def merge_described(
    info: StreamInfo, described: Mapping[str, StreamInfo], *, missing_only: bool = False
) -> StreamInfo:
    """``info`` with each partition's offsets, size and segments as its leader described
    them (``described``: leader id -> its DescribeStream answer); a partition without a
    leader, or left out of its leader's answer, keeps what ``info`` has (with
    ``missing_only``: so does every partition that has an HW in ``info``)."""
    parts = []
    for part in info.partitions:
        leader = None if missing_only and part.hw is not None else part.leader
        answer = described.get(leader) if leader is not None else None
        found = answer.partition(part.partition) if answer is not None else None
        if found is not None:
            part = attrs.evolve(
                part,
                hw=found.hw,
                leo=found.leo,
                log_start=found.log_start,
                size_bytes=found.size_bytes,
                segments=found.segments,
            )
        parts.append(part)
    return attrs.evolve(info, partitions=tuple(parts))
