"""One ISR check per server: a single task sweeps the leaders this server holds.

Every leader replica registers here while it leads (:meth:`IsrSweep.add`) and says when
its ISR must be looked at next (:meth:`IsrLeader.isr_check`: at once after a fetch that
may expand the ISR, an interval while a proposal is unresolved, else when a follower could
first lag). The sweep keeps those times in one heap and, when the earliest is due, checks
every leader due then, in one loop turn; the proposals of a round go to the control plane
together (:meth:`ControlPlane.propose_isrs`, one UpdateIsrs entry) and their outcomes are
handed back to their leaders (:meth:`IsrLeader.isr_answered`) by one task per round.

Until 2026-11-30 each leader ran its own ISR task: after a kill -9 at 10,000 partitions a
survivor's 1,700 new leaders each woke every 0.25 s while their proposals were pending,
and each proposal waited in the controller's queue as its own task.

A leader has at most one proposal in flight (its core holds it pending); a leader whose
role ended (or whose replica stopped) meanwhile was removed, and its answer is dropped.

Task safety: one event loop; :meth:`run` is the only sweeper.
"""

from __future__ import annotations

import heapq
import itertools
import logging
from typing import Protocol

import anyio
import attrs

from jetserver.infra.lazy_event import LazyEvent
from jetserver.replication.config import DEFAULT_ISR_CHECK_INTERVAL_S
from jetserver.replication.control import ControlPlane, IsrChange

log = logging.getLogger(__name__)

SWEEP_SLACK_S = 0.02
"""A round also checks the leaders due within this much after it: a failover's thousands of
new leaders, due a few microseconds apart, are checked in a few rounds, not one each (a
check that comes early only says when to look again)."""


class IsrLeader(Protocol):
    """A leader replica as the sweep sees it (``broker.roles.RoleDriver``)."""

    def isr_check(self, now: float) -> IsrChange | float | None:
        """The ISR change to propose now, else the seconds until the next check, or None if
        it leads no more."""
        ...

    async def isr_answered(self, change: IsrChange, accepted: bool) -> float | None:
        """``change`` was applied (``accepted``) or not: the seconds until the next check,
        or None if the leadership that proposed it ended."""
        ...


@attrs.define(eq=False)
class _Asking:
    """A leader's proposal in flight."""

    change: IsrChange
    woken: bool = False
    """A fetch asked for a check meanwhile."""


@attrs.define(eq=False)
class IsrSweep:
    """The heap of the leaders' next ISR checks (module docstring)."""

    interval_s: float = DEFAULT_ISR_CHECK_INTERVAL_S
    """The pause after a refused or unanswered proposal."""
    checks: int = 0
    """Leaders checked (for tests and metrics)."""
    rounds: int = 0
    """Sweeps that checked at least one leader."""
    _due: dict[IsrLeader, tuple[float, int]] = attrs.field(factory=dict)
    """Each registered leader not waiting for an answer: when it is due (and its heap
    entry's sequence number; older entries are stale)."""
    _asking: dict[IsrLeader, _Asking] = attrs.field(factory=dict)
    """Leaders with a proposal in flight."""
    _hold: dict[IsrLeader, float] = attrs.field(factory=dict)
    """Leaders whose last proposal was refused -> not checked again before this time."""
    _heap: list[tuple[float, int, IsrLeader]] = attrs.field(factory=list)
    _seq: itertools.count[int] = attrs.field(factory=itertools.count)
    _wake: LazyEvent = attrs.field(factory=LazyEvent)
    _next: float | None = None
    """When the sweep task's wait ends (None: it waits for a wake-up only)."""

    def __len__(self) -> int:
        return len(self._due) + len(self._asking)

    def add(self, leader: IsrLeader, now: float, delay_s: float) -> None:
        """``leader`` leads: check it ``delay_s`` from ``now``."""
        self._asking.pop(leader, None)
        self._hold.pop(leader, None)
        self._schedule(leader, now + delay_s)

    def remove(self, leader: IsrLeader) -> None:
        """``leader`` leads no more (an answer still in flight is dropped when it comes)."""
        self._due.pop(leader, None)
        self._asking.pop(leader, None)
        self._hold.pop(leader, None)

    def wake(self, leader: IsrLeader, now: float) -> None:
        """Check ``leader`` now (a fetch may have caught a follower up), or once its answer
        came or its pause after a refusal ended."""
        asking = self._asking.get(leader)
        if asking is not None:
            asking.woken = True
            return
        entry = self._due.get(leader)
        if entry is None:
            return  # not leading (a fetch answered while the role changes)
        at = max(now, self._hold.get(leader, now))
        if entry[0] > at:
            self._schedule(leader, at)

    def _schedule(self, leader: IsrLeader, at: float) -> None:
        seq = next(self._seq)
        self._due[leader] = (at, seq)
        heapq.heappush(self._heap, (at, seq, leader))
        if self._next is None or at < self._next:
            self._wake.set()

    def _take_due(self, now: float) -> list[IsrLeader] | float | None:
        """The leaders due at ``now`` (removed from the heap), else the seconds until the
        first one is (None: none is registered)."""
        heap, due = self._heap, self._due
        taken: list[IsrLeader] = []
        while heap:
            at, seq, leader = heap[0]
            entry = due.get(leader)
            if entry is None or entry[1] != seq:
                heapq.heappop(heap)  # stale: rescheduled or removed since
                continue
            if at > now + SWEEP_SLACK_S:
                break
            heapq.heappop(heap)
            del due[leader]
            taken.append(leader)
        if taken:
            return taken
        return heap[0][0] - now if heap else None

    async def run(self, controller: ControlPlane) -> None:
        """Sweep until cancelled: check the leaders due, propose their changes together."""
        async with anyio.create_task_group() as tg:
            while True:
                now = anyio.current_time()
                taken = self._take_due(now)
                if not isinstance(taken, list):
                    self._next = None if taken is None else now + taken
                    await self._wake.wait_within(86400.0 if taken is None else taken)
                    self._wake = LazyEvent()
                    continue
                self._next = now
                changes = self._check(taken, now)
                if changes:
                    tg.start_soon(self._ask, controller, changes)

    def _check(self, taken: list[IsrLeader], now: float) -> list[tuple[IsrLeader, IsrChange]]:
        self.rounds += 1
        self.checks += len(taken)
        changes: list[tuple[IsrLeader, IsrChange]] = []
        for leader in taken:
            self._hold.pop(leader, None)
            try:
                outcome = leader.isr_check(now)
            except Exception:
                log.exception("ISR check failed")
                outcome = self.interval_s
            if outcome is None:
                continue
            if isinstance(outcome, IsrChange):
                self._asking[leader] = _Asking(outcome)
                changes.append((leader, outcome))
            else:
                self._schedule(leader, now + outcome)
        return changes

    async def _ask(
        self, controller: ControlPlane, changes: list[tuple[IsrLeader, IsrChange]]
    ) -> None:
        """Propose one round's changes together; hand each its outcome."""
        try:
            results = await controller.propose_isrs([c for _, c in changes])
        except Exception:
            log.exception("ISR changes not proposed", extra={"changes": len(changes)})
            results = [False] * len(changes)
        for (leader, change), accepted in zip(changes, results, strict=True):
            asking = self._asking.get(leader)
            if asking is None or asking.change is not change:
                continue  # its role ended (or it leads again and asks anew) meanwhile
            try:
                after = await leader.isr_answered(change, accepted)
            except Exception:
                log.exception("ISR answer failed")
                after = self.interval_s
            if self._asking.get(leader) is not asking:
                continue  # its role ended while the answer was carried out
            del self._asking[leader]
            if after is None:
                continue
            now = anyio.current_time()
            if not accepted:
                self._hold[leader] = now + self.interval_s
                after = max(after, self.interval_s)
            self._schedule(
                leader, now + (self._hold.get(leader, now) - now if asking.woken else after)
            )
