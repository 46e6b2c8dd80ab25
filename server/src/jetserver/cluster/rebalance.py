"""Preferred leaders: leadership goes back to each partition's first replica.

Placement spreads each stream's partitions so that the first replica of each (its
*preferred* leader) is on a different server in turn. A failover moves leaderships to the
survivors, and nothing used to move them back: after a server came back one survivor kept
leading most partitions. As Kafka's ``auto.leader.rebalance.enable``, the metadata leader
now checks every ``leader_rebalance_interval_s`` for partitions whose preferred replica

- is an ISR member (it has caught up: a server restarted after a crash is out of every
  ISR until its leaders re-add it), and has answered this server's liveness probes for
  ``REBALANCE_HOLD_S`` in a row,
- and is not the leader, while the current leader has answered as long (a dead leader's
  partitions are the failover's: :mod:`.elections`),

and proposes an ``elect_leader`` for each with ``keep_isr`` (the old leader is alive and
holds every committed record: it stays in the ISR), at most ``leader_rebalance_max`` per
round in one ``elect_leaders`` entry, taken in turn from each preferred server so a
bounded round spreads its moves. A returning server thus gets its leaderships back over a
few rounds, never in one election storm, and never a replica outside the ISR.
``auto_leader_rebalance = false`` turns the automatic rounds off; ``jet cluster
rebalance`` (API 14, :func:`jetsdk.admin.rebalance_leaders`) runs one round by hand.

:func:`plan_preferred` is pure and unit-tested.

Task safety: one event loop (the server's); rounds are serialized by a lock.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from typing import Any

import anyio
import attrs

from jetsdk.codec.error_codes import ErrorCode
from jetserver.errors import ApiError
from jetserver.logs import fields
from jetserver.metadata.model import MetadataState
from jetserver.metadata.ops import ElectLeader, ElectLeaders
from jetserver.raft import MetadataRaft, NotLeader, RaftError

log = logging.getLogger(__name__)

REBALANCE_PROPOSE_TIMEOUT_S = 5.0
"""Bound on proposing one round's elections."""
MAX_REBALANCE_BATCH = 1000
"""Most elections in one round (one Raft entry; a failover's entries hold up to
:data:`.entry_batches.MAX_BATCH`, a rebalance is bounded in rate on purpose)."""
REBALANCE_HOLD_S = 10.0
"""A server takes part in a round (as the preferred replica or as the leader giving up)
only once it has answered every liveness probe for this long: on an overloaded machine,
servers found down for a moment lost leaderships and rounds moved them straight back."""


def unsettled(
    is_down: Callable[[str], bool],
    answering_for: Callable[[str], float],
    hold_s: float = REBALANCE_HOLD_S,
) -> Callable[[str], bool]:
    """A predicate for :func:`plan_preferred`: down, or answering for less than ``hold_s``."""
    return lambda server_id: is_down(server_id) or answering_for(server_id) < hold_s


def plan_preferred(
    state: MetadataState, is_down: Callable[[str], bool], limit: int
) -> tuple[tuple[ElectLeader, ...], int]:
    """The preferred-leader elections due now, at most ``limit``, and how many are due.

    A partition is due when its first replica is not its leader, is an ISR member and is
    not down, and its leader is not down. The elections are taken in turn from each
    preferred server (in server-id order), so a round cut at ``limit`` moves leaderships
    to every returning server alike.
    """
    due: dict[str, list[ElectLeader]] = {}
    for name in sorted(state.streams):
        meta = state.streams[name]
        for a in meta.partitions:
            if not a.replicas:
                continue
            preferred = a.replicas[0]
            if preferred == a.leader or preferred not in a.isr:
                continue
            if is_down(preferred) or is_down(a.leader):
                continue
            due.setdefault(preferred, []).append(
                ElectLeader(
                    name, a.partition, preferred, a.leader_epoch + 1, meta.stream_id, keep_isr=True
                )
            )
    total = sum(len(v) for v in due.values())
    chosen: list[ElectLeader] = []
    queues = [due[s][::-1] for s in sorted(due)]  # reversed: pop() takes them in order
    i = 0
    while len(chosen) < min(limit, total):
        queue = queues[i % len(queues)]
        if queue:
            chosen.append(queue.pop())
        i += 1
    return tuple(chosen), total


@attrs.frozen
class RebalanceResult:
    """What one round did."""

    moved: int
    """Leaderships moved to their preferred replica."""
    refused: int
    """Elections the state machine refused (the partition changed meanwhile)."""
    remaining: int
    """Partitions still due after this round (left for the next rounds)."""

    def to_dict(self) -> dict[str, Any]:
        """The RebalanceLeaders answer (spec/protocol.md, api 14)."""
        return {"moved": self.moved, "refused": self.refused, "remaining": self.remaining}


@attrs.define(eq=False)
class LeaderRebalancer:
    """The metadata leader's preferred-leader rounds (see the module docstring)."""

    raft: MetadataRaft
    """The metadata Raft member (rounds run only while it leads)."""
    is_down: Callable[[str], bool]
    """Liveness: True if a server does not answer this server's probes (rounds by hand)."""
    is_unsettled: Callable[[str], bool] | None = None
    """For the automatic rounds: True if a server is down or has answered for less than
    :data:`REBALANCE_HOLD_S` (:func:`unsettled`; None: :attr:`is_down`). A round by hand
    is an operator's explicit request: it moves to any live ISR member at once."""
    enabled: bool = True
    """Automatic rounds (``[cluster] auto_leader_rebalance``)."""
    interval_s: float = 5.0
    """Between two automatic rounds (``[cluster] leader_rebalance_interval_s``)."""
    max_per_round: int = 500
    """Most leaderships one round moves (``[cluster] leader_rebalance_max``)."""
    moved: int = 0
    """Leaderships moved by this server's rounds."""
    rounds: int = 0
    """Rounds that proposed an entry."""
    _lock: anyio.Lock = attrs.field(factory=anyio.Lock)

    async def run(self) -> None:
        """Automatic rounds, every :attr:`interval_s` while this server leads the metadata
        (until cancelled). Does nothing if not :attr:`enabled`."""
        if not self.enabled:
            return
        while True:
            await anyio.sleep(self.interval_s)
            if not self.raft.is_leader:
                continue
            try:
                await self.rebalance(automatic=True)
            except ApiError as exc:
                log.info("preferred-leader round failed", extra=fields(error=exc.message))

    async def rebalance(
        self, limit: int | None = None, *, automatic: bool = False
    ) -> RebalanceResult:
        """One round: propose the due preferred-leader elections (at most ``limit``, default
        :attr:`max_per_round`) in one entry and wait until it is applied; ``automatic``
        leaves out the servers :attr:`is_unsettled` finds.

        Raises:
            ApiError: NOT_LEADER (not the metadata leader), or a RaftError's code.
        """
        bound = self.max_per_round if limit is None else limit
        bound = max(0, min(bound, MAX_REBALANCE_BATCH))
        async with self._lock:
            if not self.raft.is_leader:
                raise ApiError(
                    ErrorCode.NOT_LEADER, "not the metadata leader", {"leader": self.raft.leader_id}
                )
            skip = self.is_unsettled if automatic and self.is_unsettled else self.is_down
            plan, due = plan_preferred(self.raft.state, skip, bound)
            if not plan:
                return RebalanceResult(0, 0, due)
            op: ElectLeader | ElectLeaders = plan[0] if len(plan) == 1 else ElectLeaders(plan)
            try:
                applied = await self.raft.propose(
                    op, op_id=f"prefer-{uuid.uuid4().hex}", timeout=REBALANCE_PROPOSE_TIMEOUT_S
                )
            except NotLeader as exc:
                raise ApiError(exc.code, str(exc), {"leader": exc.leader_id}) from exc
            except RaftError as exc:
                raise ApiError(exc.code, f"preferred-leader round not applied: {exc}") from exc
            result = applied.result
            results = (result,) if len(plan) == 1 else result.results
            moved = sum(1 for r in results if r.ok)
            self.moved += moved
            self.rounds += 1
            outcome = RebalanceResult(moved, len(plan) - moved, due - moved)
            log.info(
                "leaderships moved back to their preferred replicas",
                extra=fields(moved=moved, refused=outcome.refused, remaining=outcome.remaining),
            )
            return outcome
