"""The coordinator-free group state machine (spec/groups.md, "State machine").

Every member of a consumer group reads the same ordered group log and feeds each record of its
group to :meth:`GroupState.apply`, with the record's offset and its server-assigned timestamp.
The state is a pure function of that sequence, so every reader of the same prefix holds the
same membership, generation, target assignment, partition ownership and committed offsets.

Time comes only from record timestamps ("the log clock"): a member is expired when a record of
the group arrives whose timestamp is more than its session timeout past the member's last
record. Nothing here reads a clock or a random source.

Not thread-safe: one reader task owns a GroupState.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from jetsdk.group.assignors import (
    BUILTIN_ASSIGNORS,
    Assignor,
    MemberSubscription,
    RangeAssignor,
    check_assignment,
)
from jetsdk.group.changes import (
    AssignorFailed,
    Change,
    CommitAccepted,
    CommitRejected,
    GenerationChanged,
    MemberAdded,
    MemberParked,
    MemberRemoved,
    PartitionAcquired,
    PartitionReleased,
    RecordIgnored,
    ReleaseCancelled,
    ReleaseIgnored,
    ReleaseReason,
    ReleaseRequested,
    RemoveReason,
)
from jetsdk.group.errors import InvalidGroupRecord, UnknownAssignor
from jetsdk.group.membership import MemberInfo, OwnerEntry, Ownership
from jetsdk.group.offsets import CommitEntry, OffsetAndMetadata, OffsetTable
from jetsdk.group.records import (
    SIMPLE_GENERATION,
    Checkpoint,
    GroupRecord,
    Heartbeat,
    Join,
    Leave,
    OffsetCommit,
    Release,
)
from jetsdk.group.snapshot import GroupSnapshot, snapshot_from_json, snapshot_to_json
from jetsdk.group.stream_partition import StreamPartition

__all__ = ["GroupState"]

_NEVER = 2**63 - 1


@attrs.define(eq=False)
class GroupState:
    """The state of one consumer group, built by applying its log records in order.

    Args:
        group: the group name; records of other groups are ignored.
        assignors: assignors by name; must include every assignor the group may choose
            (the built-in three by default).
    """

    group: str
    assignors: Mapping[str, Assignor] = attrs.field(default=BUILTIN_ASSIGNORS, kw_only=True)
    _clock: int = attrs.field(default=0, init=False)
    _generation: int = attrs.field(default=0, init=False)
    _last_offset: int = attrs.field(default=-1, init=False)
    _last_checkpoint_at: int | None = attrs.field(default=None, init=False)
    _assignor: str = attrs.field(default="", init=False)
    _members: dict[str, MemberInfo] = attrs.field(factory=dict, init=False)
    _slots: dict[str, str] = attrs.field(factory=dict, init=False)
    _targets: dict[StreamPartition, str] = attrs.field(factory=dict, init=False)
    _owners: dict[StreamPartition, OwnerEntry] = attrs.field(factory=dict, init=False)
    _offsets: OffsetTable = attrs.field(factory=OffsetTable, init=False)
    # A lower bound on the earliest expiry or forced release; below it, nothing times out.
    _next_deadline: int = attrs.field(default=_NEVER, init=False)

    # ----------------------------------------------------------------- reading the state

    @property
    def clock(self) -> int:
        """The log clock: the largest record timestamp applied (ns), 0 before any."""
        return self._clock

    @property
    def generation(self) -> int:
        """The generation: 0 before the first member, +1 on every membership change."""
        return self._generation

    @property
    def last_offset(self) -> int:
        """Log offset of the last record of this group applied, -1 before any."""
        return self._last_offset

    @property
    def last_checkpoint_at(self) -> int | None:
        """Log time of the group's last checkpoint record (its first record if none yet)."""
        return self._last_checkpoint_at

    @property
    def assignor(self) -> str:
        """Name of the assignor that computed the current assignment ("" before any)."""
        return self._assignor

    def members(self) -> list[MemberInfo]:
        """All members (parked ones included), sorted by member id."""
        return [self._members[k] for k in sorted(self._members)]

    def member(self, member: str) -> MemberInfo | None:
        """One member, or None if ``member`` is not in the group."""
        return self._members.get(member)

    def member_for_instance(self, instance: str) -> str | None:
        """The member id currently holding static instance ``instance``, or None."""
        return self._slots.get(f"i:{instance}")

    def leader(self) -> str | None:
        """The oldest member that is not parked (writes checkpoints), or None."""
        live = [m for m in self._members.values() if not m.parked]
        if not live:
            return None
        return min(live, key=lambda m: (m.joined_offset, m.member)).member

    def partitions(self) -> list[StreamPartition]:
        """Every partition the group assigns or still owns, sorted."""
        return sorted(self._targets.keys() | self._owners.keys())

    def target(self, partition: StreamPartition) -> str | None:
        """The member id the current assignment gives ``partition`` to, or None."""
        slot = self._targets.get(partition)
        return None if slot is None else self._slots.get(slot)

    def assignment(self) -> dict[str, list[StreamPartition]]:
        """The target assignment: member id -> partitions (every member present)."""
        out: dict[str, list[StreamPartition]] = {m: [] for m in sorted(self._members)}
        for p in sorted(self._targets):
            member = self._slots.get(self._targets[p])
            if member is not None:
                out[member].append(p)
        return out

    def ownership(self, partition: StreamPartition) -> Ownership | None:
        """Who owns ``partition`` now, or None if nobody does."""
        own = self._owners.get(partition)
        if own is None:
            return None
        return Ownership(
            partition=partition,
            owner=own.owner,
            generation=own.generation,
            target=self.target(partition),
            requested_at=own.requested_at,
            force_at=own.force_at,
        )

    def owned_by(self, member: str) -> dict[StreamPartition, Ownership]:
        """The partitions ``member`` owns now, with their ownership entries."""
        mine = sorted(p for p, own in self._owners.items() if own.owner == member)
        out: dict[StreamPartition, Ownership] = {}
        for p in mine:
            view = self.ownership(p)
            assert view is not None
            out[p] = view
        return out

    def committed(self, partition: StreamPartition) -> CommitEntry | None:
        """The committed offset of ``partition``, or None."""
        return self._offsets.get(partition)

    def committed_offsets(self) -> dict[StreamPartition, CommitEntry]:
        """Every committed offset, sorted by partition."""
        return dict(self._offsets.items())

    def lease_end(self, member: str, partition: StreamPartition) -> int | None:
        """The log time (ns) up to which ``member`` surely still owns ``partition``.

        No record appended later than this view can take the partition from ``member`` before
        the log clock passes the returned time: its session runs at least until its last
        record plus the session timeout, and a release request not yet seen cannot be forced
        before the current clock plus its release timeout. None if it does not own it.
        """
        own = self._owners.get(partition)
        if own is None or own.owner != member:
            return None
        info = self._members.get(member)
        if info is None or info.parked:
            return own.force_at
        pending = (
            own.force_at if own.force_at is not None else self._clock + info.release_timeout_ns
        )
        return min(info.expires_after, pending)

    def is_settled(self) -> bool:
        """True if every assigned partition is owned by its target and nothing is pending."""
        for p, slot in self._targets.items():
            own = self._owners.get(p)
            member = self._slots.get(slot)
            if own is None or own.owner != member or own.requested_at is not None:
                return False
        return self._owners.keys() <= self._targets.keys()

    # ----------------------------------------------------------------- applying records

    def apply(self, record: GroupRecord, *, offset: int, timestamp: int) -> list[Change]:
        """Apply the record at log ``offset`` with server ``timestamp`` (ns); return changes.

        Records must be fed in increasing offset order; a record at or below
        :attr:`last_offset` is ignored (so a reader may re-feed after a retry). Records of
        other groups are ignored and do not move the clock.

        Raises:
            UnknownAssignor: the group chose an assignor missing from ``assignors`` (the
                state is unusable afterwards).
        """
        if record.group != self.group or offset <= self._last_offset:
            return []
        self._last_offset = offset
        if timestamp > self._clock:
            self._clock = timestamp
        now = self._clock
        if self._last_checkpoint_at is None:
            self._last_checkpoint_at = now
        changes: list[Change] = []
        membership = dirty = False
        if now > self._next_deadline:
            membership = self._expire(now, changes)
            dirty = self._force(now, changes) or membership
            self._next_deadline = self._earliest_deadline()
        if isinstance(record, Heartbeat):
            if not self._touch(record.member):
                changes.append(RecordIgnored(record.member, "heartbeat from a non-member"))
        elif isinstance(record, Join):
            m, d = self._on_join(record, offset, changes)
            membership, dirty = membership or m, dirty or d
        elif isinstance(record, OffsetCommit):
            self._commit(
                record.member,
                record.stream_partition,
                record.generation,
                record.offset,
                record.metadata,
                changes,
            )
            if record.generation != SIMPLE_GENERATION:
                self._touch(record.member)
        elif isinstance(record, Release):
            dirty = self._on_release(record, changes) or dirty
            self._touch(record.member)
        elif isinstance(record, Leave):
            m, d = self._on_leave(record, changes)
            membership, dirty = membership or m, dirty or d
        elif isinstance(record, Checkpoint):
            self._last_checkpoint_at = now
            self._touch(record.member)
        if membership:
            self._recompute(changes)
        if membership or dirty:
            self._reconcile(changes)
        return changes

    def _touch(self, member: str) -> bool:
        """Mark ``member`` seen now; False if it is not a member, or parked."""
        entry = self._members.get(member)
        if entry is None or entry.parked:
            return False
        self._members[member] = entry.seen_at(self._clock)
        return True

    def _earliest_deadline(self) -> int:
        deadline = _NEVER
        for m in self._members.values():
            deadline = min(deadline, m.expires_after)
        for own in self._owners.values():
            if own.force_at is not None:
                deadline = min(deadline, own.force_at)
        return deadline

    def _expire(self, now: int, changes: list[Change]) -> bool:
        expired = [k for k in sorted(self._members) if now > self._members[k].expires_after]
        for member in expired:
            self._remove(member, "expired", changes)
        return bool(expired)

    def _force(self, now: int, changes: list[Change]) -> bool:
        forced = False
        for p in sorted(self._owners):
            own = self._owners[p]
            if own.force_at is not None and now > own.force_at:
                del self._owners[p]
                changes.append(PartitionReleased(own.owner, p, "forced"))
                forced = True
        return forced

    def _release_all(self, member: str, reason: ReleaseReason, changes: list[Change]) -> bool:
        mine = [p for p in sorted(self._owners) if self._owners[p].owner == member]
        for p in mine:
            del self._owners[p]
            changes.append(PartitionReleased(member, p, reason))
        return bool(mine)

    def _remove(self, member: str, reason: RemoveReason, changes: list[Change]) -> None:
        entry = self._members.pop(member)
        if self._slots.get(entry.slot) == member:
            del self._slots[entry.slot]
        changes.append(MemberRemoved(member, reason))
        if reason != "replaced":
            self._release_all(member, "left" if reason == "left" else "expired", changes)

    def _on_join(self, rec: Join, offset: int, changes: list[Change]) -> tuple[bool, bool]:
        now = self._clock
        entry = self._members.get(rec.member)
        if entry is not None:
            if entry.instance != rec.instance:
                changes.append(RecordIgnored(rec.member, "join with another instance id"))
                return False, False
            reassign = (
                entry.subscriptions != rec.subscription_map or entry.assignors != rec.assignors
            )
            unparked = entry.parked
            entry = self._members[rec.member] = MemberInfo.from_join(
                rec, joined_offset=entry.joined_offset, last_seen=now
            )
            self._next_deadline = min(self._next_deadline, entry.expires_after)
            return reassign, unparked
        joined_offset = offset
        replaces: str | None = None
        if rec.instance is not None:
            replaces = self._slots.get(f"i:{rec.instance}")
        if replaces is not None:
            old = self._members[replaces]
            joined_offset = old.joined_offset
            self._remove(replaces, "replaced", changes)
            # The old incarnation keeps what it owns until it releases it, its session ends,
            # or its release timeout passes, whichever is first: a live old process can
            # commit and hand over cleanly, a dead one blocks for at most that long.
            deadline = min(now + old.release_timeout_ns, old.expires_after)
            for p in sorted(self._owners):
                own = self._owners[p]
                if own.owner != replaces:
                    continue
                if own.requested_at is None:
                    own.requested_at = now
                own.force_at = deadline if own.force_at is None else min(own.force_at, deadline)
                self._next_deadline = min(self._next_deadline, own.force_at)
                changes.append(ReleaseRequested(replaces, p, own.force_at))
        entry = MemberInfo.from_join(rec, joined_offset=joined_offset, last_seen=now)
        self._members[rec.member] = entry
        self._slots[entry.slot] = rec.member
        self._next_deadline = min(self._next_deadline, entry.expires_after)
        changes.append(MemberAdded(rec.member, replaces))
        return True, True

    def _commit(
        self,
        member: str,
        partition: StreamPartition,
        generation: int,
        offset: int,
        metadata: str,
        changes: list[Change],
    ) -> None:
        own = self._owners.get(partition)
        if generation == SIMPLE_GENERATION:
            # A simple commit (§7.2): only while no member owns or targets the partition;
            # like an offset reset, it may move the offset back.
            if own is not None or partition in self._targets:
                changes.append(CommitRejected(member, partition, offset, "group_active"))
            else:
                self._offsets.reset(partition, self._entry(offset, metadata, member, generation))
                changes.append(CommitAccepted(member, partition, offset))
        elif own is None or own.owner != member:
            changes.append(CommitRejected(member, partition, offset, "not_owner"))
        elif own.generation != generation:
            changes.append(CommitRejected(member, partition, offset, "stale_generation"))
        elif self._offsets.would_regress(partition, offset):
            changes.append(CommitRejected(member, partition, offset, "regression"))
        else:
            self._offsets.put(partition, self._entry(offset, metadata, member, generation))
            changes.append(CommitAccepted(member, partition, offset))

    def _entry(self, offset: int, metadata: str, member: str, generation: int) -> CommitEntry:
        """A commit of ``offset`` by ``member`` (``generation``) as of the log clock."""
        return CommitEntry(OffsetAndMetadata(offset, metadata), member, generation, self._clock)

    def _on_release(self, rec: Release, changes: list[Change]) -> bool:
        released = False
        for e in rec.partitions:
            p = e.stream_partition
            if e.offset is not None:
                self._commit(rec.member, p, e.generation, e.offset, e.metadata, changes)
            own = self._owners.get(p)
            # A release by the owner always ends its ownership, even if the partition was
            # assigned back to it meanwhile (it then re-acquires it under a new owner
            # generation): the member stopped consuming when it sent the release and must
            # not resume the old ownership. Only a release with nothing to hand over (still
            # the target, no generation since it acquired) is ignored, so an owner
            # generation never repeats for one member and partition.
            if (
                own is not None
                and own.owner == rec.member
                and own.generation == e.generation
                and not (self.target(p) == rec.member and own.generation == self._generation)
            ):
                del self._owners[p]
                changes.append(PartitionReleased(rec.member, p, "released"))
                released = True
            else:
                changes.append(ReleaseIgnored(rec.member, p))
        return released

    def _on_leave(self, rec: Leave, changes: list[Change]) -> tuple[bool, bool]:
        for e in rec.final_offsets:
            if e.offset is not None:
                p = e.stream_partition
                self._commit(rec.member, p, e.generation, e.offset, e.metadata, changes)
        released = self._release_all(rec.member, "left", changes)
        entry = self._members.get(rec.member)
        if entry is None:
            return False, released
        if rec.temporary and entry.instance is not None:
            if not entry.parked:
                self._members[rec.member] = attrs.evolve(entry, parked=True)
                changes.append(MemberParked(rec.member))
            return False, released
        self._remove(rec.member, "left", changes)
        return True, True

    def _choose_assignor(self) -> str:
        members = sorted(self._members.values(), key=lambda m: (m.joined_offset, m.member))
        for name in members[0].assignors:
            if all(name in m.assignors for m in members):
                return name
        return "range"

    def _recompute(self, changes: list[Change]) -> None:
        self._generation += 1
        if not self._members:
            self._targets = {}
            self._assignor = ""
            changes.append(GenerationChanged(self._generation, "", {}))
            return
        counts: dict[str, int] = {}
        for m in self._members.values():
            for stream, count in m.subscriptions.items():
                counts[stream] = max(counts.get(stream, 0), count)
        partitions = [StreamPartition(s, i) for s in sorted(counts) for i in range(counts[s])]
        previous: dict[str, set[StreamPartition]] = {}
        for p, slot in self._targets.items():
            previous.setdefault(slot, set()).add(p)
        subscriptions = [
            MemberSubscription(
                m.slot, frozenset(m.subscriptions), frozenset(previous.get(m.slot, ()))
            )
            for m in sorted(self._members.values(), key=lambda m: m.slot)
        ]
        name = self._choose_assignor()
        assignor = self.assignors.get(name)
        if assignor is None:
            raise UnknownAssignor(name)
        problem: str | None
        try:
            result: Mapping[str, Any] = assignor.assign(subscriptions, partitions)
            problem = check_assignment(subscriptions, partitions, result)
        except Exception as exc:  # a custom assignor's bug must not stop the group
            problem = f"raised {exc!r}"
        if problem is not None:
            changes.append(AssignorFailed(name, problem))
            name = "range"
            result = RangeAssignor().assign(subscriptions, partitions)
        self._assignor = name
        self._targets = {p: slot for slot, parts in result.items() for p in parts}
        changes.append(GenerationChanged(self._generation, name, self._assignment_tuples()))

    def _assignment_tuples(self) -> dict[str, tuple[StreamPartition, ...]]:
        return {k: tuple(v) for k, v in self.assignment().items()}

    def _reconcile(self, changes: list[Change]) -> None:
        now = self._clock
        for p in sorted(self._targets.keys() | self._owners.keys()):
            target = self.target(p)
            own = self._owners.get(p)
            if own is None:
                if target is not None and not self._members[target].parked:
                    self._owners[p] = OwnerEntry(target, self._generation)
                    changes.append(
                        PartitionAcquired(target, p, self._generation, self._offsets.offset(p))
                    )
            elif own.owner == target:
                if own.requested_at is not None:
                    own.requested_at = own.force_at = None
                    changes.append(ReleaseCancelled(target, p))
            elif own.requested_at is None:
                info = self._members.get(own.owner)
                own.requested_at = now
                own.force_at = now + (info.release_timeout_ns if info is not None else 0)
                self._next_deadline = min(self._next_deadline, own.force_at)
                changes.append(ReleaseRequested(own.owner, p, own.force_at))

    # ----------------------------------------------------------------- checkpoints

    def snapshot(self) -> dict[str, Any]:
        """The whole state as a JSON-ready object (the ``state`` of a checkpoint record).

        Canonical: two states are equal iff their snapshots are equal.
        """
        slots = self._slots
        return snapshot_to_json(
            GroupSnapshot(
                group=self.group,
                clock=self._clock,
                generation=self._generation,
                last_offset=self._last_offset,
                last_checkpoint_at=self._last_checkpoint_at,
                assignor=self._assignor,
                members=[self._members[k] for k in sorted(self._members)],
                targets=[(p, slots[slot]) for p, slot in sorted(self._targets.items())],
                owners=sorted(self._owners.items()),
                offsets=list(self._offsets.items()),
            )
        )

    @classmethod
    def restore(
        cls, snapshot: Mapping[str, Any], *, assignors: Mapping[str, Assignor] = BUILTIN_ASSIGNORS
    ) -> GroupState:
        """Rebuild a state from :meth:`snapshot` output (a checkpoint's ``state``).

        Raises:
            InvalidGroupRecord: the snapshot is malformed.
        """
        snap = snapshot_from_json(snapshot)
        state = cls(snap.group, assignors=assignors)
        state._clock, state._generation = snap.clock, snap.generation
        state._last_offset, state._last_checkpoint_at = snap.last_offset, snap.last_checkpoint_at
        state._assignor = snap.assignor
        for m in snap.members:
            if m.member in state._members or m.slot in state._slots:
                raise InvalidGroupRecord("checkpoint: a member or slot repeats")
            state._members[m.member] = m
            state._slots[m.slot] = m.member
        for p, member in snap.targets:
            entry = state._members.get(member)
            if entry is None:
                raise InvalidGroupRecord("checkpoint: a target is not a member")
            state._targets[p] = entry.slot
        state._owners.update(snap.owners)
        for p, offset in snap.offsets:
            state._offsets.put(p, offset)
        state._next_deadline = state._earliest_deadline()
        return state
