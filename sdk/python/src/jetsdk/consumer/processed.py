"""What a consumer has processed of one partition run: delivery and acknowledgement
bookkeeping (pure).

One :class:`ProcessedOffsets` lives for one run of a partition (from an assignment or a seek to
the next); a message handed out carries a reference to it, so an ack that arrives after the
partition moved on finds a dead tracker and does nothing.

Two modes:

- **auto** (default): a message counts as processed once the application asks for more
  (the next ``__anext__``/``fetch`` call, :meth:`ProcessedOffsets.settle`). Nothing is stored
  per message.
- **manual**: each message must be acknowledged (``msg.ack()``), in any order. The first
  un-acknowledged offset is what gets committed; the acknowledged ones above it are
  remembered in the commit's progress (:mod:`jetsdk.consumer.progress`) so a later owner
  skips them.

Either way :meth:`ProcessedOffsets.committable` is the offset to commit and
:meth:`ProcessedOffsets.progress` the full state written with it.

Not thread-safe: the consumer's event-loop thread owns it (acks from other threads are
brought there first).
"""

from __future__ import annotations

from collections import deque

import attrs

from jetsdk.consumer.progress import PendingRange, Progress, ranges_with_counts

__all__ = ["ProcessedOffsets"]


@attrs.define(eq=False)
class ProcessedOffsets:
    """Delivery state of one partition (see the module docstring).

    Args:
        start: the first offset to hand out.
        manual: per-message acks (True) or processed-on-next-call (False).
        inherited: what the commit this run started from says (default: nothing beyond
            ``start``).
    """

    start: int
    manual: bool = False
    inherited: Progress | None = None
    position: int = attrs.field(init=False)
    """Next offset to hand out or skip."""
    alive: bool = attrs.field(default=True, init=False)
    """False once the run ended (revoked, lost, seek): acks are ignored."""
    _safe: int = attrs.field(init=False)
    _unacked: dict[int, int] = attrs.field(factory=dict, init=False)
    _order: deque[int] = attrs.field(factory=deque, init=False)
    _plain_from: int = attrs.field(init=False)

    def __attrs_post_init__(self) -> None:
        if self.start < 0:
            raise ValueError("start must be >= 0")
        if self.inherited is None or self.inherited.committed != self.start:
            self.inherited = Progress(self.start, self.start)
        self.position = self.start
        self._safe = self.start
        # At and above this offset nothing is inherited: every record is a first delivery.
        self._plain_from = self.inherited.frontier

    # -- handing out ---------------------------------------------------------------------

    def is_plain(self, offset: int) -> bool:
        """True if records from ``offset`` on are first deliveries (the fast path)."""
        return offset >= self._plain_from

    def admit(self, offset: int) -> int:
        """A record at ``offset`` (>= position) is about to be handed out: its delivery count,
        or 0 if it was processed before (skip it). Moves the position past it."""
        self.position = offset + 1
        if offset >= self._plain_from:
            return 1
        assert self.inherited is not None
        prior = self.inherited.prior_deliveries(offset)
        return 0 if prior is None else prior + 1

    def handed_out(self, offset: int, count: int = 1) -> None:
        """Record that the message at ``offset`` (admitted) went to the application."""
        if offset + 1 > self.position:
            self.position = offset + 1
        if self.manual:
            self._unacked[offset] = count
            self._order.append(offset)

    def advance(self, position: int) -> None:
        """The application got everything below ``position`` (auto mode's batch path)."""
        if position > self.position:
            self.position = position

    def take_back(self, offset: int) -> int:
        """What was handed out from ``offset`` on did not reach the application (the sync
        API gives its buffer back): the position returns to ``offset`` and those messages
        are neither processed nor, with manual acks, waiting for an ack. Returns how many
        un-acked messages that removed (manual mode; 0 in auto mode)."""
        if offset >= self.position:
            return 0
        self.position = offset
        self._safe = min(self._safe, offset)
        removed = 0
        order, unacked = self._order, self._unacked
        while order and order[-1] >= offset:
            if unacked.pop(order.pop(), None) is not None:
                removed += 1
        return removed

    def settle(self) -> None:
        """Auto mode: everything handed out so far is processed (the app asked for more)."""
        self._safe = self.position

    def settle_to(self, position: int) -> None:
        """Auto mode: everything handed out below ``position`` is processed (the sync API
        started a batch that was handed out when the position was there)."""
        if position > self._safe:
            self._safe = min(position, self.position)

    def ack(self, offset: int) -> bool:
        """Acknowledge ``offset``; False if it was not waiting for an ack (or the run ended)."""
        if not self.alive or self._unacked.pop(offset, None) is None:
            return False
        order, unacked = self._order, self._unacked
        while order and order[0] not in unacked:
            order.popleft()
        return True

    # -- state ---------------------------------------------------------------------------

    @property
    def unacked(self) -> int:
        """Messages handed out and not acknowledged (manual mode; 0 in auto mode)."""
        return len(self._unacked)

    @property
    def window(self) -> int:
        """Manual mode: entries kept from the first un-acknowledged message on (memory)."""
        return len(self._order)

    @property
    def drained(self) -> bool:
        """True when nothing handed out is still being processed."""
        return not self._unacked if self.manual else self._safe >= self.position

    def committable(self) -> int:
        """The offset to commit: every record below it is processed."""
        assert self.inherited is not None
        if self.manual:
            if self._order:
                return self._order[0]
            return self.inherited.next_unprocessed(self.position)
        if self._safe < self.position:
            return self._safe
        return self.inherited.next_unprocessed(self.position)

    def finish(self) -> int:
        """Auto mode at a clean close: everything handed out is processed; the offset."""
        if not self.manual:
            self.settle()
        return self.committable()

    def progress(self, metadata: str = "") -> Progress:
        """The full state to commit (offset, processed records above it, pending counts)."""
        inherited = self.inherited
        assert inherited is not None
        committed = self.committable()
        own: list[PendingRange]
        if self.manual:
            own = ranges_with_counts(sorted(self._unacked.items()))
        elif self._safe < self.position:
            own = _in_flight(inherited, self._safe, self.position)
        else:
            own = []
        later = inherited.pending_from(self.position)
        frontier = max(self.position, inherited.frontier)
        pending = tuple(r for r in [*own, *later] if r[1] > committed)
        return Progress(committed, frontier, pending, metadata)


def _in_flight(inherited: Progress, start: int, end: int) -> list[PendingRange]:
    """Ranges for [start, end) handed out once more: inherited counts + 1, else 1."""
    out: list[PendingRange] = []
    cursor = start
    for s, e, n in inherited.pending:
        if e <= cursor or s >= end:
            continue
        if s > cursor:
            out.append((cursor, s, 1))
        out.append((max(s, cursor), min(e, end), n + 1))
        cursor = min(e, end)
    if cursor < end:
        out.append((cursor, end, 1))
    return out
