"""A group state's checkpoint: :class:`GroupSnapshot` <-> the JSON object carried by
checkpoint records (spec/groups.md, "Checkpoint"). GroupState builds and restores the
value (:meth:`~jetsdk.group.state.GroupState.snapshot`, ``restore``).

Layout (all lists sorted; times are log nanoseconds; timeouts milliseconds)::

    {"group": str, "clock": int, "generation": int, "last_offset": int,
     "last_checkpoint_at": int | null, "assignor": str,
     "members": [{"member", "instance", "subscriptions", "assignors", "session_timeout_ms",
                  "release_timeout_ms", "metadata", "joined_offset", "last_seen", "parked"}],
     "targets": [[stream, partition, member]],
     "owners":  [[stream, partition, member, generation, requested_at, force_at]],
     "offsets": [[stream, partition, offset, metadata, member, generation, timestamp]]}

Pure code, no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from jetsdk.group.errors import InvalidGroupRecord
from jetsdk.group.membership import MemberInfo, OwnerEntry
from jetsdk.group.offsets import CommitEntry, OffsetAndMetadata
from jetsdk.group.records import SIMPLE_GENERATION, Join
from jetsdk.group.stream_partition import StreamPartition

__all__ = ["GroupSnapshot", "snapshot_from_json", "snapshot_to_json"]


@attrs.define(eq=False)
class GroupSnapshot:
    """Everything a group state holds, as plain values (lists in canonical order)."""

    group: str
    clock: int
    generation: int
    last_offset: int
    last_checkpoint_at: int | None
    assignor: str
    members: list[MemberInfo]
    """Sorted by member id."""
    targets: list[tuple[StreamPartition, str]]
    """(partition, target member id), sorted by partition."""
    owners: list[tuple[StreamPartition, OwnerEntry]]
    """Sorted by partition."""
    offsets: list[tuple[StreamPartition, CommitEntry]]
    """In the offset table's order."""


def snapshot_to_json(snap: GroupSnapshot) -> dict[str, Any]:
    """The canonical JSON-ready form of ``snap``."""
    members = [
        {
            "member": m.member,
            "instance": m.instance,
            "subscriptions": dict(sorted(m.subscriptions.items())),
            "assignors": list(m.assignors),
            "session_timeout_ms": m.session_timeout_ms,
            "release_timeout_ms": m.release_timeout_ms,
            "metadata": m.metadata,
            "joined_offset": m.joined_offset,
            "last_seen": m.last_seen,
            "parked": m.parked,
        }
        for m in snap.members
    ]
    return {
        "group": snap.group,
        "clock": snap.clock,
        "generation": snap.generation,
        "last_offset": snap.last_offset,
        "last_checkpoint_at": snap.last_checkpoint_at,
        "assignor": snap.assignor,
        "members": members,
        "targets": [[p.stream, p.partition, member] for p, member in snap.targets],
        "owners": [
            [p.stream, p.partition, o.owner, o.generation, o.requested_at, o.force_at]
            for p, o in snap.owners
        ],
        "offsets": [
            [
                p.stream,
                p.partition,
                c.position.offset,
                c.position.metadata,
                c.member,
                c.generation,
                c.timestamp,
            ]
            for p, c in snap.offsets
        ],
    }


def _int(value: object, what: str, low: int = 0) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < low:
        raise InvalidGroupRecord(f"checkpoint: {what} must be an integer >= {low}")
    return value


def _opt_int(value: object, what: str) -> int | None:
    return None if value is None else _int(value, what)


def _str(value: object, what: str) -> str:
    if not isinstance(value, str):
        raise InvalidGroupRecord(f"checkpoint: {what} must be a string")
    return value


def _rows(obj: Mapping[str, Any], name: str, width: int) -> list[list[Any]]:
    rows = obj.get(name)
    if not isinstance(rows, list) or not all(isinstance(r, list) and len(r) == width for r in rows):
        raise InvalidGroupRecord(f"checkpoint: {name} must be a list of {width}-item lists")
    return rows


def _member(obj: object) -> MemberInfo:
    if not isinstance(obj, dict):
        raise InvalidGroupRecord("checkpoint: a member must be an object")
    # Reuse the join record's validation for the fields they share.
    join = Join(
        group="x",
        member=obj.get("member", ""),
        subscriptions=obj.get("subscriptions") or {},
        instance=obj.get("instance"),
        assignors=obj.get("assignors") or (),
        session_timeout_ms=obj.get("session_timeout_ms", 0),
        release_timeout_ms=obj.get("release_timeout_ms", 0),
        metadata=obj.get("metadata", ""),
    )
    parked = obj.get("parked")
    if not isinstance(parked, bool):
        raise InvalidGroupRecord("checkpoint: parked must be a boolean")
    return MemberInfo.from_join(
        join,
        joined_offset=_int(obj.get("joined_offset"), "joined_offset"),
        last_seen=_int(obj.get("last_seen"), "last_seen"),
        parked=parked,
    )


def _partition(stream: object, partition: object) -> StreamPartition:
    return StreamPartition(_str(stream, "stream"), _int(partition, "partition"))


def snapshot_from_json(obj: Mapping[str, Any]) -> GroupSnapshot:
    """Parse a checkpoint's ``state`` (field types and ranges; the state checks how the
    parts fit together).

    Raises:
        InvalidGroupRecord: ``obj`` is malformed.
    """
    if not isinstance(obj, Mapping):
        raise InvalidGroupRecord("checkpoint: state must be an object")
    try:
        members = obj.get("members")
        if not isinstance(members, list):
            raise InvalidGroupRecord("checkpoint: members must be a list")
        return GroupSnapshot(
            group=_str(obj.get("group"), "group"),
            clock=_int(obj.get("clock"), "clock"),
            generation=_int(obj.get("generation"), "generation"),
            last_offset=_int(obj.get("last_offset"), "last_offset", -1),
            last_checkpoint_at=_opt_int(obj.get("last_checkpoint_at"), "last_checkpoint_at"),
            assignor=_str(obj.get("assignor"), "assignor"),
            members=[_member(raw) for raw in members],
            targets=[
                (_partition(stream, partition), _str(member, "member"))
                for stream, partition, member in _rows(obj, "targets", 3)
            ],
            owners=[
                (
                    _partition(stream, partition),
                    OwnerEntry(
                        owner=_str(member, "owner"),
                        generation=_int(generation, "generation"),
                        requested_at=_opt_int(requested, "requested_at"),
                        force_at=_opt_int(force, "force_at"),
                    ),
                )
                for stream, partition, member, generation, requested, force in _rows(
                    obj, "owners", 6
                )
            ],
            offsets=[
                (
                    _partition(stream, partition),
                    CommitEntry(
                        position=OffsetAndMetadata(
                            _int(offset, "offset"), _str(metadata, "metadata")
                        ),
                        member=_str(member, "member"),
                        generation=_int(generation, "generation", SIMPLE_GENERATION),
                        timestamp=_int(timestamp, "timestamp"),
                    ),
                )
                for stream, partition, offset, metadata, member, generation, timestamp in _rows(
                    obj, "offsets", 7
                )
            ],
        )
    except InvalidGroupRecord:
        raise
    except (TypeError, ValueError) as exc:
        raise InvalidGroupRecord(f"checkpoint: {exc}") from None
