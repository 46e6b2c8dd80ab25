"""Metadata operations and the pure state machine that applies them.

``apply(state, op)`` returns the next state and the operation's result; it reads no clock,
no randomness and no files, so replaying the same operations from the same state always
gives the same states (everything non-deterministic — the stream id, the creation time, the
replica and leader choices — is decided by the proposer and carried in the operation).
Applying an operation twice is harmless: a repeated create returns ``created=False``, a
repeated delete returns STREAM_NOT_FOUND, a repeated RegisterServer or UpdateIsr changes
nothing, a repeated ElectLeader is refused (its epoch is no longer the next one).

Operations: CreateStream, DeleteStream, UpdateStream (streams; an update changes settings
the proposer checked), RegisterServer (a server's addresses),
UpdateIsr (the partition leader changes its ISR, compare-and-set on the partition epoch),
UpdateIsrs (several UpdateIsr in one entry, each checked on its own),
LeaveIsr (a stopping follower takes itself out of an ISR), ElectLeader (the metadata
leader moves a partition's leadership to an ISR member, epoch + 1), ElectLeaders (several
ElectLeader in one entry, each checked on its own), SetAcl (an identity's grants; replacing
them with the same grants changes nothing). The operations as values are in
:mod:`jetserver.metadata.op_values` (importable from here too), the partition operations'
rules in :mod:`jetserver.metadata.partition_ops`, their JSON decoding in
:mod:`jetserver.metadata.op_codec`.
"""

from __future__ import annotations

import attrs

from jetsdk.codec.error_codes import ErrorCode
from jetserver.metadata.model import (
    MetadataState,
    PartitionAssignment,
    RegisteredServer,
    StreamMeta,
    StreamSpec,
)
from jetserver.metadata.op_values import (
    CreateStream,
    DeleteStream,
    ElectLeader,
    ElectLeaders,
    LeaveIsr,
    Op,
    OpResult,
    RegisterServer,
    SetAcl,
    UpdateIsr,
    UpdateIsrs,
    UpdateStream,
)
from jetserver.metadata.partition_ops import apply_batch, apply_one

__all__ = [
    "CreateStream",
    "DeleteStream",
    "ElectLeader",
    "ElectLeaders",
    "LeaveIsr",
    "Op",
    "OpResult",
    "RegisterServer",
    "SetAcl",
    "UpdateIsr",
    "UpdateIsrs",
    "UpdateStream",
    "apply",
]


def _settings_diff(old: StreamSpec, new: StreamSpec) -> list[str]:
    a, b = old.to_dict(), new.to_dict()
    return [k for k in a if a[k] != b[k]]


def apply(state: MetadataState, op: Op) -> tuple[MetadataState, OpResult]:
    """Apply ``op`` to ``state``; return the new state and the result.

    Pure and deterministic. A refused operation returns the same state object with only
    ``applied`` incremented (the operation still consumed a log position).
    """
    bumped = attrs.evolve(state, applied=state.applied + 1)
    if isinstance(op, CreateStream):
        return _create(bumped, op)
    if isinstance(op, DeleteStream):
        existing = state.streams.get(op.name)
        if existing is None:
            return bumped, OpResult(
                ErrorCode.STREAM_NOT_FOUND, f"stream {op.name!r} does not exist"
            )
        streams = dict(state.streams)
        del streams[op.name]
        return attrs.evolve(bumped, streams=streams), OpResult(stream=existing)
    if isinstance(op, UpdateStream):
        return _update_stream(bumped, op)
    if isinstance(op, RegisterServer):
        return _register(bumped, op)
    if isinstance(op, UpdateIsr | LeaveIsr | ElectLeader):
        return apply_one(bumped, op)
    if isinstance(op, ElectLeaders | UpdateIsrs):
        return apply_batch(bumped, op)
    if isinstance(op, SetAcl):
        if state.acls.get(op.identity) == op.grants:
            return bumped, OpResult()
        acls = dict(state.acls)
        acls[op.identity] = op.grants
        return attrs.evolve(bumped, acls=acls), OpResult()
    raise TypeError(f"not a metadata op: {op!r}")  # pragma: no cover


def _update_stream(state: MetadataState, op: UpdateStream) -> tuple[MetadataState, OpResult]:
    meta = state.streams.get(op.name)
    if meta is None:
        return state, OpResult(ErrorCode.STREAM_NOT_FOUND, f"stream {op.name!r} does not exist")
    names = {f.name for f in attrs.fields(StreamSpec)}
    unknown = [k for k, _ in op.settings if k not in names]
    if unknown:
        return state, OpResult(ErrorCode.INVALID_ARGUMENT, f"unknown settings {unknown}")
    spec = attrs.evolve(meta.spec, **dict(op.settings))
    if spec == meta.spec:
        return state, OpResult(stream=meta)
    streams = dict(state.streams)
    streams[op.name] = attrs.evolve(meta, spec=spec)
    return attrs.evolve(state, streams=streams), OpResult(stream=streams[op.name])


def _register(state: MetadataState, op: RegisterServer) -> tuple[MetadataState, OpResult]:
    old = state.servers.get(op.server_id)
    restarted = bool(op.incarnation) and (old is None or old.incarnation != op.incarnation)
    incarnation = op.incarnation or (old.incarnation if old is not None else "")
    record = RegisteredServer(op.server_id, op.client_address, op.raft_address, incarnation)
    if record == old:
        return state, OpResult()
    servers = dict(state.servers)
    servers[op.server_id] = record
    state = attrs.evolve(state, servers=servers)
    if not restarted or op.clean:
        return state, OpResult()
    streams = dict(state.streams)
    left = moved = renewed = 0
    for name, meta in state.streams.items():
        parts = list(meta.partitions)
        for i, a in enumerate(parts):
            if op.server_id not in a.isr:
                continue
            if len(a.isr) == 1:
                if a.leader == op.server_id:
                    # It keeps leading (it alone holds every committed record), but in a
                    # new epoch: if it lost a tail it had, what it appends now must not
                    # look like the same history to a returning follower (KIP-101).
                    parts[i] = a.changed(leader_epoch=a.leader_epoch + 1)
                    renewed += 1
                continue
            isr = tuple(r for r in a.isr if r != op.server_id)
            left += 1
            if a.leader == op.server_id:
                leader = next(r for r in a.replicas if r in isr)
                parts[i] = a.changed(leader=leader, isr=isr, leader_epoch=a.leader_epoch + 1)
                moved += 1
            else:
                parts[i] = a.changed(isr=isr)
        if parts != list(meta.partitions):
            streams[name] = attrs.evolve(meta, partitions=tuple(parts))
    message = (
        f"restarted: left {left} ISR(s), {moved} leadership(s) moved, {renewed} kept in a new epoch"
        if left or renewed
        else ""
    )
    return attrs.evolve(state, streams=streams), OpResult(message=message)


def _create(state: MetadataState, op: CreateStream) -> tuple[MetadataState, OpResult]:
    existing = state.streams.get(op.spec.name)
    if existing is not None:
        diff = _settings_diff(existing.spec, op.spec)
        if not diff:
            return state, OpResult(created=False, stream=existing)
        return state, OpResult(
            ErrorCode.STREAM_EXISTS,
            f"stream {op.spec.name!r} exists with other settings ({', '.join(diff)})",
            stream=existing,
        )
    if (
        len(op.replicas) != op.spec.partitions
        or any(not r for r in op.replicas)
        or any(len(set(r)) != len(r) for r in op.replicas)
    ):
        return state, OpResult(
            ErrorCode.INVALID_ARGUMENT,
            "one non-empty list of distinct replicas per partition required",
        )
    meta = StreamMeta(
        spec=op.spec,
        stream_id=op.stream_id,
        created_ns=op.created_ns,
        partitions=tuple(
            PartitionAssignment(partition=p, leader=replicas[0], replicas=replicas, isr=replicas)
            for p, replicas in enumerate(op.replicas)
        ),
    )
    streams = dict(state.streams)
    streams[meta.name] = meta
    return attrs.evolve(state, streams=streams), OpResult(created=True, stream=meta)
