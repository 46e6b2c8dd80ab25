"""Which registered servers answer: periodic Hello probes over the client protocol.

Every server probes every other registered server every ``probe_interval_s`` (a Hello with a
short bound), each server in a loop of its own. The view is local and advisory: the
metadata leader uses it to leave servers that do not answer out of new streams'
placements, and to count a partition leader that does not answer as agreeing that it is
silent (spec/cluster.md, "Partition leader election"). A server never probed yet counts
as live; one whose probes only time out (slow, not gone) counts as down after
``DOWN_AFTER_S`` of failed probes in a row.

Task safety: one event loop; :meth:`Liveness.run` is the only writer.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Collection

import anyio
import attrs

from jetsdk.errors import JetError, Timeout
from jetserver.cluster.peers import PeerPool
from jetserver.logs import fields
from jetserver.metadata.model import MetadataState

log = logging.getLogger(__name__)

PROBE_TIMEOUT_S = 1.0
"""Bound on one probe (connect + Hello)."""
EARLY_PROBE_GAP_S = 0.05
"""Least time between the starts of two probes of one server when a lost connection asks
for an early one (:meth:`Liveness.probe_soon`): a peer that accepts and closes at once
costs at most one probe per this."""
DOWN_AFTER_S = 3.0
"""A server whose probes time out (rather than being refused) counts as down only once
they have failed for this long in a row: a busy event loop (its own, or this server's)
misses a probe's bound for a second or two during a failover of thousands of partitions,
and a live leader taken for down loses its leaderships (see :meth:`Liveness.is_down`)."""


@attrs.frozen
class Probe:
    """The last probe of one server."""

    ok: bool
    """True if it answered."""
    at: float
    """When (monotonic seconds)."""
    address: str
    """The client address probed."""
    refused: bool = False
    """It failed without timing out: the connection was refused or lost (nothing listens:
    the process is gone), not merely slow."""
    failing_since: float | None = None
    """When (monotonic seconds) the current run of failed probes began (None: it answered)."""
    answering_since: float | None = None
    """When (monotonic seconds) the current run of answered probes began (None: it failed)."""
    failures: int = 0
    """Probes failed in a row, this one included (0: it answered)."""
    refused_in_run: bool = False
    """One of the probes failed in a row (this one included) was refused: the process was
    found gone and has not answered since, even if later probes only timed out (the
    prober's own loop too busy to see the refusal within the bound: at 3,000 partitions
    under load, the new metadata leader's takeover of a killed server's partitions then
    waited 7 s for a refused probe again)."""


@attrs.define(eq=False)
class Liveness:
    """This server's view of which servers answer."""

    server_id: str
    """This server (always live)."""
    peers: PeerPool
    """Connections used for probes."""
    state: Callable[[], MetadataState]
    """The current metadata (registered servers and their addresses)."""
    interval_s: float = 0.5
    """Probe period."""
    down_after_s: float = DOWN_AFTER_S
    """See :data:`DOWN_AFTER_S`."""
    probes: dict[str, Probe] = attrs.field(factory=dict)
    """Last probe per server id."""
    heard_at: dict[str, float] = attrs.field(factory=dict)
    """When each server last answered a probe (``anyio.current_time()``), by server id."""
    _changed: anyio.Event = attrs.field(factory=anyio.Event)
    _rounds: dict[str, int] = attrs.field(factory=dict)
    _down_events: dict[str, anyio.Event] = attrs.field(factory=dict)
    _up_events: dict[str, anyio.Event] = attrs.field(factory=dict)
    _wake: dict[str, anyio.Event] = attrs.field(factory=dict)
    """Per server, set to end the wait for its next probe early (:meth:`probe_soon`)."""
    on_refused: Callable[[str], None] | None = None
    """Called with a server's id when a probe of it is refused after it had answered (or
    at the first probe): nothing listens at its address, the process is gone."""

    def is_down(self, server_id: str) -> bool:
        """True if the last probe of ``server_id`` at its current address failed, and either
        was refused (nothing listens there) or probes have timed out for
        :data:`DOWN_AFTER_S` in a row (a merely slow server is not down)."""
        if server_id == self.server_id:
            return False
        probe = self.probes.get(server_id)
        registered = self.state().servers.get(server_id)
        if probe is None or registered is None:
            return False
        if probe.ok or probe.address != registered.client_address:
            return False
        if probe.refused or probe.refused_in_run:
            return True
        since = probe.at if probe.failing_since is None else probe.failing_since
        return probe.at - since >= self.down_after_s

    def gone(self, server_id: str) -> bool:
        """True if a probe of ``server_id`` was refused and none answered since (down, and
        not merely slow: nothing listens at its address, the process is gone)."""
        probe = self.probes.get(server_id)
        return (
            self.is_down(server_id)
            and probe is not None
            and (probe.refused or probe.refused_in_run)
        )

    def gone_for(self, server_id: str) -> float:
        """Seconds the probes of ``server_id`` have failed in a row, its last one refused
        (:meth:`gone`); 0 if it is not gone."""
        probe = self.probes.get(server_id)
        if probe is None or not self.gone(server_id):
            return 0.0
        since = probe.at if probe.failing_since is None else probe.failing_since
        return time.monotonic() - since

    def answering_for(self, server_id: str) -> float:
        """Seconds ``server_id`` has answered every probe in a row (0: its last probe
        failed; this server itself, or one not probed yet: infinity)."""
        if server_id == self.server_id:
            return float("inf")
        probe = self.probes.get(server_id)
        if probe is None:
            return float("inf")
        if not probe.ok or probe.answering_since is None:
            return 0.0
        return time.monotonic() - probe.answering_since

    def answered_lately(self, server_id: str) -> bool:
        """True if ``server_id`` answered one of its last two probes and the last one was
        not refused (this server itself, or one not probed yet: True).

        Whom a gone server's takeover may elect (:mod:`.takeover`). Under load one probe
        of a live survivor times out now and then (its loop, or this server's, busy for a
        second): with "answered its last probe" a kill at that moment gave every one of the
        dead server's leaderships to the other survivor, which then made all of the
        failover's role changes alone. A server paused or stuck for two probes in a row
        (two probe bounds, :data:`PROBE_TIMEOUT_S` each) is still not elected."""
        if server_id == self.server_id:
            return True
        probe = self.probes.get(server_id)
        if probe is None or probe.ok:
            return True
        return not probe.refused and probe.failures <= 1

    def down_event(self, server_id: str) -> anyio.Event:
        """An event set once ``server_id`` is down in this view (:meth:`is_down`); a new,
        unset one is handed out after it answers again. Followers wait on it instead of
        each keeping a timer while their leader's server answers."""
        event = self._down_events.get(server_id)
        if event is None:
            event = self._down_events[server_id] = anyio.Event()
        if self.is_down(server_id):
            event.set()
        return event

    def up_event(self, server_id: str) -> anyio.Event:
        """An event set once ``server_id`` is not down in this view (:meth:`is_down`); a
        new, unset one is handed out while it is down. A follower whose leader's server is
        down waits on it rather than retrying the connection on a timer (a killed leader's
        thousands of followers on a survivor retried together at every back-off step)."""
        down = self.is_down(server_id)
        event = self._up_events.get(server_id)
        if event is None or (down and event.is_set()):
            event = self._up_events[server_id] = anyio.Event()
        if not down:
            event.set()
        return event

    def _note_down(self, server_id: str) -> None:
        down = self.is_down(server_id)
        up = self._up_events.get(server_id)
        if up is not None and not down:
            up.set()
        event = self._down_events.get(server_id)
        if event is None:
            return
        if down:
            event.set()
        elif event.is_set():
            self._down_events[server_id] = anyio.Event()

    def probe_soon(self, address: str) -> None:
        """A connection to ``address`` ended by the other side: probe the server there now
        rather than at its next period (:attr:`PeerPool.on_lost`). A kill -9 ends every
        connection to the process at once, and the probe is refused: the server is down
        within milliseconds on every survivor, not up to ``interval_s`` later on each (at
        3,000 partitions the two survivors found it 0.14 and 0.36 s after the kill, and the
        metadata leader's elections waited for the later one's reports)."""
        for server_id, target in self._targets().items():
            if target == address and server_id in self._wake:
                self._wake[server_id].set()

    def live_servers(self) -> list[str]:
        """Registered servers not known to be down (this server included), sorted."""
        ids = set(self.state().servers) | {self.server_id}
        return sorted(s for s in ids if not self.is_down(s))

    async def next_round(self) -> None:
        """Wait until every registered server has been probed once more."""
        before = dict(self._rounds)
        while True:
            changed = self._changed
            if all(self._rounds.get(s, 0) > before.get(s, 0) for s in self._targets()):
                return
            await changed.wait()

    async def recheck_down(self) -> None:
        """Probe again, now, every server whose last probe failed (a server that came back
        since must not be left out of a placement for up to one probe period)."""
        state = self.state()
        down = {s: state.servers[s].client_address for s in state.servers if self.is_down(s)}
        if down:
            async with anyio.create_task_group() as tg:
                for server_id, address in down.items():
                    tg.start_soon(self._probe, server_id, address)

    async def answering(self, server_ids: Collection[str], timeout_s: float) -> frozenset[str]:
        """Probe ``server_ids`` now, at once (each bounded by ``timeout_s``); those that
        answered a probe sent from now on. A graceful stop hands leaderships only to these
        (spec/cluster.md, "Graceful shutdown"): a server killed just before refuses, and
        one that does not answer within the bound is not taken for live."""
        started = anyio.current_time()
        state = self.state()
        targets = {
            s: state.servers[s].client_address
            for s in server_ids
            if s in state.servers and s != self.server_id
        }
        async with anyio.create_task_group() as tg:
            for server_id, address in targets.items():
                tg.start_soon(self._probe, server_id, address, timeout_s)
        return frozenset(s for s in targets if self.heard_at.get(s, started - 1.0) >= started)

    def _targets(self) -> dict[str, str]:
        return {
            s.server_id: s.client_address
            for s in self.state().servers.values()
            if s.server_id != self.server_id
        }

    async def run(self) -> None:
        """Probe every registered server each ``interval_s`` until cancelled: one loop per
        server, so that a server whose probe waits out its bound (a busy one) does not
        hold back the probes of the others (a killed server's refusal is seen at its own
        next probe, not after the slow one's timeout)."""
        loops: dict[str, tuple[str, anyio.CancelScope]] = {}
        async with anyio.create_task_group() as tg:
            while True:
                targets = self._targets()
                for server_id, (address, scope) in list(loops.items()):
                    if targets.get(server_id) != address:
                        scope.cancel()
                        del loops[server_id]
                for server_id, address in targets.items():
                    if server_id not in loops:
                        scope = anyio.CancelScope()
                        loops[server_id] = (address, scope)
                        tg.start_soon(self._probe_loop, server_id, address, scope)
                await anyio.sleep(self.interval_s)

    async def _probe_loop(self, server_id: str, address: str, scope: anyio.CancelScope) -> None:
        with scope:
            while True:
                started = time.monotonic()
                await self._probe(server_id, address)
                self._rounds[server_id] = self._rounds.get(server_id, 0) + 1
                event, self._changed = self._changed, anyio.Event()
                event.set()
                wake = self._wake[server_id] = anyio.Event()
                with anyio.move_on_after(max(0.0, self.interval_s - (time.monotonic() - started))):
                    await wake.wait()
                if wake.is_set():  # early (a lost connection): bounded in rate
                    await anyio.sleep(max(0.0, EARLY_PROBE_GAP_S - (time.monotonic() - started)))

    async def _probe(self, server_id: str, address: str, timeout_s: float | None = None) -> None:
        refused = False
        try:
            await self.peers.hello(address, PROBE_TIMEOUT_S if timeout_s is None else timeout_s)
            ok = True
            self.heard_at[server_id] = anyio.current_time()
        except Timeout:
            ok = False
        except JetError:
            ok = False
            refused = True
        except Exception:
            # Anything else is a bug of the probe's way, not news about the peer: logged,
            # counted as an unanswered probe, and the prober (and the server) goes on.
            log.exception("liveness probe failed unexpectedly", extra={"peer": server_id})
            ok = False
        previous = self.probes.get(server_id)
        now = time.monotonic()
        since: float | None = None
        answering: float | None = None
        failures = 0
        refused_in_run = refused
        same = previous is not None and previous.address == address
        if not ok:
            failing = same and previous is not None and not previous.ok
            since = previous.failing_since if failing and previous is not None else now
            failures = previous.failures + 1 if failing and previous is not None else 1
            if failing and previous is not None:
                refused_in_run = refused or previous.refused_in_run
        else:
            steady = same and previous is not None and previous.ok
            answering = previous.answering_since if steady and previous is not None else now
        self.probes[server_id] = Probe(
            ok, now, address, refused, since, answering, failures, refused_in_run
        )
        self._note_down(server_id)
        if refused and self.on_refused is not None and (previous is None or previous.ok):
            self.on_refused(server_id)
        if previous is None or previous.ok != ok:
            log.log(
                logging.INFO if previous is not None else logging.DEBUG,
                "server answers" if ok else "server does not answer",
                extra=fields(server=server_id, address=address),
            )
