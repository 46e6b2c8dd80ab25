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
