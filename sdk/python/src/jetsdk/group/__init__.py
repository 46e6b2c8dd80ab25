"""Consumer groups coordinated through the log, with no server-side coordinator.

The pure core of spec/groups.md (no I/O, no clock, no randomness):

- :mod:`~jetsdk.group.records`: the group-log records and their JSON encoding;
- :mod:`~jetsdk.group.assignors`: range, roundrobin, sticky, and the Assignor protocol;
- :mod:`~jetsdk.group.state`: :class:`GroupState`, the state machine every member runs;
- :mod:`~jetsdk.group.reader`: :class:`GroupLogReader`, bootstrapping from a checkpoint;
- :mod:`~jetsdk.group.member`: :class:`GroupMember`, one member's decisions (what the SDK
  Consumer drives);
- :mod:`~jetsdk.group.simulation` and :mod:`~jetsdk.group.invariants`: a seeded simulation
  of a whole group and its safety checks (a test kit; not imported here).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from jetsdk.lazy_names import lazy_names

if TYPE_CHECKING:
    from jetsdk.group.assignors import (
        BUILTIN_ASSIGNORS,
        Assignor,
        MemberSubscription,
        RangeAssignor,
        RoundRobinAssignor,
        StickyAssignor,
    )
    from jetsdk.group.errors import (
        GroupError,
        InvalidGroupConfig,
        InvalidGroupRecord,
        MemberFenced,
        NotOwner,
        UnknownAssignor,
        UnsupportedGroupVersion,
    )
    from jetsdk.group.member import (
        Action,
        AppendRecord,
        Fenced,
        GroupMember,
        LosePartition,
        MemberConfig,
        Phase,
        RevokePartition,
        StartPartition,
    )
    from jetsdk.group.reader import GroupLogReader
    from jetsdk.group.records import GROUPS_STREAM, decode_record, encode_record, record_key
    from jetsdk.group.state import GroupState
    from jetsdk.group.stream_partition import StreamPartition

_LAZY = {
    "BUILTIN_ASSIGNORS": "jetsdk.group.assignors",
    "Assignor": "jetsdk.group.assignors",
    "MemberSubscription": "jetsdk.group.assignors",
    "RangeAssignor": "jetsdk.group.assignors",
    "RoundRobinAssignor": "jetsdk.group.assignors",
    "StickyAssignor": "jetsdk.group.assignors",
    "GroupError": "jetsdk.group.errors",
    "InvalidGroupConfig": "jetsdk.group.errors",
    "InvalidGroupRecord": "jetsdk.group.errors",
    "MemberFenced": "jetsdk.group.errors",
    "NotOwner": "jetsdk.group.errors",
    "UnknownAssignor": "jetsdk.group.errors",
    "UnsupportedGroupVersion": "jetsdk.group.errors",
    "Action": "jetsdk.group.member",
    "AppendRecord": "jetsdk.group.member",
    "Fenced": "jetsdk.group.member",
    "GroupMember": "jetsdk.group.member",
    "LosePartition": "jetsdk.group.member",
    "MemberConfig": "jetsdk.group.member",
    "Phase": "jetsdk.group.member",
    "RevokePartition": "jetsdk.group.member",
    "StartPartition": "jetsdk.group.member",
    "GroupLogReader": "jetsdk.group.reader",
    "GROUPS_STREAM": "jetsdk.group.records",
    "decode_record": "jetsdk.group.records",
    "encode_record": "jetsdk.group.records",
    "record_key": "jetsdk.group.records",
    "GroupState": "jetsdk.group.state",
    "StreamPartition": "jetsdk.group.stream_partition",
}
"""Imported on first use: the server imports the records and errors modules (its gate reads
``__groups`` records), not the member's state machine and the assignors."""

__getattr__, __dir__ = lazy_names(globals(), _LAZY)

__all__ = [
    "BUILTIN_ASSIGNORS",
    "GROUPS_STREAM",
    "Action",
    "AppendRecord",
    "Assignor",
    "Fenced",
    "GroupError",
    "GroupLogReader",
    "GroupMember",
    "GroupState",
    "InvalidGroupConfig",
    "InvalidGroupRecord",
    "LosePartition",
    "MemberConfig",
    "MemberFenced",
    "MemberSubscription",
    "NotOwner",
    "Phase",
    "RangeAssignor",
    "RevokePartition",
    "RoundRobinAssignor",
    "StartPartition",
    "StickyAssignor",
    "StreamPartition",
    "UnknownAssignor",
    "UnsupportedGroupVersion",
    "decode_record",
    "encode_record",
    "record_key",
]
