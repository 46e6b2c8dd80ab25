"""A group's members and partition ownership: the values GroupState keeps and hands out
(members), and its mutable entries with their read-only views (owners)."""

from __future__ import annotations

from collections.abc import Mapping

import attrs

from jetsdk.group.records import Join
from jetsdk.group.stream_partition import StreamPartition

__all__ = ["MemberInfo", "OwnerEntry", "Ownership", "slot_of"]

NS_PER_MS = 1_000_000


def slot_of(member: str, instance: str | None) -> str:
    """The assignment key of a member: ``"i:" + instance`` if static, else ``"m:" + member``.

    Assignors see these keys, so a static member that restarts (new member id, same instance)
    gets the same place in every assignor's order and keeps its partitions.
    """
    return f"i:{instance}" if instance is not None else f"m:{member}"


@attrs.frozen
class MemberInfo:
    """One member as the group state sees it (GroupState replaces it on every change)."""

    member: str
    """The member id."""
    instance: str | None
    """The static instance id, or None."""
    subscriptions: Mapping[str, int] = attrs.field(hash=False)
    """stream -> partition count, as the member reported."""
    assignors: tuple[str, ...]
    """Supported assignors, most preferred first."""
    session_timeout_ms: int
    """Its session timeout."""
    release_timeout_ms: int
    """Its release timeout."""
    metadata: str
    """Its free-form client metadata."""
    joined_offset: int
    """Log offset of the join that made its slot (kept across static restarts): age order."""
    last_seen: int
    """Log time (ns) of its last accepted record."""
    parked: bool = False
    """A static member that left temporarily: keeps its slot, owns nothing."""

    @classmethod
    def from_join(
        cls, join: Join, *, joined_offset: int, last_seen: int, parked: bool = False
    ) -> MemberInfo:
        """The member ``join`` describes (a join record, or a checkpoint's member)."""
        return cls(
            member=join.member,
            instance=join.instance,
            subscriptions=join.subscription_map,
            assignors=join.assignors,
            session_timeout_ms=join.session_timeout_ms,
            release_timeout_ms=join.release_timeout_ms,
            metadata=join.metadata,
            joined_offset=joined_offset,
            last_seen=last_seen,
            parked=parked,
        )

    def seen_at(self, last_seen: int) -> MemberInfo:
        """This member, last seen at log time ``last_seen`` (ns).

        ``attrs.evolve(self, last_seen=...)`` built field by field: GroupState does this
        for most records it applies (each member's view applies every record), and evolve
        took ~10 % of a group simulation's CPU (tests/group/test_simulation.py).
        """
        return MemberInfo(
            self.member,
            self.instance,
            self.subscriptions,
            self.assignors,
            self.session_timeout_ms,
            self.release_timeout_ms,
            self.metadata,
            self.joined_offset,
            last_seen,
            self.parked,
        )

    @property
    def slot(self) -> str:
        """Its assignment key (see :func:`slot_of`)."""
        return slot_of(self.member, self.instance)

    @property
    def session_timeout_ns(self) -> int:
        """Its session timeout in ns (log time)."""
        return self.session_timeout_ms * NS_PER_MS

    @property
    def release_timeout_ns(self) -> int:
        """Its release timeout in ns (log time)."""
        return self.release_timeout_ms * NS_PER_MS

    @property
    def expires_after(self) -> int:
        """Log time after which (strictly) the member is expired."""
        return self.last_seen + self.session_timeout_ns


@attrs.define(eq=False)
class OwnerEntry:
    """A partition's owner as GroupState keeps it (mutable)."""

    owner: str
    generation: int
    requested_at: int | None = None
    force_at: int | None = None


@attrs.frozen
class Ownership:
    """Who owns a partition, since which generation, and whether it must be handed over."""

    partition: StreamPartition
    """The partition."""
    owner: str
    """The owning member id (maybe a replaced incarnation still handing over)."""
    generation: int
    """The owner generation: the generation in which the owner acquired it."""
    target: str | None
    """The member id the current assignment gives it to (None: nobody)."""
    requested_at: int | None
    """Log time (ns) the owner was asked to release it, or None."""
    force_at: int | None
    """Log time (ns) after which it is taken from the owner, or None."""

    @property
    def releasing(self) -> bool:
        """True if the owner has been asked to hand it over."""
        return self.requested_at is not None
