"""The cyclic garbage collector paused while a burst of role changes is applied.

A failover hands a survivor's replicas their new roles at once (at 3,000 RF 3 partitions,
1,000 of them per survivor; at 10,000, about 3,300): each starts a fetcher or a leader's
tasks, and the allocations of a thousand role changes set off the collector again and
again while they run. Timed with ``gc.callbacks`` on the survivors of a 3,000-partition
failover (load 5): 8-10 young collections and one middle one, 0.43-0.52 s of a burst that
took 0.68-1.06 s from its first role change to its last; the objects they walk are mostly
the new roles' (fetchers, leader states, tasks), which live as long as the role. As when
thousands of partitions open (:mod:`jetserver.broker.gc_pause`), the collector is off while the
burst runs and what exists is frozen after it.

:class:`RoleBurst` counts the appliers handed an assignment by one reconciliation; the
collector resumes when each has applied it, or after :data:`ROLE_BURST_PAUSE_MAX_S` (an
applier retrying or a replica closed meanwhile never counts). Cyclic garbage made by the
burst (ended roles' tasks) is frozen with the rest and goes when partitions close for good
(``release_frozen``), as for an opening. The collector is turned off in the turn that hands
the burst out (:meth:`RoleBurst.pause_collector`), before any of its role changes runs: the
appliers woken by that turn run before the burst's task first wakes, often every one of
them in a single turn, which until 2026-11-29 ran with the collector on (a survivor's
3,000-partition failover spent 1.22 s at one line of a new leader's start, one sample
stack, in py-spy's record of the burst).

While it waits, the task also measures how late the event loop wakes it (ticks of
:data:`STALL_TICK_S`): the longest stall of the loop during the burst, handed to
``on_stall`` at its end (the role summary logs it: a loop held for seconds is what keeps
requests waiting during a failover, see :mod:`jetserver.broker.role_turns`).

Task safety: the event loop.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable

import anyio
import attrs

from jetserver.broker.gc_pause import FREEZE_MIN_PARTITIONS, collector_paused

__all__ = ["ROLE_BURST_MIN", "ROLE_BURST_PAUSE_MAX_S", "STALL_TICK_S", "RoleBurst"]

ROLE_BURST_MIN = FREEZE_MIN_PARTITIONS
"""Assignments handed over at once from which the collector is paused while they apply."""
ROLE_BURST_PAUSE_MAX_S = 10.0
"""The collector resumes at the latest this long after the burst began."""
STALL_TICK_S = 0.02
"""Period of the loop-stall measurement while a burst applies."""


@attrs.define(eq=False)
class RoleBurst:
    """Role changes handed to ``left`` appliers at once (module docstring)."""

    left: int
    """Appliers that have not applied their assignment yet."""
    done: anyio.Event = attrs.field(factory=anyio.Event)
    """Set when ``left`` reaches 0."""
    on_stall: Callable[[float], None] | None = None
    held: int = 0
    """The partitions the server holds (a few role changes on a server holding many pause
    the collector too, then freeze what they made: see gc_pause)."""
    """Called at the end with the longest stall of the loop seen meanwhile (seconds)."""
    longest_stall_s: float = 0.0
    """The longest the loop woke the burst's task late, so far."""
    created_at: float = attrs.field(factory=anyio.current_time)
    """When the burst was handed out (the reconcile's turn): its task's first wake-up is
    late by as long as the turn that runs role changes before it lasts."""
    done_at: float | None = None
    """When ``left`` reached 0."""
    _resume: Callable[[], None] | None = None
    """Ends the collector's pause (set while it lasts)."""

    def pause_collector(self) -> None:
        """Turn the collector off now (once; see the module docstring); the burst's task
        (:meth:`collector_paused`) or :meth:`resume_collector` turns it on again."""
        if self._resume is None:
            stack = contextlib.ExitStack()
            stack.enter_context(collector_paused(max(self.left, 0), self.held))
            self._resume = stack.close

    def resume_collector(self) -> None:
        """End the collector's pause, if it lasts (then freezes what exists, as
        :func:`~jetserver.broker.gc_pause.collector_paused` does)."""
        resume, self._resume = self._resume, None
        if resume is not None:
            resume()

    def applied(self) -> None:
        """One applier applied its assignment (or left the burst for a later one)."""
        self.left -= 1
        if self.left <= 0 and not self.done.is_set():
            self.done_at = anyio.current_time()
            self.done.set()

    async def collector_paused(self, max_s: float = ROLE_BURST_PAUSE_MAX_S) -> None:
        """Run as a task: the collector paused (then what exists frozen) until every
        applier applied its assignment or ``max_s`` passed."""
        due = self.created_at  # when the task should have run (then each tick's end)
        self.pause_collector()  # if the turn that handed the burst out did not
        try:
            with anyio.move_on_after(max_s):
                while True:
                    woke = anyio.current_time()
                    if self.done_at is not None:
                        due = min(due, self.done_at)
                    self.longest_stall_s = max(self.longest_stall_s, woke - due)
                    if self.done.is_set():
                        break
                    due = woke + STALL_TICK_S
                    with anyio.move_on_after(STALL_TICK_S):
                        await self.done.wait()
        finally:
            self.resume_collector()
            if self.on_stall is not None:
                self.on_stall(self.longest_stall_s)
