"""A share-group member's values (spec/share-groups.md §5): its settings, what it may hand
out, what it holds, and the outcomes waiting to be sent. Pure; used by
:mod:`jetsdk.share.member`.
"""

from __future__ import annotations

import attrs

__all__ = ["Handout", "HeldLease", "InFlight", "LeaseKey", "LostOutcome", "Outcomes", "ShareConfig"]

LeaseKey = tuple[str, int, int, int]
"""(stream, partition, range start, lease id)."""


@attrs.frozen
class ShareConfig:
    """A member's settings."""

    group: str
    member: str
    partitions: tuple[tuple[str, int], ...]
    """The consumed (stream, partition) pairs."""
    ack_deadline: float = 30.0
    """Lease length, seconds."""
    max_deliveries: int = 5
    batch: int = 200
    """Most offsets in a new range."""
    max_held: int = 4
    """Most claims in flight plus leases with offsets not yet handed out."""
    shed_slack: float = 1.5
    """Give back offsets the application would take later than this many times the time
    left before the lease's stop point, at its measured rate (spec §5, "Pacing")."""
    margin: float | None = None
    """Stop handing out this long before the deadline (default min(1 s, ack_deadline / 10))."""
    claim_timeout: float = 5.0
    """Forget a claim not seen in the log after this long (it was lost) and claim again."""

    @property
    def lease_ms(self) -> int:
        return max(1, int(self.ack_deadline * 1000))

    @property
    def stop_margin(self) -> float:
        return self.margin if self.margin is not None else min(1.0, self.ack_deadline / 10)


@attrs.define
class Handout:
    """One offset the member may now deliver (or must dead-letter, if ``dead_pending``).

    A value never changed after it is made; not ``frozen`` only because a frozen class costs
    about 2.5 us more per message to create (one per message handed out)."""

    stream: str
    partition: int
    offset: int
    delivery_count: int
    lease: LeaseKey
    dead_pending: bool
    dlq_from: int
    reason: str = ""
    """For a dead letter: ``max_deliveries`` or ``rejected``."""


@attrs.frozen
class LostOutcome:
    """An outcome the share log did not apply: the lease had moved on (spec §8)."""

    stream: str
    partition: int
    offset: int
    kind: str
    """``ack``, ``nack`` or ``reject``."""


@attrs.define(eq=False)
class HeldLease:
    """A lease the member won and its local progress."""

    key: LeaseKey
    deadline: int
    waiting: list[Handout]
    """Acquired offsets not yet handed out, in offset order."""
    dead: list[Handout] = attrs.field(factory=list)
    """``dead_pending`` offsets whose dead letters are still to be written."""
    out: set[int] = attrs.field(factory=set)
    """Handed out and not yet settled locally."""


@attrs.define(eq=False)
class InFlight:
    stream: str
    partition: int
    start: int | None
    size: int
    sent: float


@attrs.define(eq=False)
class Outcomes:
    acked: set[int] = attrs.field(factory=set)
    released: dict[int, int] = attrs.field(factory=dict)
    rejected: set[int] = attrs.field(factory=set)
    dead: set[int] = attrs.field(factory=set)
    returned: set[int] = attrs.field(factory=set)
    renew: set[int] = attrs.field(factory=set)
    extend: bool = False
    dlq_hw: int | None = None

    def empty(self) -> bool:
        return (
            not (self.acked or self.released or self.rejected or self.dead or self.returned)
            and not self.renew
            and not self.extend
        )

    def size(self) -> int:
        return (
            len(self.acked)
            + len(self.released)
            + len(self.rejected)
            + len(self.dead)
            + len(self.returned)
            + len(self.renew)
        )
