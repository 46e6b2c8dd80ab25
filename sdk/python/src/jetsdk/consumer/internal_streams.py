"""The internal streams consumer groups keep their logs in (``__groups``, ``__share.<group>``):
found, or created by the first member that needs one."""

from __future__ import annotations

import contextlib
import uuid
from typing import Any

from jetsdk.client import Client
from jetsdk.codec.frames import Api
from jetsdk.codec.messages import encode_json
from jetsdk.errors import StreamExists, StreamNotFound
from jetsdk.metadata import StreamInfo

__all__ = ["ensure_internal_stream"]


async def ensure_internal_stream(
    client: Client, name: str, subject: str, partitions: int, **settings: Any
) -> StreamInfo:
    """Internal stream ``name``'s metadata, creating it first if it does not exist: on
    ``subject``, with ``partitions``, replication factor ``min(3, servers)``, not compacted,
    and ``settings`` (more CreateStream fields). Another member may have created it first
    (maybe with other settings): that one is used."""
    try:
        return await client.stream_info(name, refresh=True)
    except StreamNotFound:
        pass
    meta = await client.metadata()
    body = {
        "op_id": uuid.uuid4().hex,
        "name": name,
        "subject": subject,
        "partitions": partitions,
        "replication_factor": min(3, max(1, len(meta.servers))),
        "compact": False,
        "internal": True,
        **settings,
    }
    with contextlib.suppress(StreamExists):
        await client.request_any(Api.CREATE_STREAM, encode_json(body))
    return await client.stream_info(name, refresh=True)
