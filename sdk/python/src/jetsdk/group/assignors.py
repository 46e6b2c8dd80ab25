"""Partition assignors: pure, deterministic ``assign(members, partitions)`` functions.

Every member of a group runs the group's assignor on the same input and must get the same
output, so an assignor is a pure function of its arguments: no clock, no randomness, no
dependence on the order of the input sequences (each one sorts what it is given).

Built in (spec/groups.md, "Assignors"; every implementation of the protocol has these three):

- ``range``: per stream, the subscribed members in order each get a contiguous range.
- ``roundrobin``: all partitions in order, dealt to the subscribed members in turn.
- ``sticky``: balanced like round robin, but a member keeps the partitions it had
  (``MemberSubscription.previous``) wherever balance allows; the default.

A custom assignor is any object with a ``name`` and an ``assign`` method (:class:`Assignor`).
Its output is checked (:func:`check_assignment`); a group whose assignor returns an invalid
result falls back to ``range`` for that generation.

Thread safety: the assignors hold no state; call them from anywhere.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Protocol

import attrs

from jetsdk.group.stream_partition import StreamPartition

__all__ = [
    "BUILTIN_ASSIGNORS",
    "Assignment",
    "Assignor",
    "MemberSubscription",
    "RangeAssignor",
    "RoundRobinAssignor",
    "StickyAssignor",
    "check_assignment",
]

Assignment = dict[str, list[StreamPartition]]
"""member key -> its partitions, sorted; every member key present (maybe with an empty list)."""


@attrs.frozen
class MemberSubscription:
    """What an assignor knows about one member."""

    member: str
    """The member's assignment key (the instance id for static members); unique per call."""
    streams: frozenset[str]
    """Streams the member subscribes to; it may only get partitions of these."""
    previous: frozenset[StreamPartition] = frozenset()
    """Partitions the member was assigned in the previous generation (used by ``sticky``)."""


class Assignor(Protocol):
    """A pure, deterministic assignment function with a protocol-wide name."""

    @property
    def name(self) -> str:
        """The name members list in their join records (1..255 bytes, no control chars)."""
        ...

    def assign(
        self, members: Sequence[MemberSubscription], partitions: Sequence[StreamPartition]
    ) -> Mapping[str, Sequence[StreamPartition]]:
        """Give each partition to one member subscribed to its stream.

        Must not depend on the order of ``members`` or ``partitions``, on time or on
        randomness. Partitions whose stream no member subscribes to are left out.
        """
        ...


def _prepare(
    members: Sequence[MemberSubscription], partitions: Sequence[StreamPartition]
) -> tuple[list[MemberSubscription], list[StreamPartition]]:
    ordered = sorted(members, key=lambda m: m.member)
    keys = [m.member for m in ordered]
    if len(set(keys)) != len(keys):
        raise ValueError("member keys must be unique")
    return ordered, sorted(set(partitions))


def _result(
    ordered: Sequence[MemberSubscription], owned: Mapping[str, Iterable[StreamPartition]]
) -> Assignment:
    return {m.member: sorted(owned.get(m.member, ())) for m in ordered}


@attrs.frozen
class RangeAssignor:
    """Per stream, members (sorted) get contiguous ranges; the first ``n % m`` get one more."""

    name: str = "range"
    """The protocol name."""

    def assign(
        self, members: Sequence[MemberSubscription], partitions: Sequence[StreamPartition]
    ) -> Assignment:
        """See :class:`Assignor`."""
        ordered, parts = _prepare(members, partitions)
        owned: dict[str, list[StreamPartition]] = {}
        by_stream: dict[str, list[StreamPartition]] = {}
        for p in parts:
            by_stream.setdefault(p.stream, []).append(p)
        for stream, stream_parts in by_stream.items():
            eligible = [m.member for m in ordered if stream in m.streams]
            if not eligible:
                continue
            quota, extra = divmod(len(stream_parts), len(eligible))
            start = 0
            for i, member in enumerate(eligible):
                size = quota + (1 if i < extra else 0)
                owned.setdefault(member, []).extend(stream_parts[start : start + size])
                start += size
        return _result(ordered, owned)


@attrs.frozen
class RoundRobinAssignor:
    """All partitions (sorted) dealt in turn to the next member subscribed to their stream."""

    name: str = "roundrobin"
    """The protocol name."""

    def assign(
        self, members: Sequence[MemberSubscription], partitions: Sequence[StreamPartition]
    ) -> Assignment:
        """See :class:`Assignor`."""
        ordered, parts = _prepare(members, partitions)
        owned: dict[str, list[StreamPartition]] = {}
        if ordered:
            turn = 0
            for p in parts:
                for step in range(len(ordered)):
                    candidate = ordered[(turn + step) % len(ordered)]
                    if p.stream in candidate.streams:
                        owned.setdefault(candidate.member, []).append(p)
                        turn = (turn + step + 1) % len(ordered)
                        break
        return _result(ordered, owned)


@attrs.frozen
class StickyAssignor:
    """Balanced, and moves as few partitions as it can from the previous assignment.

    Result properties (tested): every partition with a subscribed member is assigned exactly
    once; no partition's owner has two or more partitions more than another member that could
    take it (so with equal subscriptions counts differ by at most one); a balanced, valid
    previous assignment comes back unchanged; when a member leaves a balanced group the others
    keep all they had; when one joins, only the partitions it gets move.

    Cost: O(P * M) for the initial deal plus O(M * P) per moved partition.
    """

    name: str = "sticky"
    """The protocol name."""

    def assign(
        self, members: Sequence[MemberSubscription], partitions: Sequence[StreamPartition]
    ) -> Assignment:
        """See :class:`Assignor`."""
        ordered, parts = _prepare(members, partitions)
        if not ordered:
            return {}
        owned: dict[str, set[StreamPartition]] = {m.member: set() for m in ordered}
        part_set = set(parts)
        taken: set[StreamPartition] = set()
        # 1. Keep previous ownership that is still valid (step 3 trims what is over balance).
        for m in ordered:
            for p in sorted(m.previous):
                if p in part_set and p not in taken and p.stream in m.streams:
                    owned[m.member].add(p)
                    taken.add(p)
        # 2. Deal the rest, most constrained partitions first, each to the least loaded member
        # that may take it (ties broken by member key).
        eligible = {
            p: [m.member for m in ordered if p.stream in m.streams] for p in parts if p not in taken
        }
        for p in sorted(eligible, key=lambda q: (len(eligible[q]), q)):
            choices = eligible[p]
            if choices:
                best = min(choices, key=lambda k: (len(owned[k]), k))
                owned[best].add(p)
        # 3. Even out: while a partition's owner has >= 2 more than a member that may take it,
        # move it. Each move lowers the sum of squared counts, so this ends.
        while self._move_one(ordered, owned):
            pass
        return {k: sorted(v) for k, v in owned.items()}

    @staticmethod
    def _move_one(
        ordered: Sequence[MemberSubscription], owned: dict[str, set[StreamPartition]]
    ) -> bool:
        donors = sorted(ordered, key=lambda m: (-len(owned[m.member]), m.member))
        receivers = sorted(ordered, key=lambda m: (len(owned[m.member]), m.member))
        for donor in donors:
            have = len(owned[donor.member])
            for receiver in receivers:
                if len(owned[receiver.member]) > have - 2:
                    break
                wanted = receiver.streams
                # Move the highest partition the receiver may take: deterministic, and it keeps
                # low partitions where they were.
                for p in sorted(owned[donor.member], reverse=True):
                    if p.stream in wanted:
                        owned[donor.member].remove(p)
                        owned[receiver.member].add(p)
                        return True
        return False


BUILTIN_ASSIGNORS: Mapping[str, Assignor] = {
    a.name: a for a in (StickyAssignor(), RangeAssignor(), RoundRobinAssignor())
}
"""The three assignors every implementation has, by name."""


def check_assignment(
    members: Sequence[MemberSubscription],
    partitions: Sequence[StreamPartition],
    result: Mapping[str, Sequence[object]],
) -> str | None:
    """Return why ``result`` is not a valid assignment, or None if it is.

    Valid: keys are member keys; each partition of ``partitions`` whose stream some member
    subscribes to appears exactly once, under a member subscribed to its stream; nothing else
    appears.
    """
    by_key = {m.member: m for m in members}
    wanted = {p for p in partitions if any(p.stream in m.streams for m in members)}
    seen: set[StreamPartition] = set()
    for key, parts in result.items():
        member = by_key.get(key)
        if member is None:
            return f"unknown member {key!r}"
        for p in parts:
            if not isinstance(p, StreamPartition):
                return f"not a StreamPartition: {p!r}"
            if p in seen:
                return f"{p} assigned twice"
            if p not in wanted:
                return f"{p} is not a partition to assign"
            if p.stream not in member.streams:
                return f"{p} given to {key!r}, which does not subscribe to {p.stream!r}"
            seen.add(p)
    missing = wanted - seen
    if missing:
        return f"{min(missing)} not assigned"
    return None
