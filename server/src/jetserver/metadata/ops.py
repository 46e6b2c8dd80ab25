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
them with the same grants changes nothing). Their JSON decoding is in
:mod:`jetserver.metadata.op_codec`.
"""

from __future__ import annotations

from typing import Any

import attrs

from jetsdk.codec.error_codes import ErrorCode
from jetserver.metadata.model import (
    Grant,
    MetadataState,
    PartitionAssignment,
    RegisteredServer,
    StreamMeta,
    StreamSpec,
)


@attrs.frozen
class CreateStream:
    """Create a stream (idempotent for the same spec)."""

    spec: StreamSpec
    """The validated settings."""
    stream_id: str
    """Id for the new incarnation (ignored if the stream exists)."""
    created_ns: int
    """Creation time chosen by the proposer."""
    replicas: tuple[tuple[str, ...], ...]
    """Per partition, the replica server ids, leader first."""

    kind = "create_stream"

    def to_dict(self) -> dict[str, Any]:
        """As a JSON object (with ``op``)."""
        return {
            "op": self.kind,
            "spec": self.spec.to_dict(),
            "stream_id": self.stream_id,
            "created_ns": self.created_ns,
            "replicas": [list(r) for r in self.replicas],
        }


@attrs.frozen
class DeleteStream:
    """Delete a stream and (as a side effect outside the state machine) its data."""

    name: str
    """Stream name."""

    kind = "delete_stream"

    def to_dict(self) -> dict[str, Any]:
        """As a JSON object (with ``op``)."""
        return {"op": self.kind, "name": self.name}


@attrs.frozen
class UpdateStream:
    """Change an existing stream's updatable settings (checked by the proposer with
    :func:`jetsdk.codec.stream_settings.check_update`)."""

    name: str
    """Stream name."""
    settings: tuple[tuple[str, Any], ...]
    """(setting, new value) pairs, sorted by setting."""

    kind = "update_stream"

    def to_dict(self) -> dict[str, Any]:
        """As a JSON object (with ``op``)."""
        return {"op": self.kind, "name": self.name, "settings": dict(self.settings)}


@attrs.frozen
class RegisterServer:
    """Record (or update) a server's client and Raft addresses, at every start.

    A new ``incarnation`` after an unclean stop (``clean`` false: a crash, a kill) also
    takes the server out of every ISR it shares with other replicas, and moves the
    leadership of the partitions it led to the next ISR member (epoch + 1): its log may
    miss records it had (a cut unflushed tail, damaged files), so it is not in sync until
    it has caught up again and the leader re-adds it. A partition whose ISR is this server
    alone keeps it. After a clean stop (every log flushed and closed) it keeps its places.
    Repeating the same registration changes nothing.
    """

    server_id: str
    """The server's id."""
    client_address: str
    """Its client protocol ``host:port``."""
    raft_address: str
    """Its metadata Raft ``host:port``."""
    incarnation: str = ""
    """Id of this run of the server ("": an address update only)."""
    clean: bool = False
    """The previous run of the server stopped cleanly."""

    kind = "register_server"

    def to_dict(self) -> dict[str, Any]:
        """As a JSON object (with ``op``)."""
        return {
            "op": self.kind,
            "server_id": self.server_id,
            "client_address": self.client_address,
            "raft_address": self.raft_address,
            "incarnation": self.incarnation,
            "clean": self.clean,
        }


@attrs.frozen
class UpdateIsr:
    """The partition leader changes the in-sync replica set of its partition.

    Refused (NOT_LEADER) unless ``leader`` is the partition's current leader and
    ``leader_epoch`` its current epoch (a deposed leader cannot shrink or grow the ISR)
    and, when given, ``partition_epoch`` the current partition epoch (a proposal from a
    stale view cannot undo a later change, e.g. re-add a server that left);
    refused (INVALID_ARGUMENT) unless ``isr`` is a non-empty set of replicas holding the
    leader.
    """

    stream: str
    """Stream name."""
    partition: int
    """Partition number."""
    leader: str
    """The proposer: must be the partition leader."""
    leader_epoch: int
    """The proposer's leader epoch: must be the current one."""
    isr: tuple[str, ...]
    """The new ISR."""
    stream_id: str | None = None
    """If set, the stream incarnation the proposer holds (a re-created stream refuses it)."""
    partition_epoch: int | None = None
    """If set, the partition epoch the proposal was computed from: refused (NOT_LEADER)
    unless it is still the current one (compare-and-set; every change bumps it)."""

    kind = "update_isr"

    def to_dict(self) -> dict[str, Any]:
        """As a JSON object (with ``op``)."""
        return {
            "op": self.kind,
            "stream": self.stream,
            "partition": self.partition,
            "leader": self.leader,
            "leader_epoch": self.leader_epoch,
            "isr": list(self.isr),
            "stream_id": self.stream_id,
            "partition_epoch": self.partition_epoch,
        }


@attrs.frozen
class LeaveIsr:
    """A follower takes itself out of a partition's ISR (it is stopping, or its log was
    found damaged: an ISR member must hold every committed record).

    Only ever removes ``server_id``, so plans made by several stopping servers from the same
    state compose (none re-adds another). A no-op if it is not in the ISR or is the ISR's
    only member; refused (INVALID_ARGUMENT) for the leader, which hands off its leadership
    with ElectLeader first.
    """

    stream: str
    """Stream name."""
    partition: int
    """Partition number."""
    server_id: str
    """The server leaving."""
    stream_id: str | None = None
    """If set, the stream incarnation the proposer holds."""

    kind = "leave_isr"

    def to_dict(self) -> dict[str, Any]:
        """As a JSON object (with ``op``)."""
        return {
            "op": self.kind,
            "stream": self.stream,
            "partition": self.partition,
            "server_id": self.server_id,
            "stream_id": self.stream_id,
        }


@attrs.frozen
class ElectLeader:
    """Make ``leader`` the partition leader at ``leader_epoch`` (= the current epoch + 1).

    The new leader must be in the ISR; the old leader leaves the ISR (it rejoins once it has
    caught up with the new leader). ``leader`` may be the current leader: a renewal (it
    gave up its epoch after a failed fsync and asked for the next), the ISR unchanged.
    Refused (NOT_LEADER) if the epoch is not the next one (someone else changed the
    partition first), INVALID_ARGUMENT if ``leader`` is not an ISR member.

    With ``keep_isr`` (a preferred-leader election, :mod:`jetserver.cluster.rebalance`)
    the old leader stays in the ISR: it is alive and holds every committed record, as
    Kafka's preferred election keeps it.
    """

    stream: str
    """Stream name."""
    partition: int
    """Partition number."""
    leader: str
    """The new leader."""
    leader_epoch: int
    """The new epoch: current epoch + 1."""
    stream_id: str | None = None
    """If set, the stream incarnation the election was decided for."""
    keep_isr: bool = False
    """The old leader stays in the ISR (written only when set)."""

    kind = "elect_leader"

    def to_dict(self) -> dict[str, Any]:
        """As a JSON object (with ``op``)."""
        out: dict[str, Any] = {
            "op": self.kind,
            "stream": self.stream,
            "partition": self.partition,
            "leader": self.leader,
            "leader_epoch": self.leader_epoch,
            "stream_id": self.stream_id,
        }
        if self.keep_isr:
            out["keep_isr"] = True
        return out


@attrs.frozen
class ElectLeaders:
    """Several :class:`ElectLeader` in one Raft entry (the metadata leader batches the
    elections a server's death calls for). Each is applied on its own, in order, with
    exactly ElectLeader's checks; the result's ``results`` holds each one's outcome."""

    elections: tuple[ElectLeader, ...]
    """The elections."""

    kind = "elect_leaders"

    def to_dict(self) -> dict[str, Any]:
        """As a JSON object (with ``op``)."""
        return {"op": self.kind, "elections": [e.to_dict() for e in self.elections]}


@attrs.frozen
class UpdateIsrs:
    """Several :class:`UpdateIsr` in one Raft entry (a server's partition leaders batch the
    ISR changes a follower's death calls for). Each is applied on its own, in order, with
    exactly UpdateIsr's checks; the result's ``results`` holds each one's outcome."""

    changes: tuple[UpdateIsr, ...]
    """The ISR changes."""

    kind = "update_isrs"

    def to_dict(self) -> dict[str, Any]:
        """As a JSON object (with ``op``)."""
        return {"op": self.kind, "changes": [c.to_dict() for c in self.changes]}


@attrs.frozen
class SetAcl:
    """Replace the grants of one identity (validated by the proposer)."""

    identity: str
    """The identity."""
    grants: tuple[Grant, ...]
    """Its new grants (empty: no rights; the entry stays, so bootstrap grants from the
    configuration are not proposed again)."""

    kind = "set_acl"

    def to_dict(self) -> dict[str, Any]:
        """As a JSON object (with ``op``)."""
        return {
            "op": self.kind,
            "identity": self.identity,
            "grants": [g.to_dict() for g in self.grants],
        }


_StreamOp = (
    CreateStream
    | DeleteStream
    | UpdateStream
    | UpdateIsr
    | UpdateIsrs
    | LeaveIsr
    | ElectLeader
    | ElectLeaders
)
Op = _StreamOp | RegisterServer | SetAcl


@attrs.frozen
class OpResult:
    """What an operation did."""

    error_code: ErrorCode = ErrorCode.NONE
    """NONE on success, else why it was refused (the state is then unchanged)."""
    message: str = ""
    """Explanation for an error."""
    created: bool = False
    """CreateStream: True if the stream is new, False if it already existed identically."""
    stream: StreamMeta | None = None
    """CreateStream: the stream (new or existing); DeleteStream: the deleted stream;
    UpdateIsr / ElectLeader: the stream after the change (also when nothing changed)."""
    results: tuple[OpResult, ...] = ()
    """ElectLeaders / UpdateIsrs: each one's result, in order (the whole op always
    succeeds)."""

    @property
    def ok(self) -> bool:
        """True if the operation succeeded."""
        return self.error_code == ErrorCode.NONE


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
    if isinstance(op, UpdateIsr):
        return _update_isr(bumped, op)
    if isinstance(op, LeaveIsr):
        return _leave_isr(bumped, op)
    if isinstance(op, ElectLeader):
        return _elect_leader(bumped, op)
    if isinstance(op, ElectLeaders | UpdateIsrs):
        results: list[OpResult] = []
        current = bumped
        for each in op.elections if isinstance(op, ElectLeaders) else op.changes:
            if isinstance(each, ElectLeader):
                current, result = _elect_leader(current, each)
            else:
                current, result = _update_isr(current, each)
            results.append(result)
        return current, OpResult(results=tuple(results))
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


def _partition_of(
    state: MetadataState, stream: str, partition: int, stream_id: str | None
) -> tuple[StreamMeta, PartitionAssignment] | OpResult:
    meta = state.streams.get(stream)
    if meta is None or (stream_id is not None and meta.stream_id != stream_id):
        return OpResult(ErrorCode.STREAM_NOT_FOUND, f"stream {stream!r} does not exist")
    if not 0 <= partition < len(meta.partitions):
        return OpResult(
            ErrorCode.PARTITION_NOT_FOUND, f"stream {stream!r} has no partition {partition}"
        )
    return meta, meta.partitions[partition]


def _replace(
    state: MetadataState, meta: StreamMeta, assignment: PartitionAssignment
) -> tuple[MetadataState, OpResult]:
    parts = list(meta.partitions)
    parts[assignment.partition] = assignment
    new_meta = attrs.evolve(meta, partitions=tuple(parts))
    streams = dict(state.streams)
    streams[meta.name] = new_meta
    return attrs.evolve(state, streams=streams), OpResult(stream=new_meta)


def _update_isr(state: MetadataState, op: UpdateIsr) -> tuple[MetadataState, OpResult]:
    found = _partition_of(state, op.stream, op.partition, op.stream_id)
    if isinstance(found, OpResult):
        return state, found
    meta, current = found
    where = f"{op.stream}/{op.partition}"
    if op.leader != current.leader or op.leader_epoch != current.leader_epoch:
        return state, OpResult(
            ErrorCode.NOT_LEADER,
            f"{where}: ISR change by {op.leader} at epoch {op.leader_epoch} refused; the "
            f"leader is {current.leader} at epoch {current.leader_epoch}",
            stream=meta,
        )
    if op.partition_epoch is not None and op.partition_epoch != current.partition_epoch:
        return state, OpResult(
            ErrorCode.NOT_LEADER,
            f"{where}: ISR change computed at partition epoch {op.partition_epoch} refused; "
            f"the partition changed since (partition epoch {current.partition_epoch})",
            stream=meta,
        )
    isr = op.isr
    if (
        not isr
        or len(set(isr)) != len(isr)
        or op.leader not in isr
        or not set(isr) <= set(current.replicas)
    ):
        return state, OpResult(
            ErrorCode.INVALID_ARGUMENT,
            f"{where}: ISR {list(isr)} must be distinct replicas holding the leader "
            f"(replicas {list(current.replicas)})",
            stream=meta,
        )
    if isr == current.isr:
        return state, OpResult(stream=meta)
    return _replace(state, meta, current.changed(isr=isr))


def _leave_isr(state: MetadataState, op: LeaveIsr) -> tuple[MetadataState, OpResult]:
    found = _partition_of(state, op.stream, op.partition, op.stream_id)
    if isinstance(found, OpResult):
        return state, found
    meta, current = found
    if op.server_id == current.leader:
        return state, OpResult(
            ErrorCode.INVALID_ARGUMENT,
            f"{op.stream}/{op.partition}: the leader {op.server_id} cannot leave the ISR "
            "(hand off the leadership first)",
            stream=meta,
        )
    if op.server_id not in current.isr or len(current.isr) == 1:
        return state, OpResult(stream=meta)
    isr = tuple(r for r in current.isr if r != op.server_id)
    return _replace(state, meta, current.changed(isr=isr))


def _elect_leader(state: MetadataState, op: ElectLeader) -> tuple[MetadataState, OpResult]:
    found = _partition_of(state, op.stream, op.partition, op.stream_id)
    if isinstance(found, OpResult):
        return state, found
    meta, current = found
    where = f"{op.stream}/{op.partition}"
    if op.leader_epoch != current.leader_epoch + 1:
        return state, OpResult(
            ErrorCode.NOT_LEADER,
            f"{where}: election for epoch {op.leader_epoch} refused; the current epoch is "
            f"{current.leader_epoch}",
            stream=meta,
        )
    if op.leader not in current.isr:
        return state, OpResult(
            ErrorCode.INVALID_ARGUMENT,
            f"{where}: new leader {op.leader} must be an ISR member (ISR {list(current.isr)})",
            stream=meta,
        )
    if op.leader == current.leader:
        # A renewal: the leader gave up its epoch itself (a failed fsync took back records
        # its followers hold) and leads on in the next one, with the same ISR.
        return _replace(state, meta, current.changed(leader_epoch=op.leader_epoch))
    isr = current.isr if op.keep_isr else tuple(r for r in current.isr if r != current.leader)
    return _replace(
        state, meta, current.changed(leader=op.leader, leader_epoch=op.leader_epoch, isr=isr)
    )
