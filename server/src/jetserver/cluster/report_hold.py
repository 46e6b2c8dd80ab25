"""Followers hold their silent-leader reports about a gone server while its takeover runs.

When this server's liveness view finds a partition leader's server **gone** (its probe
refused: the process is dead), the metadata leader elects that server's partitions from
its own view (:mod:`.takeover`) in one or a few batched ElectLeaders entries. Reports
from the followers of those partitions (3,334 per survivor at 10,000 partitions) only
keep both loops busy meanwhile. :class:`ReportHold` decides, per gone server, whether a
takeover is under way, and hands the followers one event per server set when it no longer
is (they wait on it instead of each waking every silence period):

- this server leads the metadata: held while the server is gone (its own takeover elects
  every partition that can be elected);
- the metadata leader is unknown, or is the gone server itself: held while the metadata
  Raft elects another (the new metadata leader looks as soon as it leads, :mod:`.takeover`),
  up to :data:`HOLD_MAX_S`;
- another metadata leader that this view does not find down: held for
  :data:`TAKEOVER_GRACE_S` from when the hold began (the first look, when this view found
  the server down: its probes may have timed out before, under load) or that leader became
  known (whichever is later), and after that while the takeover is being applied here: the
  count of partitions the gone server leads in this server's metadata went down less than
  :data:`PROGRESS_S` ago. A takeover that does not start (that leader's view does not find
  the server gone) ends the hold after the grace: the reports go as before
  (spec/cluster.md, "Silent leaders"); one whose elections begin to apply after that
  (slower than the grace) holds them again while they go on.

The hold ends at once when the gone server answers again, leads nothing here any more, or
the metadata leader is found down. One task (:meth:`ReportHold.run`) looks every
:data:`TICK_S` while some server is held (an event wakes it otherwise) and logs, per held
server and per :data:`SUMMARY_S`, one line with the counts of reports held and sent.

Task safety: one event loop.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import anyio
import attrs

from jetserver.logs import fields
from jetserver.metadata.model import MetadataState
from jetserver.raft import MetadataRaft

log = logging.getLogger(__name__)

__all__ = ["HOLD_MAX_S", "PROGRESS_S", "TAKEOVER_GRACE_S", "TICK_S", "ReportHold", "led_by"]

TAKEOVER_GRACE_S = 3.0
"""How long a hold lasts without the takeover's elections being seen applied here (from
when it began, or the current metadata leader became known). The takeover elects within
one probe period plus one Raft entry; until 2026-11-29 this bound alone decided, and at
10,000 partitions on a loaded machine the takeover's entry applied 2.4-3.6 s after the
kill: the reports (and their wake-ups, 13-23 % of the survivors' loops) came back before
it had."""
PROGRESS_S = 1.5
"""After the grace, the hold lasts while the gone server's count of leaderships in this
server's metadata went down less than this long ago (the takeover's entries applying)."""
HOLD_MAX_S = 10.0
"""Longest hold while no metadata leader other than the gone server is known."""
TICK_S = 0.2
"""How often the hold is looked at again while some server is held."""
SUMMARY_S = 1.0
"""Period of the summary line of reports held and sent, per held server."""


def led_by(state: MetadataState, server: str) -> int:
    """How many partitions ``server`` leads in ``state``."""
    return sum(1 for meta in state.streams.values() for a in meta.partitions if a.leader == server)


@attrs.define(eq=False)
class _Hold:
    """One gone server's hold."""

    began: float
    """When it began (clock time)."""
    event: anyio.Event = attrs.field(factory=anyio.Event)
    """Set when it ends."""
    metadata_leader: str | None = None
    """The metadata leader when last looked."""
    leader_since: float = 0.0
    """When that metadata leader was first seen."""
    state_id: int = 0
    """``id`` of the metadata state of the last count."""
    led: int | None = None
    """Partitions the gone server led in that state."""
    progress_at: float | None = None
    """When that count last went down."""
    held: int = 0
    """Reports held since the last summary."""
    sent: int = 0
    """Reports sent since the last summary."""
    held_total: int = 0
    """Reports held during the whole hold."""


@attrs.define(eq=False)
class ReportHold:
    """Holds silent-leader reports about gone servers while their takeover runs (module
    docstring)."""

    raft: MetadataRaft
    """The metadata Raft member (its leader, its state)."""
    is_gone: Callable[[str], bool]
    """Liveness: True if a server's last probe was refused (the process is gone)."""
    is_down: Callable[[str], bool]
    """Liveness: True if a server is down in this server's view."""
    clock: Callable[[], float] = anyio.current_time
    """Monotonic seconds."""
    grace_s: float = TAKEOVER_GRACE_S
    """See :data:`TAKEOVER_GRACE_S`."""
    progress_s: float = PROGRESS_S
    """See :data:`PROGRESS_S`."""
    held_reports: int = 0
    """Reports held, in all (counted by :meth:`counted`)."""
    _holds: dict[str, _Hold] = attrs.field(factory=dict)
    _wake: anyio.Event = attrs.field(factory=anyio.Event)

    def held(self, server: str) -> bool:
        """True if reports about partitions led by ``server`` are held now."""
        return self.ended(server) is not None

    def ended(self, server: str) -> anyio.Event | None:
        """An event set when the hold of ``server`` ends, or None if it is not held (a
        follower of a gone leader waits on it before reporting)."""
        hold = self._holds.get(server)
        now = self.clock()
        if hold is not None and hold.event.is_set():
            if not self.is_gone(server):
                del self._holds[server]  # it came back: a later death holds again
                return None
            if not self._counted(server, hold, now):
                return None  # its hold ended, and no election of its partitions since
            # Its partitions' elections began to apply after the hold ended (a takeover
            # slower than the grace): held again while they go on.
            old, hold = hold, _Hold(hold.began, metadata_leader=self.raft.leader_id)
            hold.leader_since, hold.state_id, hold.led = old.began, old.state_id, old.led
            hold.progress_at, hold.held_total = now, old.held_total
            if not self._holding(server, hold, now):
                return None
            self._holds[server] = hold
            self._wake.set()
            return hold.event
        if hold is None:
            if not self.is_gone(server):
                return None
            # Its first look: the followers look when the liveness view finds the server
            # down (its probes may have timed out before, under load: not its death).
            hold = _Hold(now, metadata_leader=self.raft.leader_id, leader_since=now)
            if not self._holding(server, hold, now):
                return None
            self._holds[server] = hold
            self._wake.set()
            return hold.event
        if not self._holding(server, hold, now):
            self._end(server, hold)
            return None
        return hold.event

    def counted(self, server: str, *, sent: bool) -> None:
        """A report about a partition led by ``server`` was held (or sent): counted for the
        summary line."""
        hold = self._holds.get(server)
        if not sent:
            self.held_reports += 1
        if hold is None or hold.event.is_set():
            return
        if sent:
            hold.sent += 1
        else:
            hold.held += 1
            hold.held_total += 1

    def _holding(self, server: str, hold: _Hold, now: float) -> bool:
        """True if the takeover of ``server``'s partitions is under way (module docstring)."""
        if not self.is_gone(server):
            return False
        raft = self.raft
        if raft.is_leader:
            return True
        leader = raft.leader_id
        if leader != hold.metadata_leader:
            hold.metadata_leader, hold.leader_since = leader, now
        if leader is None or leader == server:
            return now - hold.began < HOLD_MAX_S
        if self.is_down(leader):
            return False
        self._counted(server, hold, now)
        if not hold.led:
            return False  # it leads nothing here any more: nothing to report
        if now - max(hold.began, hold.leader_since) < self.grace_s:
            return True
        return hold.progress_at is not None and now - hold.progress_at < self.progress_s

    def _counted(self, server: str, hold: _Hold, now: float) -> bool:
        """Count ``server``'s leaderships in the metadata again if it changed since the last
        count; True if the count went down (its elections applying)."""
        state = self.raft.state
        if id(state) == hold.state_id and hold.led is not None:
            return False
        led = led_by(state, server)
        progress = hold.led is not None and led < hold.led
        if progress:
            hold.progress_at = now
        hold.state_id, hold.led = id(state), led
        return progress

    def _end(self, server: str, hold: _Hold) -> None:
        """End the hold (kept, set, while ``server`` stays gone: not held again)."""
        self._summary(server, hold, ended=True)
        hold.event.set()

    def _summary(self, server: str, hold: _Hold, *, ended: bool = False) -> None:
        """One line for the reports held and sent about ``server`` since the last one."""
        if not (hold.held or hold.sent or ended):
            return
        log.info(
            "silent-leader reports of a gone server's partitions: hold ended"
            if ended
            else "silent-leader reports of a gone server's partitions held",
            extra=fields(
                server=server,
                held=hold.held,
                sent=hold.sent,
                held_in_all=hold.held_total,
                led_here=hold.led,
                held_s=round(self.clock() - hold.began, 3),
            ),
        )
        hold.held = hold.sent = 0

    async def run(self) -> None:
        """Look at the holds until cancelled: end those whose takeover is over (setting
        their events), and log the summary lines."""
        last_summary = self.clock()
        while True:
            self._wake = anyio.Event()
            if all(hold.event.is_set() for hold in self._holds.values()):
                await self._wake.wait()
                continue
            await anyio.sleep(TICK_S)
            now = self.clock()
            summary = now - last_summary >= SUMMARY_S
            if summary:
                last_summary = now
            for server, hold in list(self._holds.items()):
                if hold.event.is_set():
                    if not self.is_gone(server):
                        del self._holds[server]  # it came back: a later death holds again
                elif not self._holding(server, hold, now):
                    self._end(server, hold)
                elif summary:
                    self._summary(server, hold)
