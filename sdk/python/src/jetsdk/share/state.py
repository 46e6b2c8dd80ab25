"""The share-group state machine (spec/share-groups.md §4): records in, state and changes out.

Every member runs one :class:`ShareState` over the same share log and so computes the same
leases, offset states and delivery counts. Pure code: no I/O, no clock (the records' server
timestamps are the only time), no randomness.
"""

from __future__ import annotations

from collections.abc import Iterator

import attrs

from jetsdk.share.records import (
    Claim,
    InvalidShareRecord,
    Settings,
    Settle,
    ShareRecord,
    UnsupportedShareVersion,
    decode_share_record,
    runs_of,
    share_record_group,
)

__all__ = [
    "ACKED",
    "ACQUIRED",
    "AVAILABLE",
    "DEAD",
    "DEAD_PENDING",
    "STATE_NAMES",
    "Acquired",
    "ClaimLost",
    "Fenced",
    "Lease",
    "PartitionShare",
    "Range",
    "Returned",
    "ShareChange",
    "ShareState",
]

AVAILABLE = 0
ACQUIRED = 1
DEAD_PENDING = 2
ACKED = 3
DEAD = 4
STATE_NAMES = ("available", "acquired", "dead_pending", "acked", "dead")
_MS = 1_000_000
_ACQUIRED_BYTE = bytes([ACQUIRED])
_ACKED_BYTE = bytes([ACKED])


@attrs.define(eq=False)
class Lease:
    """One lease: a member's right to deliver the offsets it acquired (spec §4)."""

    holder: str
    deadline: int
    lease_ms: int
    held: int
    """Offsets ``acquired`` or ``dead_pending`` under this lease."""


@attrs.define(eq=False)
class Range:
    """A range of offsets and the leases on them (spec §4). Lists are indexed by
    ``offset - start``; several leases may hold offsets of one range at once."""

    start: int
    end: int
    counts: list[int]
    states: bytearray
    owners: list[int]
    """The lease id holding each ``acquired``/``dead_pending`` offset (-1: none)."""
    not_before: dict[int, int] = attrs.field(factory=dict)
    """Offset -> log time before which a released offset is not available (if > 0)."""
    dlq_from: dict[int, int] = attrs.field(factory=dict)
    """Offset -> dead-letter offset to look for an earlier dead letter from."""
    reasons: dict[int, str] = attrs.field(factory=dict)
    """Offset -> why it is ``dead_pending``: ``rejected`` or ``max_deliveries`` (spec §6)."""
    renewed: dict[int, int] = attrs.field(factory=dict)
    """Offset -> its own deadline after a ``renew`` (else its lease's)."""
    leases: dict[int, Lease] = attrs.field(factory=dict)
    """Lease id (the winning claim's share-log offset) -> the lease, while it holds any."""
    unfinished: int = 0

    @classmethod
    def new(cls, start: int, end: int) -> Range:
        n = end - start
        return cls(
            start=start,
            end=end,
            counts=[0] * n,
            states=bytearray(n),
            owners=[-1] * n,
            unfinished=n,
        )

    def deadline_at(self, i: int) -> int:
        """The deadline of offset ``start + i`` (held by a lease)."""
        own = self.renewed.get(self.start + i)
        if own is not None:
            return own
        lease = self.leases.get(self.owners[i])
        return 0 if lease is None else lease.deadline

    def available(self, i: int, t: int) -> bool:
        """Whether offset ``start + i`` may be acquired at log time ``t``."""
        s = self.states[i]
        if s == AVAILABLE:
            return self.not_before.get(self.start + i, 0) <= t
        if s in (ACQUIRED, DEAD_PENDING):
            return t > self.deadline_at(i)
        return False

    def any_available(self, t: int) -> bool:
        """Whether some offset is available at ``t`` (without a scan when it is clear: the
        claim loop asks this of every range often)."""
        if self.unfinished == 0:
            return False
        held = sum(lease.held for lease in self.leases.values())
        if self.unfinished > held:  # some are in state available
            if not self.not_before:
                return True
        elif all(lease.deadline >= t for lease in self.leases.values()) and all(
            d >= t for d in self.renewed.values()
        ):
            return False  # all held, no deadline passed
        return any(self.available(i, t) for i in range(self.end - self.start))

    def disown(self, i: int) -> None:
        """Offset ``start + i`` leaves the lease holding it."""
        lease_id = self.owners[i]
        self.owners[i] = -1
        self.renewed.pop(self.start + i, None)
        lease = self.leases.get(lease_id)
        if lease is not None:
            lease.held -= 1
            if lease.held <= 0:
                del self.leases[lease_id]

    def offsets_in(self, state: int) -> list[int]:
        return [self.start + i for i, s in enumerate(self.states) if s == state]


@attrs.define(eq=False)
class PartitionShare:
    """One consumed partition's share state."""

    spso: int = 0
    ranges: dict[int, Range] = attrs.field(factory=dict)
    """By start, in creation (= offset) order."""
    last_end: int = 0
    acked_total: int = 0
    dead_total: int = 0

    @property
    def speo(self) -> int:
        return max(self.spso, self.last_end)

    def range_of(self, offset: int) -> Range | None:
        for r in self.ranges.values():
            if r.start <= offset < r.end:
                return r
        return None

    def state_of(self, offset: int) -> int:
        """The offset's state (finished below SPSO, available above SPEO)."""
        if offset < self.spso:
            return ACKED
        r = self.range_of(offset)
        return AVAILABLE if r is None else r.states[offset - r.start]


@attrs.frozen
class Acquired:
    """A claim won: ``member`` holds ``lease`` on these offsets until ``deadline``."""

    member: str
    stream: str
    partition: int
    start: int
    lease: int
    deadline: int
    offsets: tuple[tuple[int, int, bool], ...]
    """(offset, delivery count, dead_pending)."""
    claimed_start: int | None = None
    """The claim's ``start`` (None: a claim at SPEO)."""


@attrs.frozen
class ClaimLost:
    """A claim was invalid (another member got there first, or nothing was available)."""

    member: str
    stream: str
    partition: int
    start: int | None


@attrs.frozen
class Returned:
    """A holder gave back offsets it never handed out (their delivery does not count)."""

    member: str
    stream: str
    partition: int
    offsets: tuple[int, ...]


@attrs.frozen
class Fenced:
    """A settle was ignored: its writer no longer held the lease (another member claimed the
    range after the deadline, or the range is finished). Its outcomes were not applied."""

    member: str
    settle: Settle


ShareChange = Acquired | ClaimLost | Returned | Fenced


@attrs.define(eq=False)
class ShareState:
    """The state of one share group, from its log (spec §4)."""

    group: str
    partitions: dict[tuple[str, int], PartitionShare] = attrs.field(factory=dict)
    last_offset: int = -1
    clock: int = 0
    skipped: int = 0
    """Records skipped: invalid ones, and other groups' records of a newer version."""
    settings: Settings | None = None
    """The group's settings: the latest settings record (spec §3.3), None before one."""

    def partition(self, stream: str, partition: int) -> PartitionShare:
        key = (stream, partition)
        ps = self.partitions.get(key)
        if ps is None:
            ps = self.partitions[key] = PartitionShare()
        return ps

    def apply_bytes(
        self, offset: int, timestamp: int, value: bytes | memoryview
    ) -> list[ShareChange]:
        """Decode and apply one share-log record (invalid ones are skipped and counted).

        Raises:
            UnsupportedShareVersion: a record of this group of a newer version; the reader
                must stop. One naming another group is skipped like an invalid one.
        """
        try:
            record = decode_share_record(value)
        except UnsupportedShareVersion:
            if share_record_group(value) == self.group:
                raise
            self.skipped += 1
            self.last_offset = max(self.last_offset, offset)
            return []
        except InvalidShareRecord:
            self.skipped += 1
            self.last_offset = max(self.last_offset, offset)
            return []
        return self.apply(offset, timestamp, record)

    def apply(self, offset: int, timestamp: int, record: ShareRecord) -> list[ShareChange]:
        """Apply a decoded record stored at ``offset`` with server time ``timestamp``."""
        if offset <= self.last_offset:
            return []
        self.last_offset = offset
        self.clock = max(self.clock, timestamp)
        if record.group != self.group:
            return []
        if isinstance(record, Settings):
            self.settings = record
            for stream, partition, start in record.starts:
                ps = self.partition(stream, partition)
                if not ps.ranges and ps.last_end == 0 and ps.spso == 0:  # untouched
                    ps.spso = start
            return []
        t = timestamp
        ps = self.partition(record.stream, record.partition)
        if isinstance(record, Claim):
            changes: list[ShareChange] = [self._claim(ps, offset, t, record)]
        else:
            changes = self._settle(ps, t, record)
        self._advance(ps)
        return changes

    def _claim(self, ps: PartitionShare, q: int, t: int, c: Claim) -> ShareChange:
        lost = ClaimLost(c.member, c.stream, c.partition, c.start)
        lease_ms, max_deliveries = c.lease_ms, c.max_deliveries
        if self.settings is not None:  # the group's settings win over the claimant's
            lease_ms, max_deliveries = self.settings.lease_ms, self.settings.max_deliveries
        created = False
        if c.start is None:  # a new range at SPEO
            end = min(c.end, ps.speo + (c.size or 0))
            if end <= ps.speo:
                return lost
            r = Range.new(ps.speo, end)
            created = True
        elif c.start == ps.speo:
            if c.size == 0:  # dead letters only: a new range has none
                return lost
            r = Range.new(c.start, c.end)
            created = True
        else:
            found = ps.ranges.get(c.start)
            if found is None:
                return lost
            r = found
        taken: list[tuple[int, int, bool]] = []
        if created:  # every offset is new: acquired, count 1 (max_deliveries >= 1)
            n = r.end - r.start
            r.counts = [1] * n
            r.states = bytearray([ACQUIRED]) * n
            r.owners = [q] * n
            taken = [(o, 1, False) for o in range(r.start, r.end)]
        else:
            room = c.size if c.size is not None else r.end - r.start
            for i in range(r.end - r.start):
                if not r.available(i, t):
                    continue
                o = r.start + i
                state = r.states[i]
                if state != AVAILABLE:  # its lease ran out
                    r.disown(i)
                if state == DEAD_PENDING or r.counts[i] >= max_deliveries:
                    r.states[i] = DEAD_PENDING
                    r.reasons.setdefault(o, "max_deliveries")
                    if o not in r.dlq_from:
                        r.dlq_from[o] = c.dlq_hw if c.dlq_hw is not None else 0
                    r.owners[i] = q
                    taken.append((o, r.counts[i], True))
                elif room > 0:
                    room -= 1
                    r.counts[i] += 1
                    r.states[i] = ACQUIRED
                    r.owners[i] = q
                    r.not_before.pop(o, None)
                    taken.append((o, r.counts[i], False))
                elif state == ACQUIRED:  # its lease ran out; not taken (size)
                    r.states[i] = AVAILABLE
        if not taken:
            return lost
        if created:
            ps.ranges[r.start] = r
            ps.last_end = r.end
        deadline = t + lease_ms * _MS
        r.leases[q] = Lease(c.member, deadline, lease_ms, len(taken))
        return Acquired(
            c.member, c.stream, c.partition, r.start, q, deadline, tuple(taken), c.start
        )

    def _settle(self, ps: PartitionShare, t: int, s: Settle) -> list[ShareChange]:
        r = ps.ranges.get(s.start)
        lease = None if r is None else r.leases.get(s.lease)
        if r is None or lease is None or lease.holder != s.member:
            return [Fenced(s.member, s)]
        states, owners, q = r.states, r.owners, s.lease
        lost_acked: list[int] = []
        lost_rejected: list[int] = []
        lost_released: list[tuple[int, int]] = []

        def mine(o: int, state: int) -> bool:
            return owners[o - r.start] == q and states[o - r.start] == state

        for a, b in s.acked:
            if self._ack_run(ps, r, lease, q, max(a, r.start), min(b, r.end)):
                continue
            for o in range(max(a, r.start), min(b, r.end)):
                if mine(o, ACQUIRED):
                    states[o - r.start] = ACKED
                    r.unfinished -= 1
                    r.disown(o - r.start)
                    ps.acked_total += 1
                elif owners[o - r.start] != q:
                    lost_acked.append(o)
        for o, not_before in s.released:
            if not r.start <= o < r.end:
                continue
            if mine(o, ACQUIRED):
                states[o - r.start] = AVAILABLE
                r.disown(o - r.start)
                if not_before > 0:
                    r.not_before[o] = not_before
            elif owners[o - r.start] != q:
                lost_released.append((o, not_before))
        returned: list[int] = []
        for a, b in s.returned:
            for o in range(max(a, r.start), min(b, r.end)):
                if mine(o, ACQUIRED):
                    states[o - r.start] = AVAILABLE
                    r.counts[o - r.start] -= 1
                    r.disown(o - r.start)
                    returned.append(o)
        for a, b in s.rejected:
            for o in range(max(a, r.start), min(b, r.end)):
                if mine(o, ACQUIRED):
                    states[o - r.start] = DEAD_PENDING
                    r.dlq_from[o] = s.dlq_hw if s.dlq_hw is not None else 0
                    r.reasons[o] = "rejected"
                elif owners[o - r.start] != q:
                    lost_rejected.append(o)
        for a, b in s.dead:
            for o in range(max(a, r.start), min(b, r.end)):
                if mine(o, DEAD_PENDING):
                    states[o - r.start] = DEAD
                    r.unfinished -= 1
                    r.disown(o - r.start)
                    r.dlq_from.pop(o, None)
                    r.reasons.pop(o, None)
                    ps.dead_total += 1
        for a, b in s.renew:  # per message: a deadline of its own, if it has not run out
            for o in range(max(a, r.start), min(b, r.end)):
                if mine(o, ACQUIRED) and t <= r.deadline_at(o - r.start):
                    r.renewed[o] = t + lease.lease_ms * _MS
        if s.extend and t <= lease.deadline:
            lease.deadline = t + lease.lease_ms * _MS
        changes: list[ShareChange] = []
        if returned:
            changes.append(Returned(s.member, s.stream, s.partition, tuple(returned)))
        if lost_acked or lost_rejected or lost_released:
            lost = Settle(
                s.group,
                s.member,
                s.stream,
                s.partition,
                s.start,
                s.lease,
                acked=tuple(runs_of(lost_acked)),
                released=tuple(lost_released),
                rejected=tuple(runs_of(lost_rejected)),
            )
            changes.append(Fenced(s.member, lost))
        return changes

    @staticmethod
    def _ack_run(ps: PartitionShare, r: Range, lease: Lease, q: int, lo: int, hi: int) -> bool:
        """Ack ``[lo, hi)`` at once if lease ``q`` holds every offset of it ``acquired`` (the
        usual settle): the same result as offset by offset, in slice operations. False (and
        nothing changed) otherwise: the caller goes offset by offset."""
        n = hi - lo
        if n <= 0:
            return True  # nothing of the run is in this range
        i, j = lo - r.start, hi - r.start
        if r.states[i:j] != _ACQUIRED_BYTE * n or r.owners[i:j] != [q] * n:
            return False
        r.states[i:j] = _ACKED_BYTE * n
        r.owners[i:j] = [-1] * n
        if r.renewed:
            for o in range(lo, hi):
                r.renewed.pop(o, None)
        r.unfinished -= n
        ps.acked_total += n
        lease.held -= n
        if lease.held <= 0:
            del r.leases[q]
        return True

    def _advance(self, ps: PartitionShare) -> None:
        while True:
            r = ps.ranges.get(ps.spso)
            if r is None or r.unfinished > 0:
                return
            del ps.ranges[r.start]
            ps.spso = r.end

    # -- questions a member asks ----------------------------------------------------------

    def _range(self, stream: str, partition: int, start: int) -> Range | None:
        ps = self.partitions.get((stream, partition))
        return None if ps is None else ps.ranges.get(start)

    def holds(self, stream: str, partition: int, start: int, lease: int, member: str) -> bool:
        """Whether ``member`` still holds ``lease`` (on offsets of the range at ``start``)."""
        r = self._range(stream, partition, start)
        held = None if r is None else r.leases.get(lease)
        return held is not None and held.holder == member

    def deadline_of(self, stream: str, partition: int, start: int, lease: int) -> int | None:
        """The lease's deadline (log ns), or None if the lease holds nothing any more."""
        r = self._range(stream, partition, start)
        held = None if r is None else r.leases.get(lease)
        return None if held is None else held.deadline

    def claimable(self, stream: str, partition: int, t: int) -> Iterator[Range]:
        """Ranges with offsets available at log time ``t``, oldest first."""
        ps = self.partitions.get((stream, partition))
        if ps is None:
            return
        for r in ps.ranges.values():
            if r.any_available(t):
                yield r

    def snapshot(self) -> dict[str, object]:
        """A comparable plain-data picture of the whole state (for tests and the CLI)."""
        out: dict[str, object] = {}
        if self.settings is not None:
            out["settings"] = [self.settings.lease_ms, self.settings.max_deliveries]
        for (stream, p), ps in sorted(self.partitions.items()):
            out[f"{stream}/{p}"] = {
                "spso": ps.spso,
                "speo": ps.speo,
                "acked": ps.acked_total,
                "dead": ps.dead_total,
                "ranges": [
                    [
                        r.start,
                        r.end,
                        sorted(
                            (q, x.holder, x.deadline, x.lease_ms, x.held)
                            for q, x in r.leases.items()
                        ),
                        list(r.owners),
                        sorted(r.renewed.items()),
                        list(r.counts),
                        bytes(r.states).hex(),
                        sorted(r.not_before.items()),
                        sorted(r.dlq_from.items()),
                        sorted(r.reasons.items()),
                    ]
                    for r in ps.ranges.values()
                ],
            }
        return out
