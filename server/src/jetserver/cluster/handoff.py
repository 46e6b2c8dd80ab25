"""Graceful shutdown: hand this server's partition leaderships to in-sync followers first.

On SIGTERM a server of a cluster, before it stops serving, proposes for every partition it
leads whose ISR holds another member an ``ElectLeader`` (the new leader: the first other
ISR member in replica order; epoch + 1) through the metadata Raft (forwarded to the
metadata leader), then waits, bounded, until its own replicas have applied the new
assignments. Each of them is then a follower: its pending ALL acks were answered NOT_LEADER
and the Produce requests still waiting for it were answered at once (producers retry them
with the same sequences at the new leader, which deduplicates what it already has).
Committed records are on every ISR member, so the new leader has them; records the old
leader had not committed yet are truncated when it follows and their producers' retries
store them again.

A partition whose ISR is this server alone keeps it (no unclean handoff: the other
replicas may lack committed records); it is unavailable until the server is back.

Then, once its replicas are closed (its follower fetchers stopped), the server leaves the
ISRs it is a follower in (:func:`leave_isrs`): otherwise their leaders could not commit
(the HW is the minimum over the ISR) until the lag bound dropped it, ``replica_lag_max_s``
later. It proposes ``UpdateIsr`` in the leader's name, a compare-and-set on the current
(leader, epoch), which a leader change in between makes the state machine refuse; the
leader re-adds it once it has fetched and caught up again after its restart.

Stream ops (``ElectLeader`` itself) need a metadata Raft majority; without one nothing
moves and the shutdown goes on when the bound passes.

Task safety: one event loop (the server's).
"""

from __future__ import annotations

import logging
import time
import uuid

import anyio
import attrs

from jetserver.broker.roles import ROLE_LEADER
from jetserver.broker.streams import StreamManager
from jetserver.logs import fields
from jetserver.metadata.model import MetadataState
from jetserver.metadata.ops import ElectLeader, UpdateIsr
from jetserver.raft import MetadataRaft, RaftError

log = logging.getLogger(__name__)

HANDOFF_TIMEOUT_FRACTION = 0.5
"""Part of ``[server] shutdown_timeout_s`` spent handing leaderships over."""
MAX_ISR_EXIT_ROUNDS = 3
"""Rounds of :func:`leave_isrs` (a round plans again after refusals)."""
HANDOFF_POLL_S = 0.02
"""Pause between two checks that the local replicas applied the handoffs."""


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


def plan_handoffs(state: MetadataState, me: str) -> tuple[list[ElectLeader], list[str]]:
    """The elections that move every leadership of ``me`` to another ISR member, and the
    partitions that stay (``me`` alone in the ISR). Pure."""
    ops: list[ElectLeader] = []
    kept: list[str] = []
    for name in sorted(state.streams):
        meta = state.streams[name]
        for a in meta.partitions:
            if a.leader != me:
                continue
            others = [r for r in a.replicas if r in a.isr and r != me]
            if not others:
                kept.append(f"{name}/{a.partition}")
                continue
            ops.append(
                ElectLeader(name, a.partition, others[0], a.leader_epoch + 1, meta.stream_id)
            )
    return ops, kept


async def hand_off_leaderships(
    raft: MetadataRaft, streams: StreamManager, me: str, timeout_s: float
) -> Handoff:
    """Move the leadership of every partition ``me`` leads (and shares an ISR of) to an
    in-sync follower; return once the local replicas applied it, or after ``timeout_s``.

    Never raises for refusals or timeouts (they are reported in the result and logged).
    """
    started = time.monotonic()
    deadline = started + timeout_s
    ops, kept = plan_handoffs(raft.state, me)
    refused: list[str] = []

    async def elect(op: ElectLeader) -> None:
        where = f"{op.stream}/{op.partition}"
        try:
            applied = await raft.propose(
                op,
                op_id=f"handoff-{uuid.uuid4().hex}",
                timeout=max(0.1, deadline - time.monotonic()),
                forward=True,
            )
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
    result = Handoff(tuple(moved), tuple(kept), tuple(failed), time.monotonic() - started)
    if ops or kept:
        log.info(
            "leaderships handed over",
            extra=fields(
                moved=len(result.moved),
                kept=len(result.kept),
                failed=",".join(result.failed) or None,
                elapsed_ms=round(result.elapsed_s * 1000, 1),
            ),
        )
    return result


def plan_isr_exits(state: MetadataState, me: str) -> list[UpdateIsr]:
    """The ISR changes that take ``me`` out of every ISR it shares as a follower (at the
    current leader and epoch). Pure."""
    ops: list[UpdateIsr] = []
    for name in sorted(state.streams):
        meta = state.streams[name]
        for a in meta.partitions:
            if a.leader is None or a.leader == me or me not in a.isr:
                continue
            isr = tuple(r for r in a.isr if r != me)
            ops.append(UpdateIsr(name, a.partition, a.leader, a.leader_epoch, isr, meta.stream_id))
    return ops


async def leave_isrs(raft: MetadataRaft, me: str, timeout_s: float) -> int:
    """Take ``me`` out of the ISRs it is a follower in (call once its replicas stopped
    fetching); return how many ISRs it left. Refusals (the partition changed leader or
    epoch meanwhile) are planned again from the new state, within ``timeout_s``; never
    raises."""
    started = time.monotonic()
    deadline = started + timeout_s
    left = 0

    async def propose(op: UpdateIsr) -> None:
        nonlocal left
        try:
            applied = await raft.propose(
                op,
                op_id=f"leave-isr-{uuid.uuid4().hex}",
                timeout=max(0.1, deadline - time.monotonic()),
                forward=True,
            )
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


def _key(where: str) -> tuple[str, int]:
    stream, _, partition = where.rpartition("/")
    return stream, int(partition)


def _still_leading(streams: StreamManager, stream: str, partition: int) -> bool:
    replica = streams.local_replica(stream, partition)
    return replica is not None and not replica.closed and replica.role == ROLE_LEADER
