"""The metadata leader elects a gone server's partitions from its own liveness view.

When this server leads the metadata and its liveness probes find a server **gone** (its
connections ended and a probe was refused: nothing listens at its address, the process
is dead), it proposes, without waiting for the followers' silent-leader reports, an
election for every partition that server leads whose ISR has another member that answered
one of its last two liveness probes, the last not refused (this server included;
:meth:`.Liveness.answered_lately`): at epoch + 1, the new leader taken among those ISR
members in replica order by partition number (``live[partition % len(live)]``, as
:func:`~.elections.choose_leader` spreads reporters), in batched ElectLeaders entries
(:meth:`.Elections.propose_now`). Kafka's controller does the same when a broker's
session ends. It looks again whenever a server is found gone, when this server becomes
the metadata leader (the dead server may have led the metadata too), and every
:data:`RESCAN_S` while a server is gone and the metadata changed. The followers of those
partitions send no silent-leader report meanwhile (:meth:`.Controller.takeover_due`: on
this server, and on the others while :mod:`.report_hold` finds the takeover under way).

Safety (spec/cluster.md, "Partition leader election"):

- An ISR member holds every committed record: that is what the ISR means. A server
  restarted after an unclean stop leaves every ISR at its registration (RegisterServer);
  a follower whose recovery or scrub found its log damaged (records cut or fenced) takes
  itself out of the ISR (LeaveIsr, :meth:`.Controller.leave_isr`) before it follows; a
  damaged replica named leader meanwhile does not lead while its ISR has another member
  (it steps aside, as before). The reports' rule "a replica lacking records does not
  report" is thus kept by the ISR itself, for elections with or without reports.
- A server taken for gone that is alive (a cut between it and the metadata leader only)
  loses its leaderships to live ISR members at epoch + 1, and the state machine drops it
  from the ISR. It cannot acknowledge more: an ALL ack needs every member of its ISR,
  and its followers follow the new epoch's leader (their fetches carry the new epoch,
  which it answers NOT_LEADER), while its own ISR changes are refused for their stale
  epoch; it learns the new epoch from the metadata Raft or from those answers, and
  reconciles by leader epoch like any deposed leader.
- A server that is up but silent (probes time out, a stuck partition) is not gone: the
  followers' reports stay the path there (:mod:`.elections`).

:func:`plan_takeover` is pure and unit-tested.

Task safety: one event loop; :meth:`Takeover.run` is the only proposer.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

import anyio
import attrs

from jetserver.cluster.elections import Elections
from jetserver.logs import fields
from jetserver.metadata.model import MetadataState
from jetserver.metadata.ops import ElectLeader
from jetserver.raft import MetadataRaft

log = logging.getLogger(__name__)

RESCAN_S = 0.5
"""How often the metadata leader looks again while a server is gone (only when the
metadata changed since its last look found nothing to do)."""


def plan_takeover(
    state: MetadataState, gone: Callable[[str], bool], answers: Callable[[str], bool]
) -> list[ElectLeader]:
    """The elections that move every partition led by a gone server to a live ISR member.

    Args:
        state: the metadata.
        gone: True for a server whose process is gone (its probe was refused).
        answers: True for a server that answered lately (one of its last two liveness
            probes: a member paused or stuck longer is not elected, the reports path waits
            for it).

    Returns:
        One ElectLeader at epoch + 1 per partition whose leader is gone and whose ISR has
        another member that answers, naming ``live[partition % len(live)]`` (``live``: those
        members in replica order). A partition whose ISR is its leader alone is left (no
        unclean election).
    """
    ops: list[ElectLeader] = []
    looked: dict[str, bool] = {}  # one liveness look-up per server, not per partition
    for name, meta in state.streams.items():
        for a in meta.partitions:
            if a.leader is None or len(a.isr) < 2:
                continue
            if a.leader not in looked:
                looked[a.leader] = gone(a.leader)
            if not looked[a.leader]:
                continue
            live = [r for r in a.replicas if r in a.isr and r != a.leader and answers(r)]
            if live:
                new = live[a.partition % len(live)]
                ops.append(ElectLeader(name, a.partition, new, a.leader_epoch + 1, meta.stream_id))
    return ops


@attrs.define(eq=False)
class Takeover:
    """Elections of gone servers' partitions on the metadata leader (module docstring)."""

    raft: MetadataRaft
    """The metadata Raft member (acts only while it leads)."""
    elections: Elections
    """Proposes the elections (batched; reports of the same partitions wait for them)."""
    gone: Callable[[str], bool]
    """Liveness: True if a server's process is gone (its probe was refused)."""
    answers: Callable[[str], bool]
    """Liveness: True if a server answered one of its last two probes (this server
    included; :meth:`.Liveness.answered_lately`)."""
    rescan_s: float = RESCAN_S
    """See :data:`RESCAN_S`."""
    taken: int = 0
    """Leaderships moved this way."""
    _wake: anyio.Event = attrs.field(factory=anyio.Event)
    _idle_at: tuple[int, frozenset[str], frozenset[str]] | None = None
    """(id of the metadata state, servers gone, servers answering) of the last look that
    found nothing to do."""

    def server_gone(self, _server_id: str) -> None:
        """A server's probe was refused: look now (:attr:`Liveness.on_refused`)."""
        self._wake.set()

    async def run(self) -> None:
        """Look for gone servers' partitions until cancelled (see the module docstring)."""
        async with anyio.create_task_group() as tg:
            tg.start_soon(self._watch_leadership)
            while True:
                self._wake = anyio.Event()
                if self.raft.is_leader:
                    await self.take_over()
                with anyio.move_on_after(self.rescan_s):
                    await self._wake.wait()

    async def take_over(self) -> int:
        """Propose the elections :func:`plan_takeover` finds now; how many were applied."""
        state = self.raft.state
        gone = frozenset(s for s in state.servers if self.gone(s))
        look = (id(state), gone, frozenset(s for s in state.servers if self.answers(s)))
        if not gone or look == self._idle_at:
            return 0
        ops = plan_takeover(state, gone.__contains__, self.answers)
        if not ops:
            self._idle_at = look
            return 0
        started = time.monotonic()
        applied = await self.elections.propose_now(ops)
        self.taken += len(applied)
        log.info(
            "partitions of a gone server elected from the liveness view",
            extra=fields(
                gone=",".join(sorted(gone)),
                proposed=len(ops),
                applied=len(applied),
                elapsed_s=round(time.monotonic() - started, 3),
            ),
        )
        return len(applied)

    async def _watch_leadership(self) -> None:
        was_leader = False
        async for status in self.raft.watch_status():
            if status.is_leader and not was_leader:
                self._wake.set()  # the dead server may have led the metadata as well
            was_leader = status.is_leader
