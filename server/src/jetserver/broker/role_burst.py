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
(``release_frozen``), as for an opening. The collector is turned off in the turn that hands
the burst out (:meth:`RoleBurst.pause_collector`), before any of its role changes runs: the
appliers woken by that turn run before the burst's task first wakes, often every one of
them in a single turn, which until 2026-11-29 ran with the collector on (a survivor's
3,000-partition failover spent 1.22 s at one line of a new leader's start, one sample
stack, in py-spy's record of the burst).

**Leaders first.** The burst's new leaderships are handed out at once; the other role
changes (new followers, ISR adoptions, replicas leaving) after them, in chunks of
:data:`REST_CHUNK` (each handed out once the one before applied, or after
:data:`REST_CHUNK_MAX_S`): :meth:`RoleBurst.hand_out`. A failover's survivor was serving
its new leaderships only once its ~3,300 role changes had all applied (the last leadership
at 10,000 partitions up to 13 s after the kill against 1.7 s for the elections): the new
followers' tasks (fetchers reconciling with the other survivor, itself busy taking its
leaderships) shared every turn of the loop with the new leaders and the requests they
answer. The followers wait at most :data:`LEADERS_FIRST_MAX_S` for the leaders, and what is
left is handed out at once :data:`REST_MAX_S` after the leaderships, well within
``replica_lag_max_s``.

While it waits, the task also measures how late the event loop wakes it (ticks of
:data:`STALL_TICK_S`): the longest stall of the loop during the burst, handed to
``on_stall`` at its end (the role summary logs it: a loop held for seconds is what keeps
requests waiting during a failover, see :mod:`jetserver.broker.role_turns`).

Task safety: the event loop.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from typing import Protocol

import anyio
import attrs

from jetserver.gc_pause import FREEZE_MIN_PARTITIONS, collector_paused

__all__ = [
    "LEADERS_FIRST_MAX_S",
    "REST_CHUNK",
    "REST_CHUNK_MAX_S",
    "REST_MAX_S",
    "ROLE_BURST_MIN",
    "ROLE_BURST_PAUSE_MAX_S",
    "STALL_TICK_S",
    "RoleBurst",
]

ROLE_BURST_MIN = FREEZE_MIN_PARTITIONS
"""Assignments handed over at once from which the collector is paused while they apply."""
ROLE_BURST_PAUSE_MAX_S = 10.0
"""The collector resumes at the latest this long after the burst began."""
STALL_TICK_S = 0.02
"""Period of the loop-stall measurement while a burst applies."""
LEADERS_FIRST_MAX_S = 2.0
"""The rest of a burst is handed out at the latest this long after its new leaderships."""
REST_CHUNK = 250
"""Role changes after the leaderships handed out at a time."""
REST_CHUNK_MAX_S = 0.5
"""The next chunk is handed out at the latest this long after the one before."""
REST_MAX_S = 5.0
"""Whatever is left of a burst is handed out at once this long after its leaderships:
every new follower fetches well within ``replica_lag_max_s`` (10 s by default) however
many chunks there are."""


class Wakeable(Protocol):
    """An applier's wake-up (:class:`~jetserver.lazy_event.LazyEvent`)."""

    def set(self) -> None: ...


@attrs.define(eq=False)
class RoleBurst:
    """Role changes handed to ``left`` appliers at once (module docstring)."""

    left: int
    """Appliers that have not applied their assignment yet."""
    done: anyio.Event = attrs.field(factory=anyio.Event)
    """Set when ``left`` reaches 0."""
    on_stall: Callable[[float], None] | None = None
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
    _waiting: set[int] = attrs.field(factory=set)
    """``id`` of the appliers of the part being handed out (:meth:`hand_out`) that have not
    applied yet."""
    _part_done: anyio.Event = attrs.field(factory=anyio.Event)
    """Set when ``_waiting`` empties."""

    def pause_collector(self) -> None:
        """Turn the collector off now (once; see the module docstring); the burst's task
        (:meth:`collector_paused`) or :meth:`resume_collector` turns it on again."""
        if self._resume is None:
            stack = contextlib.ExitStack()
            stack.enter_context(collector_paused(max(self.left, 0)))
            self._resume = stack.close

    def resume_collector(self) -> None:
        """End the collector's pause, if it lasts (then freezes what exists, as
        :func:`~jetserver.gc_pause.collector_paused` does)."""
        resume, self._resume = self._resume, None
        if resume is not None:
            resume()

    def applied(self, applier: object = None) -> None:
        """One applier applied its assignment (or left the burst for a later one);
        ``applier``: the object handed to :meth:`hand_out` for it."""
        if self._waiting:
            self._waiting.discard(id(applier))
            if not self._waiting:
                self._part_done.set()
        self.left -= 1
        if self.left <= 0 and not self.done.is_set():
            self.done_at = anyio.current_time()
            self.done.set()

    def hand_out(
        self,
        leaders: Sequence[tuple[object, Wakeable]],
        rest: Sequence[tuple[object, Wakeable]],
        start_soon: Callable[..., object],
    ) -> None:
        """Wake the appliers of ``leaders`` now, and those of ``rest`` in a task started with
        ``start_soon`` once they applied (see the module docstring). Each item: (the applier's
        object, as later passed to :meth:`applied`; its wake-up)."""
        self._wake(leaders)
        if rest:
            start_soon(self._hand_out_rest, rest)

    def _wake(self, part: Sequence[tuple[object, Wakeable]]) -> None:
        self._waiting = {id(who) for who, _wake in part}
        self._part_done = anyio.Event()
        for _who, wake in part:
            wake.set()

    async def _hand_out_rest(self, rest: Sequence[tuple[object, Wakeable]]) -> None:
        wait_s, due = LEADERS_FIRST_MAX_S, anyio.current_time() + REST_MAX_S
        i = 0
        while i < len(rest):
            if self._waiting:
                with anyio.move_on_after(min(wait_s, max(due - anyio.current_time(), 0.0))):
                    await self._part_done.wait()
            chunk = REST_CHUNK if anyio.current_time() < due else len(rest)
            self._wake(rest[i : i + chunk])
            i += chunk
            wait_s = REST_CHUNK_MAX_S
        self._waiting = set()

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
