"""Role changes started a few per event-loop turn, leaderships first (:class:`RoleTurns`).

A failover hands a survivor thousands of role changes at once (at 10,000 RF 3 partitions,
about 1,700 leaderships and as many followers of a new leader): the reconcile wakes every
replica's applier in one go, and most role changes run to their end without waiting for
anything, so the loop turn that runs them lasts as long as all of them together (seconds
on a loaded machine). Every request that arrived meanwhile (the metadata, a ListOffsets,
a produce to a partition that already leads, a liveness probe) waits for that turn to end,
and a request needs a few turns. Here an applier takes a turn before it applies: at most
:data:`ROLE_CHANGES_PER_TURN` start in one loop turn, the others wait for later turns,
those that make this server a partition's leader in a new epoch before the others
(:func:`takes_leadership`: they are what clients wait for; a follower of a new leader
fetches from it only once it leads; a new ISR of a partition led here already, which a
failover brings to every partition the dead server followed, can wait). The
work is the same; the loop answers between the slices and the leaderships are served
one slice after the other rather than all at the end.

Nothing is held once a role change started (it may wait for a worker thread or a log
write meanwhile): this bounds the starts per turn, not the changes in progress.

Task safety: the event loop (asyncio: the server's loop, as :mod:`replica_tasks`).
"""

from __future__ import annotations

import asyncio
import collections
from typing import TYPE_CHECKING

from jetserver.metadata.model import PartitionAssignment

if TYPE_CHECKING:
    from jetserver.broker.partition import PartitionReplica

__all__ = ["ROLE_CHANGES_PER_TURN", "RoleTurns", "takes_leadership"]

ROLE_CHANGES_PER_TURN = 32
"""Role changes started in one event-loop turn (each 0.2-1 ms of the loop's time during
a failover, so a slice lasts some tens of milliseconds at most)."""


def takes_leadership(replica: PartitionReplica, a: PartitionAssignment, me: str) -> bool:
    """True if applying ``a`` makes server ``me`` the leader of a new epoch of ``replica``'s
    partition: what clients wait for (a new ISR of the epoch it leads, which a failover
    also brings to every partition the dead server followed, is not)."""
    if a.leader != me:
        return False
    current = replica.assignment
    return current is None or current.leader_epoch != a.leader_epoch or not replica.leading


class RoleTurns:
    """Hands out the starts of role changes, ``per_turn`` per loop turn, leaders first."""

    __slots__ = ("_granted", "_leaders", "_others", "_turn_pending", "granted_turns", "per_turn")

    def __init__(self, per_turn: int = ROLE_CHANGES_PER_TURN) -> None:
        self.per_turn = per_turn
        self.granted_turns = 0
        """Loop turns in which waiting role changes were let start (tests count them)."""
        self._leaders: collections.deque[asyncio.Future[None]] = collections.deque()
        self._others: collections.deque[asyncio.Future[None]] = collections.deque()
        self._granted = 0
        """Starts granted in the current turn."""
        self._turn_pending = False

    @property
    def waiting(self) -> int:
        """Role changes waiting for a turn."""
        return len(self._leaders) + len(self._others)

    async def take(self, *, leading: bool) -> None:
        """Return when the caller may start its role change (``leading``: it makes this
        server the leader): at once if this turn has room and nobody waits, else in a
        later turn, after the leaderships that waited before it."""
        if not self._leaders and not self._others and self._granted < self.per_turn:
            self._granted += 1
            self._next_turn_soon()
            return
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        (self._leaders if leading else self._others).append(waiter)
        self._next_turn_soon()
        await waiter  # cancelled: skipped when its turn comes (it holds nothing)

    def _next_turn_soon(self) -> None:
        if not self._turn_pending:
            self._turn_pending = True
            asyncio.get_running_loop().call_soon(self._turn)

    def _turn(self) -> None:
        """At the next loop turn: a new slice; wake the next waiters (they run in the
        turn after this one, with the call that lets the next slice go)."""
        self._turn_pending = False
        self._granted = 0
        woken = 0
        while woken < self.per_turn and (self._leaders or self._others):
            waiter = (self._leaders or self._others).popleft()
            if not waiter.done():  # else cancelled while waiting
                waiter.set_result(None)
                woken += 1
        if woken:
            self.granted_turns += 1
            self._granted = woken  # they start in the next turn: count them against it
        if self._leaders or self._others or woken:
            self._next_turn_soon()
