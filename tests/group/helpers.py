"""Small builders for group-log tests."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from jetsdk.group.changes import Change
from jetsdk.group.records import (
    Checkpoint,
    FinalOffset,
    GroupRecord,
    Heartbeat,
    Join,
    Leave,
    OffsetCommit,
    Release,
    encode_record,
)
from jetsdk.group.state import GroupState
from jetsdk.group.stream_partition import StreamPartition as SP

T0 = 1_700_000_000 * 10**9
GROUP = "g"


def ns(seconds: float) -> int:
    """Log time at ``seconds`` after T0."""
    return T0 + round(seconds * 1e9)


def join(
    member: str,
    subs: Mapping[str, int] | None = None,
    *,
    instance: str | None = None,
    session_ms: int = 1000,
    release_ms: int = 2000,
    assignors: Sequence[str] = ("sticky", "range", "roundrobin"),
) -> Join:
    return Join(
        group=GROUP,
        member=member,
        subscriptions=subs if subs is not None else {"s": 4},
        instance=instance,
        assignors=tuple(assignors),
        session_timeout_ms=session_ms,
        release_timeout_ms=release_ms,
    )


def hb(member: str, generation: int = 0) -> Heartbeat:
    return Heartbeat(group=GROUP, member=member, generation=generation)


def commit(member: str, p: SP, generation: int, offset: int) -> OffsetCommit:
    return OffsetCommit.of(GROUP, member, p, generation, offset)


def release(member: str, *entries: tuple[SP, int, int | None]) -> Release:
    return Release(
        group=GROUP,
        member=member,
        partitions=[FinalOffset(p.stream, p.partition, g, o) for p, g, o in entries],
    )


def leave(member: str, *entries: tuple[SP, int, int | None], temporary: bool = False) -> Leave:
    return Leave(
        group=GROUP,
        member=member,
        temporary=temporary,
        final_offsets=[FinalOffset(p.stream, p.partition, g, o) for p, g, o in entries],
    )


def checkpoint(member: str, state: GroupState) -> Checkpoint:
    return Checkpoint(group=GROUP, member=member, as_of=state.last_offset, state=state.snapshot())


class Log:
    """A group log being written and applied to one GroupState as it goes."""

    def __init__(self, state: GroupState | None = None) -> None:
        self.state = state or GroupState(GROUP)
        self.entries: list[tuple[int, int, bytes]] = []

    def add(self, record: GroupRecord, at: float) -> list[Change]:
        offset = len(self.entries)
        stamp = ns(at)
        self.entries.append((offset, stamp, encode_record(record)))
        return self.state.apply(record, offset=offset, timestamp=stamp)


def owners(state: GroupState) -> dict[SP, str]:
    out = {}
    for p in state.partitions():
        own = state.ownership(p)
        if own is not None:
            out[p] = own.owner
    return out
