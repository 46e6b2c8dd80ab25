"""The metadata operations as values, and what an operation did (:class:`OpResult`).

Each operation is a frozen value that the proposer decides completely (everything
non-deterministic is carried in it) and that :func:`jetserver.metadata.ops.apply` applies;
``to_dict`` gives its JSON form (decoded by :mod:`jetserver.metadata.op_codec`).
"""

from __future__ import annotations

from typing import Any

import attrs

from jetsdk.codec.error_codes import ErrorCode
from jetserver.metadata.model import Grant, StreamMeta, StreamSpec


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
    UpdateIsr / LeaveIsr / ElectLeader: the stream after the change (also when nothing
    changed); in each of ``results``, the stream after the whole batch."""
    results: tuple[OpResult, ...] = ()
    """ElectLeaders / UpdateIsrs: each one's result, in order (the whole op always
    succeeds)."""

    @property
    def ok(self) -> bool:
        """True if the operation succeeded."""
        return self.error_code == ErrorCode.NONE
