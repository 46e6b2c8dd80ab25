"""Cluster administration: move partition leaderships back to their preferred replicas
(RebalanceLeaders, API 14 in spec/protocol.md; spec/cluster.md, "Preferred leaders").

    result = await rebalance_leaders(client)
    print(result.moved, result.remaining)   # call again while remaining > 0

The metadata leader does the same every few seconds on its own unless the servers run with
``[cluster] auto_leader_rebalance = false``. Needs a cluster admin (``admin`` on ``*``)
when the server requires authentication.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from jetsdk.client import Client
from jetsdk.codec.errors import CodecError
from jetsdk.codec.frames import Api
from jetsdk.codec.messages import decode_json, encode_json
from jetsdk.errors import MalformedFrame

__all__ = ["MAX_REBALANCE", "LeaderRebalance", "rebalance_leaders"]

MAX_REBALANCE = 1000
"""Most leaderships one call may move (the server refuses a larger ``max``)."""


@dataclass(frozen=True)
class LeaderRebalance:
    """What one preferred-leader round did."""

    moved: int
    """Leaderships moved to their preferred replica."""
    refused: int
    """Elections refused (the partition changed meanwhile)."""
    remaining: int
    """Partitions still due (call again to move them)."""


async def rebalance_leaders(client: Client, max_moves: int | None = None) -> LeaderRebalance:
    """Run one preferred-leader round on the cluster's metadata leader.

    Args:
        client: a connected client (any server of the cluster).
        max_moves: most leaderships to move (1..1000; default: the servers'
            ``leader_rebalance_max``).

    Raises:
        UnsupportedApi: the server is not a member of a cluster.
        PermissionDenied: the client is not a cluster admin.
        InvalidArgument: ``max_moves`` out of range.
    """
    body: dict[str, object] = {"op_id": uuid.uuid4().hex}
    if max_moves is not None:
        body["max"] = max_moves
    answer = await client.request_any(Api.REBALANCE_LEADERS, encode_json(body))
    try:
        data = decode_json(answer)
        return LeaderRebalance(int(data["moved"]), int(data["refused"]), int(data["remaining"]))
    except (CodecError, KeyError, TypeError, ValueError) as exc:
        raise MalformedFrame(f"bad RebalanceLeaders answer: {exc}") from exc
