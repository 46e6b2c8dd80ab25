"""One INFO line for many role changes (a server's replicas taking their assignments).

A failover hands hundreds of this server's replicas a new role at once, and a stream's
creation hands each of its partitions one: a line per partition was most of the log and a
measurable part of the event loop's work. Each replica logs its assignment at DEBUG;
:class:`RoleSummary` counts them and logs one line per burst ("assignments applied": how
many replicas lead, follow or neither, the seconds from the first to the last, and ``led``:
every leadership taken, as ``stream/partition@leader_epoch`` joined by commas, which the
fault tests check for two leaders in one epoch), once no assignment was applied for
``quiet_s`` or at the latest ``max_s`` after the burst began. ``last_ago_s`` says how long
before the line the last of them was applied (``bench scale_cluster`` reads when each new
leadership of a failover was taken from it). From the first role change to the last, the
CPU the process used (every thread: ``cpu_s``) and the event loop's thread (``loop_cpu_s``),
and ``cpu_ms_per_role``: ``cpu_s`` over the role changes after the first (what else the
server did meanwhile counts too: during a failover, mostly the new roles' own work). The
CPU clocks are read at the first role change of a burst and then once per event-loop turn
that applied any (a callback at the turn's end), not per role change: the two reads are
system calls, and on a loaded 2-core VM they were 63 % of the wall-clock samples of a
survivor's 1,000-role burst (py-spy, 3,000 partitions, load 16).

Task safety: event loop only; :meth:`RoleSummary.run` is the one task that logs.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter

import anyio
import attrs

from jetserver.infra.lazy_event import LazyEvent
from jetserver.logs import fields

log = logging.getLogger(__name__)

__all__ = ["ROLE_SUMMARY_MAX_S", "ROLE_SUMMARY_QUIET_S", "RoleSummary"]

ROLE_SUMMARY_QUIET_S = 0.5
"""A burst of role changes ends when none came for this long."""
ROLE_SUMMARY_MAX_S = 5.0
"""A burst is logged at the latest this long after it began (then counting starts again)."""


@attrs.define(eq=False)
class RoleSummary:
    """Counts applied roles and logs them once per burst (module docstring)."""

    quiet_s: float = ROLE_SUMMARY_QUIET_S
    max_s: float = ROLE_SUMMARY_MAX_S
    lines: int = 0
    """Summary lines logged."""
    _roles: Counter[str] = attrs.field(factory=Counter)
    _led: list[str] = attrs.field(factory=list)
    _first_start: float | None = None
    _cpu: tuple[float, float, float, float] | None = None
    """(process, loop thread) CPU seconds at the first role change counted, then at the end
    of the last turn that applied one."""
    _cpu_due: bool = False
    """A role change was counted since the last read of the clocks (a read is queued)."""
    cpu_reads: int = 0
    """Reads of the CPU clocks (both clocks once each)."""
    _last_end: float = 0.0
    _slowest: float = 0.0
    _stall: float = 0.0
    _wake: LazyEvent = attrs.field(factory=LazyEvent)

    def applied(
        self, role: str, started: float, ended: float, led: tuple[str, int, int] | None = None
    ) -> None:
        """A replica took ``role`` in an application that ran from ``started`` to
        ``ended`` (``anyio.current_time()``); ``led``: (stream, partition, leader epoch) of
        the leadership it took, if it leads."""
        self._roles[role] += 1
        if self._cpu is None:
            self._read_cpu()
        elif not self._cpu_due:
            self._cpu_due = True
            try:
                asyncio.get_running_loop().call_soon(self._read_due)
            except RuntimeError:  # no loop running (a plain call): now
                self._read_cpu()
        if led is not None:
            self._led.append(f"{led[0]}/{led[1]}@{led[2]}")
        if self._first_start is None or started < self._first_start:
            self._first_start = started
        self._last_end = max(self._last_end, ended)
        self._slowest = max(self._slowest, ended - started)
        self._wake.set()

    def _read_due(self) -> None:
        if self._cpu_due:  # else the line was logged meanwhile (and read the clocks)
            self._read_cpu()

    def _read_cpu(self) -> None:
        """The CPU clocks now: the burst's first reading, or its latest."""
        self._cpu_due = False
        self.cpu_reads += 1
        cpu, loop_cpu = time.process_time(), time.thread_time()
        first = self._cpu
        self._cpu = (cpu, loop_cpu, cpu, loop_cpu) if first is None else (*first[:2], cpu, loop_cpu)

    def stalled(self, seconds: float) -> None:
        """The event loop stalled ``seconds`` at most during a burst of role changes
        (:class:`~jetserver.broker.role_burst.RoleBurst`): logged with the burst."""
        self._stall = max(self._stall, seconds)

    async def run(self) -> None:
        """Log each burst (until cancelled; then what was counted)."""
        try:
            await self._run()
        finally:
            self.flush()

    async def _run(self) -> None:
        while True:
            await self._wake.wait()
            self._wake = LazyEvent()
            began = anyio.current_time()
            while True:  # bounded: max_s after the burst began
                left = began + self.max_s - anyio.current_time()
                if left <= 0:
                    break
                with anyio.move_on_after(min(self.quiet_s, left)) as quiet:
                    await self._wake.wait()
                self._wake = LazyEvent()
                if quiet.cancelled_caught:
                    break
            self.flush()

    def flush(self) -> None:
        """Log what was counted since the last line (nothing if nothing was)."""
        roles, self._roles = self._roles, Counter()
        led, self._led = self._led, []
        if not roles:
            return
        first = self._first_start if self._first_start is not None else self._last_end
        seconds = self._last_end - first
        slowest, self._slowest = self._slowest, 0.0
        stall, self._stall = self._stall, 0.0
        self._first_start = None
        self.lines += 1
        counts: dict[str, object] = {
            "count": sum(roles.values()),
            "leader": roles.get("leader", 0),
            "follower": roles.get("follower", 0),
            "none": roles.get("none", 0),
            "seconds": round(seconds, 3),
            "slowest_s": round(slowest, 3),
        }
        if stall > 0:
            counts["loop_stall_s"] = round(stall, 3)
        if self._cpu_due:  # the queued read has not run yet: the burst's end is now
            self._read_cpu()
        cpu, self._cpu = self._cpu, None
        count = sum(roles.values())
        if cpu is not None and count > 1:
            counts["cpu_s"] = round(cpu[2] - cpu[0], 3)
            counts["loop_cpu_s"] = round(cpu[3] - cpu[1], 3)
            counts["cpu_ms_per_role"] = round(1000 * (cpu[2] - cpu[0]) / (count - 1), 3)
        counts["last_ago_s"] = round(max(anyio.current_time() - self._last_end, 0.0), 3)
        if led:
            counts["led"] = ",".join(led)
        log.info("assignments applied", extra=fields(**counts))
