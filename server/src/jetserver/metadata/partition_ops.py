"""The partition operations of the state machine: ISR changes and leader elections.

UpdateIsr, LeaveIsr and ElectLeader each decide, from a partition's current assignment,
its next one or a result that leaves it (a refusal, or nothing to change); see their
docstrings in :mod:`jetserver.metadata.op_values` for the rules. The batched forms
(ElectLeaders, UpdateIsrs) apply their items in order, each with exactly its single
form's checks against the assignment the items before it left, and build the next state
once at the end: only the streams they changed get a new :class:`StreamMeta`, each
copied once, whatever the number of items (a dead server's 3,334 elections at 10,000
partitions copied the stream map and the stream's partitions once per election).
Unchanged :class:`StreamMeta` and :class:`PartitionAssignment` objects are kept, as every
operation keeps them (the reconcile tells changes by identity,
:mod:`jetserver.broker.reconcile_scope`).

Pure and deterministic, like :func:`jetserver.metadata.ops.apply`, which calls these.
"""

from __future__ import annotations

from collections.abc import Mapping

import attrs

from jetsdk.codec.error_codes import ErrorCode
from jetserver.metadata.model import MetadataState, PartitionAssignment, StreamMeta
from jetserver.metadata.op_values import (
    ElectLeader,
    ElectLeaders,
    LeaveIsr,
    OpResult,
    UpdateIsr,
    UpdateIsrs,
)

PartitionOp = UpdateIsr | LeaveIsr | ElectLeader
Decision = PartitionAssignment | OpResult
"""The partition's next assignment, or the result of an operation that leaves it (a
refusal, or nothing to change) without its ``stream``."""


def apply_one(state: MetadataState, op: PartitionOp) -> tuple[MetadataState, OpResult]:
    """Apply one partition operation (``state`` already counts it in ``applied``)."""
    found = _partition_of(state.streams, {}, op.stream, op.partition, op.stream_id)
    if isinstance(found, OpResult):
        return state, found
    meta, current = found
    decided = decide(current, op)
    if isinstance(decided, OpResult):
        return state, attrs.evolve(decided, stream=meta)
    parts = list(meta.partitions)
    parts[decided.partition] = decided
    new_meta = attrs.evolve(meta, partitions=tuple(parts))
    streams = dict(state.streams)
    streams[meta.name] = new_meta
    return attrs.evolve(state, streams=streams), OpResult(stream=new_meta)


def apply_batch(
    state: MetadataState, op: ElectLeaders | UpdateIsrs
) -> tuple[MetadataState, OpResult]:
    """Apply a batch's items in order, the state built once at the end (module docstring).
    Each item's result holds its stream as the batch left it."""
    staged: dict[str, list[PartitionAssignment]] = {}  # stream -> its partitions so far
    decided: list[tuple[OpResult | None, str | None]] = []  # None: applied; its stream
    items: tuple[PartitionOp, ...] = op.elections if isinstance(op, ElectLeaders) else op.changes
    for each in items:
        found = _partition_of(state.streams, staged, each.stream, each.partition, each.stream_id)
        if isinstance(found, OpResult):
            decided.append((found, None))
            continue
        meta, current = found
        outcome = decide(current, each)
        if isinstance(outcome, OpResult):
            decided.append((outcome, meta.name))
            continue
        parts = staged.get(meta.name)
        if parts is None:
            parts = staged[meta.name] = list(meta.partitions)
        parts[outcome.partition] = outcome
        decided.append((None, meta.name))
    if staged:
        streams = dict(state.streams)
        for name, parts in staged.items():
            streams[name] = attrs.evolve(streams[name], partitions=tuple(parts))
        state = attrs.evolve(state, streams=streams)
    applied: dict[str, OpResult] = {}  # one result value per stream for the applied items
    results: list[OpResult] = []
    for result, held in decided:
        if held is None:
            assert result is not None
            results.append(result)
        elif result is None:
            ok = applied.get(held)
            if ok is None:
                ok = applied[held] = OpResult(stream=state.streams[held])
            results.append(ok)
        else:
            results.append(attrs.evolve(result, stream=state.streams[held]))
    return state, OpResult(results=tuple(results))


def decide(current: PartitionAssignment, op: PartitionOp) -> Decision:
    """What ``op`` does to a partition whose assignment is ``current``."""
    if isinstance(op, ElectLeader):
        return _elect_leader(current, op)
    if isinstance(op, UpdateIsr):
        return _update_isr(current, op)
    return _leave_isr(current, op)


def _partition_of(
    streams: Mapping[str, StreamMeta],
    staged: dict[str, list[PartitionAssignment]],
    stream: str,
    partition: int,
    stream_id: str | None,
) -> tuple[StreamMeta, PartitionAssignment] | OpResult:
    meta = streams.get(stream)
    if meta is None or (stream_id is not None and meta.stream_id != stream_id):
        return OpResult(ErrorCode.STREAM_NOT_FOUND, f"stream {stream!r} does not exist")
    if not 0 <= partition < len(meta.partitions):
        return OpResult(
            ErrorCode.PARTITION_NOT_FOUND, f"stream {stream!r} has no partition {partition}"
        )
    parts = staged.get(stream)
    return meta, (meta.partitions if parts is None else parts)[partition]


def _update_isr(current: PartitionAssignment, op: UpdateIsr) -> Decision:
    where = f"{op.stream}/{op.partition}"
    if op.leader != current.leader or op.leader_epoch != current.leader_epoch:
        return OpResult(
            ErrorCode.NOT_LEADER,
            f"{where}: ISR change by {op.leader} at epoch {op.leader_epoch} refused; the "
            f"leader is {current.leader} at epoch {current.leader_epoch}",
        )
    if op.partition_epoch is not None and op.partition_epoch != current.partition_epoch:
        return OpResult(
            ErrorCode.NOT_LEADER,
            f"{where}: ISR change computed at partition epoch {op.partition_epoch} refused; "
            f"the partition changed since (partition epoch {current.partition_epoch})",
        )
    isr = op.isr
    if (
        not isr
        or len(set(isr)) != len(isr)
        or op.leader not in isr
        or not set(isr) <= set(current.replicas)
    ):
        return OpResult(
            ErrorCode.INVALID_ARGUMENT,
            f"{where}: ISR {list(isr)} must be distinct replicas holding the leader "
            f"(replicas {list(current.replicas)})",
        )
    if isr == current.isr:
        return OpResult()
    return current.changed(isr=isr)


def _leave_isr(current: PartitionAssignment, op: LeaveIsr) -> Decision:
    if op.server_id == current.leader:
        return OpResult(
            ErrorCode.INVALID_ARGUMENT,
            f"{op.stream}/{op.partition}: the leader {op.server_id} cannot leave the ISR "
            "(hand off the leadership first)",
        )
    if op.server_id not in current.isr or len(current.isr) == 1:
        return OpResult()
    return current.changed(isr=tuple(r for r in current.isr if r != op.server_id))


def _elect_leader(current: PartitionAssignment, op: ElectLeader) -> Decision:
    where = f"{op.stream}/{op.partition}"
    if op.leader_epoch != current.leader_epoch + 1:
        return OpResult(
            ErrorCode.NOT_LEADER,
            f"{where}: election for epoch {op.leader_epoch} refused; the current epoch is "
            f"{current.leader_epoch}",
        )
    if op.leader not in current.isr:
        return OpResult(
            ErrorCode.INVALID_ARGUMENT,
            f"{where}: new leader {op.leader} must be an ISR member (ISR {list(current.isr)})",
        )
    if op.leader == current.leader:
        # A renewal: the leader gave up its epoch itself (a failed fsync took back records
        # its followers hold) and leads on in the next one, with the same ISR.
        return current.changed(leader_epoch=op.leader_epoch)
    isr = current.isr if op.keep_isr else tuple(r for r in current.isr if r != current.leader)
    return current.changed(leader=op.leader, leader_epoch=op.leader_epoch, isr=isr)
