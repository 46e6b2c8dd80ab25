"""Graceful shutdown: hand this server's partition leaderships to in-sync followers first.

On SIGTERM a server of a cluster, before it stops serving, probes the other ISR members of
the partitions it leads (a Hello each, at once, bounded by ``HANDOFF_PROBE_TIMEOUT_S``:
:meth:`~jetserver.cluster.liveness.Liveness.answering`), then proposes for every partition
it leads whose ISR holds another member that answered an ``ElectLeader`` (the new leader:
the first such member in replica order; epoch + 1) through the metadata Raft (forwarded to
the metadata leader), then waits, bounded, until its own replicas have applied the new
assignments. A member that did not answer (killed just before: refused; paused or
stopping: no answer within the bound) is never chosen, as in Kafka's controlled shutdown,
which moves leaderships to live ISR members only. Each of its replicas is then a
follower: its pending ALL acks were answered NOT_LEADER and the Produce requests still
waiting for it were answered at once (producers retry them with the same sequences at
the new leader, which deduplicates what it already has).
Committed records are on every ISR member, so the new leader has them; records the old
leader had not committed yet are truncated when it follows and their producers' retries
store them again.

A partition whose ISR is this server alone keeps it (no unclean handoff: the other
replicas may lack committed records); it is unavailable until the server is back. One whose
other ISR members all failed the probe is not handed off either: once this server is gone
the usual election applies (an ISR member that reports this leader silent is elected, with
this server's silence as a vote), or, if none is alive, it waits for one to come back.

Then, once its replicas are closed (its follower fetchers stopped), the server leaves the
ISRs it is a follower in (:func:`leave_isrs`): otherwise their leaders could not commit
(the HW is the minimum over the ISR) until the lag bound dropped it, ``replica_lag_max_s``
later. It proposes ``LeaveIsr`` ("remove me"), never a whole ISR computed from its own view:
two servers stopping at once plan from the same state, and a whole-set proposal applied
second would put the first one back. The leader re-adds it once it has fetched and caught
up again after its restart.

Stream ops (``ElectLeader`` itself) need a metadata Raft majority; without one nothing
moves and the shutdown goes on when the bound passes.

Task safety: one event loop (the server's).
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Collection
from typing import Protocol

import anyio
import attrs

from jetserver.broker.streams import StreamManager
from jetserver.logs import fields
from jetserver.metadata.model import MetadataState
from jetserver.metadata.ops import ElectLeader, LeaveIsr, Op
from jetserver.raft import Applied, MetadataRaft, RaftError
from jetserver.replication.core import ROLE_LEADER

log = logging.getLogger(__name__)

HANDOFF_TIMEOUT_FRACTION = 0.5
"""Part of ``[server] shutdown_timeout_s`` spent handing leaderships over."""
MAX_ISR_EXIT_ROUNDS = 3
"""Rounds of :func:`leave_isrs` (a round plans again after refusals)."""
HANDOFF_POLL_S = 0.02
"""Pause between two checks that the local replicas applied the handoffs."""
HANDOFF_PROBE_TIMEOUT_S = 1.0
"""Bound on the probe of each handoff candidate (the liveness probes' own bound): a
candidate that has not answered by then is not handed a leadership."""


class Reachable(Protocol):
    """Which servers answer now (:class:`~jetserver.cluster.liveness.Liveness`)."""

    async def answering(self, server_ids: Collection[str], timeout_s: float) -> frozenset[str]:
        """Probe ``server_ids`` now; those that answered within ``timeout_s``."""
        ...


@attrs.frozen
class HandoffPlan:
    """What a stopping server does with each partition it leads. Built by
    :func:`plan_handoffs`."""

    elections: tuple[ElectLeader, ...]
    """Leaderships moved: to the first ISR member (replica order) that answered."""
    kept: tuple[str, ...]
    """``stream/partition`` kept: this server is alone in the ISR."""
    no_live_member: tuple[str, ...]
    """``stream/partition`` not handed off: no other ISR member answered (the election
    rules decide once this server is gone)."""


@attrs.frozen
class Handoff:
    """The outcome of handing over the leaderships of one server."""

    moved: tuple[str, ...]
    """``stream/partition`` whose leadership this server gave away (applied here)."""
    kept: tuple[str, ...]
    """``stream/partition`` kept: this server is alone in the ISR."""
    failed: tuple[str, ...]
    """``stream/partition`` whose handoff was refused or not applied within the bound."""
    elapsed_s: float
    """Time spent."""
    no_live_member: tuple[str, ...] = ()
    """``stream/partition`` not handed off: no other ISR member answered the probe."""


def handoff_candidates(state: MetadataState, me: str) -> frozenset[str]:
    """The servers ``me`` might hand a leadership to: the other ISR members of the
    partitions it leads. Pure."""
    return frozenset(
        r
        for meta in state.streams.values()
        for a in meta.partitions
        if a.leader == me
        for r in a.isr
        if r != me
    )


def plan_handoffs(state: MetadataState, me: str, live: Collection[str]) -> HandoffPlan:
    """The elections that move every leadership of ``me`` to the first other ISR member,
    in replica order, that is in ``live`` (answered the stop's probe); the partitions that
    stay (``me`` alone in the ISR) and those with no live member to take them. Pure."""
    ops: list[ElectLeader] = []
    kept: list[str] = []
    stranded: list[str] = []
    for name in sorted(state.streams):
        meta = state.streams[name]
        for a in meta.partitions:
            if a.leader != me:
                continue
            others = [r for r in a.replicas if r in a.isr and r != me]
            if not others:
                kept.append(f"{name}/{a.partition}")
                continue
            answering = [r for r in others if r in live]
            if not answering:
                stranded.append(f"{name}/{a.partition}")
                continue
            ops.append(
                ElectLeader(name, a.partition, answering[0], a.leader_epoch + 1, meta.stream_id)
            )
    return HandoffPlan(tuple(ops), tuple(kept), tuple(stranded))


async def hand_off_leaderships(
    raft: MetadataRaft,
    streams: StreamManager,
    me: str,
    timeout_s: float,
    reachable: Reachable,
) -> Handoff:
    """Move the leadership of every partition ``me`` leads (and shares an ISR of) to an
    in-sync follower that answers a probe now; return once the local replicas applied
    it, or after ``timeout_s``.

    Never raises for refusals or timeouts (they are reported in the result and logged).
    """
    started = time.monotonic()
    deadline = started + timeout_s
    candidates = handoff_candidates(raft.state, me)
    live: frozenset[str] = frozenset()
    if candidates:
        live = await reachable.answering(
            candidates, min(HANDOFF_PROBE_TIMEOUT_S, max(0.1, timeout_s / 2))
        )
    plan = plan_handoffs(raft.state, me, live)
    ops, kept = plan.elections, plan.kept
    refused: list[str] = []

    async def elect(op: ElectLeader) -> None:
        where = f"{op.stream}/{op.partition}"
        try:
            applied = await _propose(raft, op, "handoff", deadline)
        except RaftError as exc:
            refused.append(where)
            log.warning(
                "leadership handoff not applied", extra=fields(partition=where, error=str(exc))
            )
            return
        if not applied.result.ok:
            refused.append(where)
            log.info(
                "leadership handoff refused",
                extra=fields(partition=where, reason=applied.result.message),
            )

    if ops:
        with anyio.move_on_after(timeout_s):
            async with anyio.create_task_group() as tg:
                for op in ops:
                    tg.start_soon(elect, op)
    waiting = {(op.stream, op.partition) for op in ops} - {_key(w) for w in refused}
    while waiting and time.monotonic() < deadline:
        waiting = {k for k in waiting if _still_leading(streams, *k)}
        if waiting:
            await anyio.sleep(HANDOFF_POLL_S)
    failed = sorted(set(refused) | {f"{s}/{p}" for s, p in waiting})
    moved = sorted(
        f"{op.stream}/{op.partition}" for op in ops if f"{op.stream}/{op.partition}" not in failed
    )
    result = Handoff(
        tuple(moved), kept, tuple(failed), time.monotonic() - started, plan.no_live_member
    )
    if ops or kept or plan.no_live_member:
        log.info(
            "leaderships handed over",
            extra=fields(
                moved=len(result.moved),
                to=",".join(sorted({op.leader for op in ops})) or None,
                kept=len(result.kept),
                no_live_member=",".join(plan.no_live_member) or None,
                not_answering=",".join(sorted(candidates - live)) or None,
                failed=",".join(result.failed) or None,
                elapsed_ms=round(result.elapsed_s * 1000, 1),
            ),
        )
    return result


def plan_isr_exits(state: MetadataState, me: str) -> list[LeaveIsr]:
    """The ``LeaveIsr`` ops that take ``me`` out of every ISR it shares as a follower.
    Pure."""
    ops: list[LeaveIsr] = []
    for name in sorted(state.streams):
        meta = state.streams[name]
        for a in meta.partitions:
            if a.leader is None or a.leader == me or me not in a.isr:
                continue
            ops.append(LeaveIsr(name, a.partition, me, meta.stream_id))
    return ops


async def _propose(raft: MetadataRaft, op: Op, kind: str, deadline: float) -> Applied:
    """``op`` proposed through the metadata leader under a fresh ``kind``-prefixed op id,
    within what is left until ``deadline`` (at least 0.1 s).

    Raises:
        RaftError: it was not applied in time, or refused by Raft.
    """
    return await raft.propose(
        op,
        op_id=f"{kind}-{uuid.uuid4().hex}",
        timeout=max(0.1, deadline - time.monotonic()),
        forward=True,
    )


async def leave_isrs(raft: MetadataRaft, me: str, timeout_s: float) -> int:
    """Take ``me`` out of the ISRs it is a follower in (call once its replicas stopped
    fetching); return how many ISRs it left. Refusals (the partition changed leader or
    epoch meanwhile) are planned again from the new state, within ``timeout_s``; never
    raises."""
    started = time.monotonic()
    deadline = started + timeout_s
    left = 0

    async def propose(op: LeaveIsr) -> None:
        nonlocal left
        try:
            applied = await _propose(raft, op, "leave-isr", deadline)
        except RaftError as exc:
            log.warning(
                "leaving an ISR not applied",
                extra=fields(partition=f"{op.stream}/{op.partition}", error=str(exc)),
            )
            return
        if applied.result.ok:
            left += 1

    for _round in range(MAX_ISR_EXIT_ROUNDS):
        ops = plan_isr_exits(raft.state, me)
        if not ops or time.monotonic() >= deadline:
            break
        with anyio.move_on_after(deadline - time.monotonic()):
            async with anyio.create_task_group() as tg:
                for op in ops:
                    tg.start_soon(propose, op)
    if left:
        log.info(
            "left the ISRs before stopping",
            extra=fields(isrs=left, elapsed_ms=round((time.monotonic() - started) * 1000, 1)),
        )
    return left


NATS_OUTAGE_HANDOFF_S = 3.0
"""A cluster server whose NATS link stays down this long hands its leaderships over."""


class _LinkState(Protocol):
    @property
    def connected(self) -> bool: ...

    async def wait_state_change(self) -> None: ...


async def hand_off_during_nats_outages(
    link: _LinkState,
    raft: MetadataRaft,
    streams: StreamManager,
    me: str,
    reachable: Reachable,
    *,
    bound_s: float = NATS_OUTAGE_HANDOFF_S,
    timeout_s: float = 10.0,
) -> None:
    """Run until cancelled: once per NATS outage longer than ``bound_s``, hand every
    leadership of ``me`` to an in-sync follower (:func:`hand_off_leaderships`).

    A leader without NATS stores nothing (it ingests from its subscription) while its
    followers and the metadata still see it alive, so without this its partitions are
    unavailable for as long as the outage lasts. Once per outage: if NATS is down for
    every server, leaderships move at most once each, not back and forth.
    """
    while True:
        while link.connected:
            await link.wait_state_change()
        with anyio.move_on_after(bound_s):
            while not link.connected:
                await link.wait_state_change()
        if _is_up(link):  # back within the bound
            continue
        log.warning(
            "nats link down; handing partition leaderships over to in-sync followers",
            extra=fields(after_s=bound_s),
        )
        await hand_off_leaderships(raft, streams, me, timeout_s, reachable)
        while not link.connected:
            await link.wait_state_change()


def _is_up(link: _LinkState) -> bool:
    return link.connected


def _key(where: str) -> tuple[str, int]:
    stream, _, partition = where.rpartition("/")
    return stream, int(partition)


def _still_leading(streams: StreamManager, stream: str, partition: int) -> bool:
    replica = streams.local_replica(stream, partition)
    return replica is not None and not replica.closed and replica.role == ROLE_LEADER
