"""Replica ids on the wire: a follower's index in the partition's replica list.

Replica Fetch and OffsetForLeaderEpoch carry ``replica_id`` (an ``i32``) rather than a
server id string: it is the follower's position in ``PartitionAssignment.replicas``, which
every server of the cluster sees identically in the metadata. Replica lists never change
for the life of a stream (v1), so the index is stable; the leader also checks the leader
epoch carried by the request, so a stale follower is refused anyway.
"""

from __future__ import annotations

from collections.abc import Sequence


def replica_index(replicas: Sequence[str], server_id: str) -> int:
    """The replica id of ``server_id`` (-1 if it holds no replica)."""
    try:
        return list(replicas).index(server_id)
    except ValueError:
        return -1


def replica_at(replicas: Sequence[str], replica_id: int) -> str | None:
    """The server id of ``replica_id``, or None if out of range."""
    if 0 <= replica_id < len(replicas):
        return replicas[replica_id]
    return None
