"""Metadata operations from their JSON form (``op.to_dict()``): :func:`op_from_dict`.

The inverse of each op's ``to_dict`` (:mod:`jetserver.metadata.ops`), as Raft entries carry
them (spec/cluster.md, "Metadata operations").
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from jetserver.metadata import op_values as values
from jetserver.metadata.model import Grant, StreamSpec

__all__ = ["op_from_dict"]


def _int(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"expected an integer, got {value!r}")
    return value


def _opt_str(value: Any) -> str | None:
    return None if value is None else str(value)


def op_from_dict(data: Mapping[str, Any]) -> values.Op:
    """Inverse of ``op.to_dict()``.

    Raises:
        ValueError: unknown ``op``.
    """
    kind = data.get("op")
    if kind == values.CreateStream.kind:
        return values.CreateStream(
            spec=StreamSpec.from_dict(data["spec"]),
            stream_id=str(data["stream_id"]),
            created_ns=int(data["created_ns"]),
            replicas=tuple(tuple(r) for r in data["replicas"]),
        )
    if kind == values.DeleteStream.kind:
        return values.DeleteStream(name=str(data["name"]))
    if kind == values.UpdateStream.kind:
        return values.UpdateStream(
            name=str(data["name"]), settings=tuple(sorted(dict(data["settings"]).items()))
        )
    if kind == values.RegisterServer.kind:
        return values.RegisterServer(
            server_id=str(data["server_id"]),
            client_address=str(data["client_address"]),
            raft_address=str(data["raft_address"]),
            incarnation=str(data.get("incarnation", "")),
            clean=data.get("clean") is True,
        )
    if kind == values.UpdateIsr.kind:
        return _update_isr_from_dict(data)
    if kind == values.LeaveIsr.kind:
        return values.LeaveIsr(
            stream=str(data["stream"]),
            partition=_int(data["partition"]),
            server_id=str(data["server_id"]),
            stream_id=_opt_str(data.get("stream_id")),
        )
    if kind == values.ElectLeader.kind:
        return _elect_from_dict(data)
    if kind == values.UpdateIsrs.kind:
        return values.UpdateIsrs(tuple(_update_isr_from_dict(c) for c in data["changes"]))
    if kind == values.ElectLeaders.kind:
        return values.ElectLeaders(tuple(_elect_from_dict(e) for e in data["elections"]))
    if kind == values.SetAcl.kind:
        return values.SetAcl(
            identity=str(data["identity"]),
            grants=tuple(Grant.from_dict(g) for g in data["grants"]),
        )
    raise ValueError(f"unknown metadata op {kind!r}")


def _elect_from_dict(data: Mapping[str, Any]) -> values.ElectLeader:
    return values.ElectLeader(
        stream=str(data["stream"]),
        partition=_int(data["partition"]),
        leader=str(data["leader"]),
        leader_epoch=_int(data["leader_epoch"]),
        stream_id=_opt_str(data.get("stream_id")),
        keep_isr=data.get("keep_isr") is True,
    )


def _update_isr_from_dict(data: Mapping[str, Any]) -> values.UpdateIsr:
    return values.UpdateIsr(
        stream=str(data["stream"]),
        partition=_int(data["partition"]),
        leader=str(data["leader"]),
        leader_epoch=_int(data["leader_epoch"]),
        isr=tuple(str(i) for i in data["isr"]),
        stream_id=_opt_str(data.get("stream_id")),
        partition_epoch=None
        if data.get("partition_epoch") is None
        else _int(data["partition_epoch"]),
    )
