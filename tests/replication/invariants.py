"""Invariant checkers for the replication simulation (issue 4 item 8).

Kept apart from the simulation so they state the properties on their own:

1. **No acknowledged record is lost while one ISR member survives.** When a producer gets
   a success ack for a record, every member of the metadata's ISR holds it at its offset
   (alive or not: a crashed member's disk counts), and at the end of a run the leader holds
   every acknowledged record.
2. **The high watermark never moves back** on any replica during one process lifetime
   (a restart reloads it from its checkpoint, which may lag).
3. **Replica logs are identical up to the HW.** The records below any replica's HW form one
   committed history: whenever a replica's HW passes an offset, its record there must equal
   the record every other replica committed there; a replica never truncates below its HW.
4. **Leader epochs are monotonic.** The metadata's epoch only grows; no two servers ever
   lead in the same epoch; a server's own leaderships have growing epochs; the epochs in a
   replica's log never decrease along its offsets.

Every violation raises :class:`InvariantViolation` with a description (the test prints
the seed).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Protocol

import attrs


class InvariantViolation(AssertionError):
    """A replication invariant does not hold."""


@attrs.frozen
class Rec:
    """One record of the simulated log."""

    offset: int
    """Its offset."""
    epoch: int
    """The leader epoch it was appended in."""
    value: str
    """Unique payload chosen by the producer."""


class ReplicaView(Protocol):
    """What the checkers read from a simulated replica."""

    @property
    def name(self) -> str: ...

    @property
    def records(self) -> Sequence[Rec]: ...

    @property
    def hw(self) -> int: ...


@attrs.define
class Checker:
    """Collects the history and checks every invariant as events happen."""

    committed: list[Rec] = attrs.field(factory=list)
    """The committed history: the record at each offset below the highest HW seen."""
    acked: dict[str, int] = attrs.field(factory=dict)
    """Acknowledged value -> offset."""
    leader_of_epoch: dict[int, str] = attrs.field(factory=dict)
    """Which server led each epoch."""
    last_lead_epoch: dict[str, int] = attrs.field(factory=dict)
    """The last epoch each server led."""
    metadata_epoch: int = -1
    """The highest epoch the metadata has announced."""
    checks: int = 0
    """Checks made (to show a run was not vacuous)."""

    def fail(self, message: str) -> None:
        raise InvariantViolation(message)

    # --------------------------------------------------------------- 2 and 3: the HW

    def hw_moved(self, replica: ReplicaView, old: int, new: int) -> None:
        """``replica``'s HW went from ``old`` to ``new`` within one lifetime."""
        self.checks += 1
        if new < old:
            self.fail(f"{replica.name}: HW moved back from {old} to {new}")
        records = replica.records
        if new > len(records):
            self.fail(f"{replica.name}: HW {new} beyond its LEO {len(records)}")
        for offset in range(old, new):
            self._commit(replica.name, records[offset])

    def _commit(self, name: str, rec: Rec) -> None:
        offset = rec.offset
        if offset < len(self.committed):
            if self.committed[offset] != rec:
                self.fail(
                    f"{name}: committed {rec} at {offset}, but {self.committed[offset]} was "
                    "committed there before"
                )
        elif offset == len(self.committed):
            self.committed.append(rec)
        else:
            self.fail(f"{name}: committed offset {offset} leaves a gap after {len(self.committed)}")

    def truncating(self, replica: ReplicaView, offset: int) -> None:
        """``replica`` is about to truncate its log to ``offset``."""
        self.checks += 1
        if offset < replica.hw:
            self.fail(f"{replica.name}: truncation to {offset} below its HW {replica.hw}")

    def check_log(self, replica: ReplicaView) -> None:
        """Offsets contiguous, epochs non-decreasing, the prefix below the HW committed."""
        self.checks += 1
        prev_epoch = -1
        for i, rec in enumerate(replica.records):
            if rec.offset != i:
                self.fail(f"{replica.name}: record {rec} at position {i}")
            if rec.epoch < prev_epoch:
                self.fail(f"{replica.name}: epoch {rec.epoch} at {i} after epoch {prev_epoch}")
            prev_epoch = rec.epoch
        for rec in replica.records[: replica.hw]:
            if rec.offset >= len(self.committed) or self.committed[rec.offset] != rec:
                self.fail(f"{replica.name}: {rec} below its HW {replica.hw} is not committed")

    # --------------------------------------------------------------- 1: acks

    def acknowledged(self, value: str, offset: int, isr: Iterable[ReplicaView]) -> None:
        """A producer got a success ack for ``value`` at ``offset``; ``isr`` are the
        metadata's ISR members now."""
        self.checks += 1
        if value in self.acked:
            self.fail(f"{value} acknowledged twice")
        self.acked[value] = offset
        for replica in isr:
            records = replica.records
            if offset >= len(records) or records[offset].value != value:
                have = records[offset] if offset < len(records) else None
                self.fail(
                    f"acked {value}@{offset} is not on ISR member {replica.name} (has {have})"
                )

    def final(self, leader: ReplicaView, replicas: Iterable[ReplicaView]) -> None:
        """End of run: the leader holds every acknowledged record; logs are consistent."""
        for value, offset in self.acked.items():
            records = leader.records
            if offset >= len(records) or records[offset].value != value:
                self.fail(f"acked {value}@{offset} missing on the final leader {leader.name}")
            if offset >= len(self.committed) or self.committed[offset].value != value:
                self.fail(f"acked {value}@{offset} is not in the committed history")
        for replica in replicas:
            self.check_log(replica)

    # --------------------------------------------------------------- 4: epochs

    def metadata_changed(self, epoch: int) -> None:
        """The metadata announced ``epoch``."""
        self.checks += 1
        if epoch < self.metadata_epoch:
            self.fail(f"metadata epoch went back from {self.metadata_epoch} to {epoch}")
        self.metadata_epoch = epoch

    def leading(self, name: str, epoch: int) -> None:
        """``name`` starts leading in ``epoch``."""
        self.checks += 1
        other = self.leader_of_epoch.setdefault(epoch, name)
        if other != name:
            self.fail(f"epoch {epoch} led by {other} and {name}")
        last = self.last_lead_epoch.get(name, -1)
        if epoch < last:
            self.fail(f"{name} leads epoch {epoch} after leading {last}")
        self.last_lead_epoch[name] = epoch
