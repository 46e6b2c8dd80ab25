"""Safety and liveness checks for a simulated consumer group (used by simulation.py).

Each checker watches one property and raises :class:`InvariantViolation` when it breaks:

- :class:`CommitChecker`: a committed offset never moves backwards, and every offset below a
  committed one had been processed when the commit was stored (no commit skips data, not
  even a late one from a fenced member);
- :class:`ExclusiveProcessing`: no two members (or two ownerships of one member) process one
  partition in overlapping time spans;
- :class:`ExpiryBound`: a crashed member is out of the group, and its partitions handed on,
  within the session timeout plus one heartbeat interval (plus append delays) of its crash,
  whenever another member kept heartbeating;
- :func:`check_at_least_once`: every produced message was processed at least once;
- :func:`check_settled`: after the faults stop, the group settles: every partition has exactly
  one owner, a live member that is its target and is consuming it, and every member's view
  equals the reference state.

Pure bookkeeping; not thread-safe.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

import attrs

from jetsdk.group.changes import Change, CommitAccepted, PartitionAcquired, PartitionReleased
from jetsdk.group.state import GroupState
from jetsdk.group.stream_partition import StreamPartition

__all__ = [
    "CommitChecker",
    "ExclusiveProcessing",
    "ExpiryBound",
    "InvariantViolation",
    "ProcessedLedger",
    "check_at_least_once",
    "check_settled",
]


class InvariantViolation(AssertionError):
    """A simulated run broke a safety or liveness property."""


@attrs.define(eq=False)
class ProcessedLedger:
    """Which offsets of each partition have been processed (by anyone)."""

    _done: dict[StreamPartition, set[int]] = attrs.field(factory=dict)
    _prefix: dict[StreamPartition, int] = attrs.field(factory=dict)

    def add(self, partition: StreamPartition, offset: int) -> None:
        """Record that ``offset`` of ``partition`` was processed."""
        done = self._done.setdefault(partition, set())
        done.add(offset)
        prefix = self._prefix.get(partition, 0)
        while prefix in done:
            prefix += 1
        self._prefix[partition] = prefix

    def prefix(self, partition: StreamPartition) -> int:
        """Length of the processed prefix: every offset below it was processed."""
        return self._prefix.get(partition, 0)

    def count(self) -> int:
        """Distinct (partition, offset) pairs processed."""
        return sum(len(v) for v in self._done.values())


@attrs.define(eq=False)
class CommitChecker:
    """No regression, and no commit above what has been processed."""

    ledger: ProcessedLedger
    _committed: dict[StreamPartition, int] = attrs.field(factory=dict)
    accepted: int = 0
    """Commits accepted so far."""

    def observe(self, changes: Iterable[Change], *, at: float) -> None:
        """Check the changes of one reference apply at simulated time ``at``."""
        for change in changes:
            if not isinstance(change, CommitAccepted):
                continue
            p, offset = change.partition, change.offset
            before = self._committed.get(p)
            if before is not None and offset < before:
                raise InvariantViolation(f"t={at:.3f}: offset of {p} moved back {before}->{offset}")
            if offset > self.ledger.prefix(p):
                raise InvariantViolation(
                    f"t={at:.3f}: {change.member} committed {p}@{offset} but only "
                    f"{self.ledger.prefix(p)} leading offsets were processed"
                )
            self._committed[p] = offset
            self.accepted += 1


@attrs.define(eq=False)
class ExclusiveProcessing:
    """Processing spans of different ownerships of one partition never overlap."""

    _spans: dict[tuple[StreamPartition, str, int], list[float]] = attrs.field(factory=dict)

    def observe(self, partition: StreamPartition, owner: str, generation: int, at: float) -> None:
        """``owner`` (a process) processed a record of ``partition`` at time ``at``."""
        key = (partition, owner, generation)
        span = self._spans.get(key)
        if span is None:
            self._spans[key] = [at, at]
        else:
            span[1] = max(span[1], at)

    def check(self) -> None:
        """Raise if two spans of one partition overlap."""
        by_partition: dict[StreamPartition, list[tuple[float, float, str, int]]] = {}
        for (p, owner, gen), (first, last) in self._spans.items():
            by_partition.setdefault(p, []).append((first, last, owner, gen))
        for p, spans in by_partition.items():
            spans.sort()
            end, holder = spans[0][1], spans[0][2:]
            for first, last, owner, gen in spans[1:]:
                if first <= end:
                    raise InvariantViolation(
                        f"{p}: {owner} (generation {gen}) processed from t={first:.3f} while "
                        f"{holder[0]} (generation {holder[1]}) did until t={end:.3f}"
                    )
                if last > end:
                    end, holder = last, (owner, gen)


@attrs.define(eq=False)
class ExpiryBound:
    """A crashed member's partitions move within the session timeout + one heartbeat.

    "Gone" means the member is no longer in the group (expired, or replaced by a restart with
    the same instance id) and owns no partition. The bound, measured from the crash:
    session timeout + heartbeat interval + 2 * the largest append delay (its last record may
    land one delay after the crash, the record that expires it one delay after it is sent).
    Also checked at every expiry: partitions freed by it go to their new target at once.
    """

    session_timeout: float
    heartbeat_interval: float
    max_append_delay: float
    _crashed: dict[str, float] = attrs.field(factory=dict)
    _gone: dict[str, float] = attrs.field(factory=dict)
    checked: int = 0
    """Crashes whose hand-over time was checked against the bound."""

    def crashed(self, member: str, at: float) -> None:
        """``member``'s process died abruptly at ``at``."""
        self._crashed[member] = at

    def observe(self, changes: Sequence[Change], state: GroupState, *, at: float) -> None:
        """Check one reference apply at time ``at``."""
        released: set[StreamPartition] = set()
        for change in changes:
            if isinstance(change, PartitionReleased) and change.reason == "expired":
                released.add(change.partition)
        acquired = {c.partition for c in changes if isinstance(c, PartitionAcquired)}
        for p in released - acquired:
            target = state.target(p)
            info = None if target is None else state.member(target)
            if info is not None and not info.parked:
                raise InvariantViolation(f"t={at:.3f}: {p} freed by expiry but not handed on")
        for member in self._crashed:
            gone = state.member(member) is None and not state.owned_by(member)
            if gone and member not in self._gone:
                self._gone[member] = at

    @property
    def bound(self) -> float:
        """The allowed time from crash to gone."""
        return self.session_timeout + self.heartbeat_interval + 2 * self.max_append_delay

    def check(self, heartbeats_flowed: Mapping[str, bool]) -> None:
        """Check every crash; ``heartbeats_flowed[m]``: another member heartbeated freely.

        A crash is only held to the bound when, across its deadline window, some other member
        ran without pauses and no append was dropped (the caller decides); otherwise nothing
        drives the log clock and the bound does not apply.
        """
        for member, crash_at in self._crashed.items():
            if not heartbeats_flowed.get(member, False):
                continue
            gone_at = self._gone.get(member)
            if gone_at is None:
                raise InvariantViolation(f"crashed member {member} still holds its place")
            if gone_at - crash_at > self.bound + 1e-6:
                raise InvariantViolation(
                    f"member {member} crashed at t={crash_at:.3f}, its partitions moved at "
                    f"t={gone_at:.3f}: more than {self.bound:.3f}s"
                )
            self.checked += 1

    def deadline_window(self, member: str) -> tuple[float, float] | None:
        """The span in which another member must heartbeat for the bound to apply."""
        crash_at = self._crashed.get(member)
        if crash_at is None:
            return None
        return crash_at + self.session_timeout - self.heartbeat_interval, crash_at + self.bound


def check_at_least_once(produced: Mapping[StreamPartition, int], ledger: ProcessedLedger) -> None:
    """Every offset below ``produced[p]`` of every partition was processed."""
    for p, count in sorted(produced.items()):
        if ledger.prefix(p) < count:
            raise InvariantViolation(
                f"{p}: {count} messages produced, only the first {ledger.prefix(p)} processed"
            )


def check_settled(
    reference: GroupState,
    live: Mapping[str, set[StreamPartition]],
    views: Mapping[str, GroupState],
) -> None:
    """The final state: exactly one live, consuming owner per partition; equal views.

    Args:
        reference: the state built by applying every record as it was stored.
        live: member id of each live process -> the partitions it is consuming.
        views: member id -> that member's view, caught up to the end of the log.
    """
    if not reference.is_settled():
        raise InvariantViolation("the group did not settle (ownership differs from targets)")
    expected = {m: set(reference.owned_by(m)) for m in live}
    for member, info in ((m.member, m) for m in reference.members()):
        if member not in live:
            raise InvariantViolation(f"member {member} is in the group but its process is gone")
        if info.parked:
            raise InvariantViolation(f"live member {member} is parked")
    for p in reference.partitions():
        owner = reference.ownership(p)
        if owner is None or owner.owner not in live:
            raise InvariantViolation(f"{p} has no live owner ({owner})")
    for member, consuming in live.items():
        if consuming != expected[member]:
            raise InvariantViolation(
                f"{member} consumes {sorted(map(str, consuming))}, owns "
                f"{sorted(map(str, expected[member]))}"
            )
    snapshot = reference.snapshot()
    for member, view in views.items():
        if view.snapshot() != snapshot:
            raise InvariantViolation(f"{member}'s view differs from the reference state")
