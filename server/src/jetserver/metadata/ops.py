"""Metadata operations and the pure state machine that applies them.

``apply(state, op)`` returns the next state and the operation's result; it reads no clock,
no randomness and no files, so replaying the same operations from the same state always
gives the same states (everything non-deterministic — the stream id, the creation time, the
replica choice — is decided by the proposer and carried in the operation). Applying an
operation twice is harmless: a repeated create returns ``created=False``, a repeated delete
returns STREAM_NOT_FOUND, and the state does not change.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from jetsdk.codec.error_codes import ErrorCode
from jetserver.metadata.model import MetadataState, PartitionAssignment, StreamMeta, StreamSpec


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


Op = CreateStream | DeleteStream


def op_from_dict(data: Mapping[str, Any]) -> Op:
    """Inverse of ``op.to_dict()``.

    Raises:
        ValueError: unknown ``op``.
    """
    kind = data.get("op")
    if kind == CreateStream.kind:
        return CreateStream(
            spec=StreamSpec.from_dict(data["spec"]),
            stream_id=str(data["stream_id"]),
            created_ns=int(data["created_ns"]),
            replicas=tuple(tuple(r) for r in data["replicas"]),
        )
    if kind == DeleteStream.kind:
        return DeleteStream(name=str(data["name"]))
    raise ValueError(f"unknown metadata op {kind!r}")


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
    """CreateStream: the stream (new or existing); DeleteStream: the deleted stream."""

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
    applied = state.applied + 1
    if isinstance(op, CreateStream):
        existing = state.streams.get(op.spec.name)
        if existing is not None:
            diff = _settings_diff(existing.spec, op.spec)
            if not diff:
                result = OpResult(created=False, stream=existing)
            else:
                result = OpResult(
                    ErrorCode.STREAM_EXISTS,
                    f"stream {op.spec.name!r} exists with other settings ({', '.join(diff)})",
                    stream=existing,
                )
            return attrs.evolve(state, applied=applied), result
        if len(op.replicas) != op.spec.partitions or any(not r for r in op.replicas):
            return attrs.evolve(state, applied=applied), OpResult(
                ErrorCode.INVALID_ARGUMENT, "one non-empty replica list per partition required"
            )
        meta = StreamMeta(
            spec=op.spec,
            stream_id=op.stream_id,
            created_ns=op.created_ns,
            partitions=tuple(
                PartitionAssignment(
                    partition=p, leader=replicas[0], replicas=replicas, isr=replicas
                )
                for p, replicas in enumerate(op.replicas)
            ),
        )
        streams = dict(state.streams)
        streams[meta.name] = meta
        return MetadataState(streams=streams, applied=applied), OpResult(created=True, stream=meta)
    if isinstance(op, DeleteStream):
        existing = state.streams.get(op.name)
        if existing is None:
            return attrs.evolve(state, applied=applied), OpResult(
                ErrorCode.STREAM_NOT_FOUND, f"stream {op.name!r} does not exist"
            )
        streams = dict(state.streams)
        del streams[op.name]
        return MetadataState(streams=streams, applied=applied), OpResult(stream=existing)
    raise TypeError(f"not a metadata op: {op!r}")  # pragma: no cover
