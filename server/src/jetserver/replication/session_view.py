"""What the leader holds of a fetch session, as its follower sees it (spec/cluster.md,
"Fetch sessions"; Kafka's KIP-227 incremental fetch requests).

The leader keeps each session's partitions parked from one ReplicaFetch request to the
next, by slot (``broker/replica_sessions.py``). :class:`HeldPartitions` is the follower's
copy of that: each partition's slot and the fetch last sent for it, and the
``session_epoch`` the next request carries. From the partitions of a round it makes the
request's delta: the partitions new to the session or whose fetch changed (offset,
flushed offset, epoch), and the slots of those that leave it.

Task safety: one event loop (the session's).
"""

from __future__ import annotations

import attrs

from jetsdk.codec.replica_fetch import ReplicaFetchPartition

_EPOCH_WRAP = 1 << 32

Key = tuple[str, int, int]
"""A partition and the leader epoch its fetch follows (a new epoch is a new partition of
the session: its old one leaves it)."""


@attrs.frozen
class Delta:
    """One request's change to the session."""

    partitions: tuple[ReplicaFetchPartition, ...]
    """New or changed partitions, each with its slot."""
    forget: tuple[int, ...]
    """Slots that leave the session."""
    slots: tuple[int, ...]
    """The slot of each partition of the round, in the round's order."""
    epoch: int
    """The request's ``session_epoch`` (0: full)."""


@attrs.define(eq=False)
class HeldPartitions:
    """The follower's view of its session at the leader (module docstring)."""

    epoch: int = 0
    """The next request's ``session_epoch`` (0: a full request)."""
    _held: dict[Key, tuple[int, ReplicaFetchPartition]] = attrs.field(factory=dict)
    _free: list[int] = attrs.field(factory=list)
    _next_slot: int = 0

    def __len__(self) -> int:
        return len(self._held)

    def reset(self) -> None:
        """The leader may hold anything or nothing of the session: start it afresh."""
        self.epoch = 0
        self._held = {}
        self._free = []
        self._next_slot = 0

    def delta(self, parts: list[ReplicaFetchPartition]) -> Delta:
        """The request for a round of ``parts`` (one per partition), the view moved on to
        them. Until :meth:`answered`, the view counts as lost (the next request is full)."""
        epoch = self.epoch
        if epoch == 0:
            self.reset()
        held = self._held
        keys = {(p.stream, p.partition, p.leader_epoch) for p in parts}
        forget = tuple(slot for key, (slot, _) in held.items() if key not in keys)
        free = self._free
        free.extend(forget)  # the leader applies the forgets first: reused at once
        sent: list[ReplicaFetchPartition] = []
        now_held: dict[Key, tuple[int, ReplicaFetchPartition]] = {}
        slots: list[int] = []
        for p in parts:
            key = (p.stream, p.partition, p.leader_epoch)
            prev = now_held.get(key) or held.get(key)
            if prev is not None:
                slot = prev[0]
                if prev[1] != p:
                    sent.append(attrs.evolve(p, slot=slot))
            else:
                if free:
                    slot = free.pop()
                else:
                    slot = self._next_slot
                    self._next_slot += 1
                sent.append(attrs.evolve(p, slot=slot))
            now_held[key] = (slot, p)
            slots.append(slot)
        self._held = now_held
        self.epoch = 0
        return Delta(tuple(sent), forget, tuple(slots), epoch)

    def answered(self, delta: Delta) -> None:
        """The leader answered the request of ``delta``: the next one builds on it."""
        self.epoch = delta.epoch + 1 if delta.epoch + 1 < _EPOCH_WRAP else 1

    def dropped(self, part: ReplicaFetchPartition) -> None:
        """``part``'s partition was answered with an error: the leader dropped it."""
        held = self._held.pop((part.stream, part.partition, part.leader_epoch), None)
        if held is not None:
            self._free.append(held[0])
