"""OffsetForLeaderEpoch bodies (JSON; used by followers to reconcile their log with the
leader's, spec/cluster.md "Replication" and spec/protocol.md). Pure, no I/O."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from jetsdk.codec.errors import CodecError


@attrs.frozen
class OffsetForLeaderEpochRequest:
    """Body of an OffsetForLeaderEpoch request: where does ``leader_epoch`` end on the leader?"""

    stream: str
    """Stream name."""
    partition: int
    """Partition number."""
    leader_epoch: int
    """The epoch asked about (the follower's latest epoch)."""
    current_leader_epoch: int = -1
    """The epoch the follower believes the leader has; a mismatch is NOT_LEADER (-1: no check)."""
    replica_id: int = -1
    """The asking follower's index in the replica list (-1: not a replica)."""

    def to_json(self) -> dict[str, Any]:
        """As a JSON object: every field, keys in the spec's order (the fields')."""
        return attrs.asdict(self)

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> OffsetForLeaderEpochRequest:
        """Parse a decoded JSON request.

        Raises:
            CodecError: a missing or mistyped field.
        """
        stream = obj.get("stream")
        if not isinstance(stream, str):
            raise CodecError("OffsetForLeaderEpoch: stream must be a string")
        return cls(
            stream=stream,
            partition=_json_int(obj, "partition"),
            leader_epoch=_json_int(obj, "leader_epoch"),
            current_leader_epoch=_json_int(obj, "current_leader_epoch", -1),
            replica_id=_json_int(obj, "replica_id", -1),
        )


@attrs.frozen
class OffsetForLeaderEpochResponse:
    """Body of an OffsetForLeaderEpoch response (Kafka KIP-101 / KIP-279 semantics)."""

    leader_epoch: int
    """The largest epoch <= the one asked about that the leader knows (-1: none)."""
    end_offset: int
    """Where that epoch ends on the leader: its LEO for the current epoch, else the next
    epoch's start offset (-1: unknown)."""

    def to_json(self) -> dict[str, Any]:
        """As a JSON object."""
        return {"leader_epoch": self.leader_epoch, "end_offset": self.end_offset}

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> OffsetForLeaderEpochResponse:
        """Parse a decoded JSON response.

        Raises:
            CodecError: a missing or mistyped field.
        """
        return cls(
            leader_epoch=_json_int(obj, "leader_epoch"), end_offset=_json_int(obj, "end_offset")
        )


def _json_int(obj: Mapping[str, Any], key: str, default: int | None = None) -> int:
    value = obj.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int):
        raise CodecError(f"{key} must be an integer, got {value!r}")
    return value
