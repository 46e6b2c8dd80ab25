"""The cyclic garbage collector paused while a burst of role changes is applied.

A failover hands a survivor's replicas their new roles at once (at 3,000 RF 3 partitions,
1,000 of them per survivor; at 10,000, about 3,300): each starts a fetcher or a leader's
tasks, and the allocations of a thousand role changes set off the collector again and
again while they run. Timed with ``gc.callbacks`` on the survivors of a 3,000-partition
failover (load 5): 8-10 young collections and one middle one, 0.43-0.52 s of a burst that
took 0.68-1.06 s from its first role change to its last; the objects they walk are mostly
the new roles' (fetchers, leader states, tasks), which live as long as the role. As when
thousands of partitions open (:mod:`jetserver.gc_pause`), the collector is off while the
burst runs and what exists is frozen after it.

:class:`RoleBurst` counts the appliers handed an assignment by one reconciliation; the
collector resumes when each has applied it, or after :data:`ROLE_BURST_PAUSE_MAX_S` (an
applier retrying or a replica closed meanwhile never counts). Cyclic garbage made by the
burst (ended roles' tasks) is frozen with the rest and goes when partitions close for good
(``release_frozen``), as for an opening.

Task safety: the event loop.
"""

from __future__ import annotations

import anyio
import attrs

from jetserver.gc_pause import FREEZE_MIN_PARTITIONS, collector_paused

__all__ = ["ROLE_BURST_MIN", "ROLE_BURST_PAUSE_MAX_S", "RoleBurst"]

ROLE_BURST_MIN = FREEZE_MIN_PARTITIONS
"""Assignments handed over at once from which the collector is paused while they apply."""
ROLE_BURST_PAUSE_MAX_S = 10.0
"""The collector resumes at the latest this long after the burst began."""


@attrs.define(eq=False)
class RoleBurst:
    """Role changes handed to ``left`` appliers at once (module docstring)."""

    left: int
    """Appliers that have not applied their assignment yet."""
    done: anyio.Event = attrs.field(factory=anyio.Event)
    """Set when ``left`` reaches 0."""

    def applied(self) -> None:
        """One applier applied its assignment (or left the burst for a later one)."""
        self.left -= 1
        if self.left <= 0:
            self.done.set()

    async def collector_paused(self, max_s: float = ROLE_BURST_PAUSE_MAX_S) -> None:
        """Run as a task: the collector paused (then what exists frozen) until every
        applier applied its assignment or ``max_s`` passed."""
        with collector_paused(max(self.left, 0)), anyio.move_on_after(max_s):
            await self.done.wait()
