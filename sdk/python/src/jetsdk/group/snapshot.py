"""GroupState <-> the JSON object carried by checkpoint records (spec/groups.md, "Checkpoint").

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
from typing import TYPE_CHECKING, Any

from jetsdk.group.assignors import Assignor
from jetsdk.group.errors import InvalidGroupRecord
from jetsdk.group.membership import _Member, _Owner, slot_of
from jetsdk.group.offsets import CommittedOffset
from jetsdk.group.records import SIMPLE_GENERATION, Join
from jetsdk.group.stream_partition import StreamPartition

if TYPE_CHECKING:
    from jetsdk.group.state import GroupState

__all__ = ["state_from_json", "state_to_json"]


def state_to_json(state: GroupState) -> dict[str, Any]:
    """The canonical JSON-ready form of ``state``."""
    members = []
    for key in sorted(state._members):
        m = state._members[key]
        members.append(
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
        )
    targets = [
        [p.stream, p.partition, state._slots[slot]] for p, slot in sorted(state._targets.items())
    ]
    owners = [
        [p.stream, p.partition, o.owner, o.generation, o.requested_at, o.force_at]
        for p, o in sorted(state._owners.items())
    ]
    offsets = [
        [p.stream, p.partition, c.offset, c.metadata, c.member, c.generation, c.timestamp]
        for p, c in state._offsets.items()
    ]
    return {
        "group": state.group,
        "clock": state._clock,
        "generation": state._generation,
        "last_offset": state._last_offset,
        "last_checkpoint_at": state._last_checkpoint_at,
        "assignor": state._assignor,
        "members": members,
        "targets": targets,
        "owners": owners,
        "offsets": offsets,
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


def _member(obj: object) -> _Member:
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
    return _Member(
        member=join.member,
        instance=join.instance,
        subscriptions=join.subscription_map,
        assignors=join.assignors,
        session_timeout_ms=join.session_timeout_ms,
        release_timeout_ms=join.release_timeout_ms,
        metadata=join.metadata,
        joined_offset=_int(obj.get("joined_offset"), "joined_offset"),
        last_seen=_int(obj.get("last_seen"), "last_seen"),
        parked=parked,
    )


def state_from_json(
    cls: type[GroupState], obj: Mapping[str, Any], assignors: Mapping[str, Assignor]
) -> GroupState:
    """Rebuild a state; raises InvalidGroupRecord if ``obj`` is malformed."""
    if not isinstance(obj, Mapping):
        raise InvalidGroupRecord("checkpoint: state must be an object")
    try:
        state = cls(_str(obj.get("group"), "group"), assignors=assignors)
        state._clock = _int(obj.get("clock"), "clock")
        state._generation = _int(obj.get("generation"), "generation")
        state._last_offset = _int(obj.get("last_offset"), "last_offset", -1)
        state._last_checkpoint_at = _opt_int(obj.get("last_checkpoint_at"), "last_checkpoint_at")
        state._assignor = _str(obj.get("assignor"), "assignor")
        members = obj.get("members")
        if not isinstance(members, list):
            raise InvalidGroupRecord("checkpoint: members must be a list")
        for raw in members:
            m = _member(raw)
            if m.member in state._members or m.slot in state._slots:
                raise InvalidGroupRecord("checkpoint: a member or slot repeats")
            state._members[m.member] = m
            state._slots[m.slot] = m.member
        for stream, partition, member in _rows(obj, "targets", 3):
            entry = state._members.get(member)
            if entry is None:
                raise InvalidGroupRecord("checkpoint: a target is not a member")
            p = StreamPartition(_str(stream, "stream"), _int(partition, "partition"))
            state._targets[p] = slot_of(entry.member, entry.instance)
        for stream, partition, member, generation, requested, force in _rows(obj, "owners", 6):
            p = StreamPartition(_str(stream, "stream"), _int(partition, "partition"))
            state._owners[p] = _Owner(
                owner=_str(member, "owner"),
                generation=_int(generation, "generation"),
                requested_at=_opt_int(requested, "requested_at"),
                force_at=_opt_int(force, "force_at"),
            )
        for row in _rows(obj, "offsets", 7):
            stream, partition, offset, metadata, member, generation, timestamp = row
            p = StreamPartition(_str(stream, "stream"), _int(partition, "partition"))
            state._offsets.put(
                p,
                CommittedOffset(
                    offset=_int(offset, "offset"),
                    metadata=_str(metadata, "metadata"),
                    member=_str(member, "member"),
                    generation=_int(generation, "generation", SIMPLE_GENERATION),
                    timestamp=_int(timestamp, "timestamp"),
                ),
            )
    except InvalidGroupRecord:
        raise
    except (TypeError, ValueError) as exc:
        raise InvalidGroupRecord(f"checkpoint: {exc}") from None
    state._next_deadline = state._earliest_deadline()
    return state
