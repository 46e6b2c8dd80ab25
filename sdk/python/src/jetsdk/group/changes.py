"""What applying one group-log record changed (returned by ``GroupState.apply``).

Members react to the changes that name them; tools and tests log them. Every reader of the same
log prefix gets the same list, in the same order.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

import attrs

from jetsdk.group.stream_partition import StreamPartition

__all__ = [
    "AssignorFailed",
    "Change",
    "CommitAccepted",
    "CommitRejected",
    "GenerationChanged",
    "MemberAdded",
    "MemberParked",
    "MemberRemoved",
    "PartitionAcquired",
    "PartitionReleased",
    "RecordIgnored",
    "ReleaseCancelled",
    "ReleaseIgnored",
    "ReleaseRequested",
]

RemoveReason = Literal["left", "expired", "replaced"]
ReleaseReason = Literal["released", "forced", "expired", "left"]
RejectReason = Literal["not_owner", "stale_generation", "regression", "group_active"]


@attrs.frozen
class MemberAdded:
    """A member entered (``replaces`` names the incarnation it took the slot of, if static)."""

    member: str
    """The new member id."""
    replaces: str | None = None
    """Member id of the previous incarnation with the same instance id, or None."""


@attrs.frozen
class MemberRemoved:
    """A member is no longer in the group."""

    member: str
    """The member id."""
    reason: RemoveReason
    """left, expired (session timeout) or replaced (same instance id rejoined)."""


@attrs.frozen
class MemberParked:
    """A static member left temporarily: it keeps its slot but owns nothing until it returns."""

    member: str
    """The member id."""


@attrs.frozen
class GenerationChanged:
    """Membership changed: a new generation and a new target assignment."""

    generation: int
    """The new generation."""
    assignor: str
    """Name of the assignor that computed it."""
    assignment: Mapping[str, tuple[StreamPartition, ...]]
    """Target assignment: member id -> partitions (sorted)."""


@attrs.frozen
class AssignorFailed:
    """The chosen assignor raised or returned an invalid result; ``range`` was used instead."""

    assignor: str
    """The assignor that failed."""
    reason: str
    """What was wrong."""


@attrs.frozen
class ReleaseRequested:
    """A partition's owner is no longer its target: it must release it by ``force_at``."""

    member: str
    """The current owner."""
    partition: StreamPartition
    """The partition."""
    force_at: int
    """Log time (ns) after which the partition is taken from the owner."""


@attrs.frozen
class ReleaseCancelled:
    """The owner became the target again before releasing."""

    member: str
    """The owner."""
    partition: StreamPartition
    """The partition."""


@attrs.frozen
class PartitionReleased:
    """A partition lost its owner."""

    member: str
    """The former owner."""
    partition: StreamPartition
    """The partition."""
    reason: ReleaseReason
    """released (by the owner), forced (release timeout), expired, left."""


@attrs.frozen
class ReleaseIgnored:
    """A release that did not apply (not the owner, stale generation, or still the target)."""

    member: str
    """The member that sent it."""
    partition: StreamPartition
    """The partition."""


@attrs.frozen
class PartitionAcquired:
    """A member now owns a partition and may consume it from ``offset``."""

    member: str
    """The new owner."""
    partition: StreamPartition
    """The partition."""
    generation: int
    """The owner generation: commits for this ownership must carry it."""
    offset: int | None
    """The committed offset to start from, or None (use the consumer's reset policy)."""


@attrs.frozen
class CommitAccepted:
    """An offset commit moved (or re-stated) a partition's committed offset."""

    member: str
    """The committer."""
    partition: StreamPartition
    """The partition."""
    offset: int
    """The committed offset."""


@attrs.frozen
class CommitRejected:
    """An offset commit that was fenced off or would have moved the offset backwards."""

    member: str
    """The committer."""
    partition: StreamPartition
    """The partition."""
    offset: int
    """The offset it tried to commit."""
    reason: RejectReason
    """not_owner, stale_generation, regression, or group_active (a simple commit for a
    partition a member owns or targets)."""


@attrs.frozen
class RecordIgnored:
    """A well-formed record that had no effect (e.g. a heartbeat from a non-member)."""

    member: str
    """The member named in the record."""
    reason: str
    """Why."""


Change = (
    MemberAdded
    | MemberRemoved
    | MemberParked
    | GenerationChanged
    | AssignorFailed
    | ReleaseRequested
    | ReleaseCancelled
    | PartitionReleased
    | ReleaseIgnored
    | PartitionAcquired
    | CommitAccepted
    | CommitRejected
    | RecordIgnored
)
"""Any change."""
