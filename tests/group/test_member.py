from __future__ import annotations

import attrs
import pytest

from jetsdk.group.errors import InvalidGroupConfig, NotOwner
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
from jetsdk.group.records import Checkpoint, Heartbeat, Join, Leave, Release, decode_record
from jetsdk.group.stream_partition import StreamPartition as SP

from .helpers import GROUP, T0

S = [SP("s", i) for i in range(4)]
CFG = MemberConfig(
    session_timeout=1.0,
    heartbeat_interval=0.25,
    release_timeout=2.0,
    checkpoint_interval=5.0,
    lease_margin=0.1,
)


class Bus:
    """An in-memory group log; local clocks equal the server clock (seconds after T0)."""

    def __init__(self) -> None:
        self.entries: list[tuple[int, int, bytes]] = []

    def stamp(self, t: float) -> int:
        return T0 + round(t * 1e9)

    def poll(self, member: GroupMember, t: float) -> list[Action]:
        """Poll; store its appends at time t (acknowledged); return the other actions."""
        others: list[Action] = []
        for action in member.poll(t):
            if isinstance(action, AppendRecord):
                assert action.key == GROUP.encode()
                self.entries.append((len(self.entries), self.stamp(t), action.value))
                member.on_appended(t, self.stamp(t))
            else:
                others.append(action)
        return others

    def read(self, member: GroupMember) -> None:
        for offset, stamp, value in self.entries[member.next_fetch_offset :]:
            member.on_record(offset, stamp, value)
        member.caught_up(len(self.entries))

    def round(self, member: GroupMember, t: float) -> list[Action]:
        """Read, poll, read own appends, poll again (what a driver loop does)."""
        self.read(member)
        out = self.poll(member, t)
        self.read(member)
        return out + self.poll(member, t)

    def join(self, member: GroupMember, t: float) -> list[Action]:
        """``member`` joins at ``t`` and takes one round: its actions."""
        member.join(t)
        return self.round(member, t)

    def records(self) -> list[object]:
        return [decode_record(v) for _, _, v in self.entries]


def new(member_id: str, *, instance: str | None = None) -> GroupMember:
    return GroupMember(GROUP, member_id, {"s": 4}, attrs.evolve(CFG, instance_id=instance))


def starts(actions: list[Action]) -> dict[SP, StartPartition]:
    return {a.partition: a for a in actions if isinstance(a, StartPartition)}


def test_single_member_starts_everything() -> None:
    bus = Bus()
    a = new("a")
    assert a.phase.value == "idle"
    a.join(0.0)
    assert a.phase.value == "joining"
    actions = bus.round(a, 0.0)
    assert a.phase is Phase.ACTIVE
    assert starts(actions) == {p: StartPartition(p, None, 1) for p in S}
    assert a.owned() == dict.fromkeys(S, 1)
    assert all(a.may_process(p, 0.0) for p in S)
    assert isinstance(bus.records()[0], Join)


def test_cooperative_handoff_between_two_members() -> None:
    bus = Bus()
    a, b = new("a"), new("b")
    bus.join(a, 0.0)
    assert bus.join(b, 0.1) == []  # b owns nothing until a releases
    revokes = [x for x in bus.round(a, 0.1) if isinstance(x, RevokePartition)]
    assert [r.partition for r in revokes] == S[2:]
    assert revokes[0].deadline == pytest.approx(0.0 + 1.0 - 0.1)  # a's session end - margin
    assert a.may_process(S[2], 0.15)  # still a's while it drains
    assert a.commit(S[2], 11)
    assert a.release(S[2], 12)
    assert not a.release(S[2], 12)  # once
    assert not a.may_process(S[2], 0.15)
    with pytest.raises(NotOwner):
        a.commit(S[2], 13)
    bus.poll(a, 0.15)
    assert isinstance(bus.records()[-1], Release)
    got = starts(bus.round(b, 0.2))
    assert got == {S[2]: StartPartition(S[2], 12, 2)}
    assert b.owned() == {S[2]: 2}


def test_commit_rules() -> None:
    bus = Bus()
    a = new("a")
    bus.join(a, 0.0)
    with pytest.raises(NotOwner):
        a.commit(SP("other", 0), 1)
    assert a.commit(S[0], 5)
    assert not a.commit(S[0], 5)  # same offset again: nothing to send
    assert a.commit(S[0], 5, "meta")


def test_lease_runs_out_without_fresh_records() -> None:
    bus = Bus()
    a = new("a")
    bus.join(a, 0.0)
    # No heartbeat stored, no records read: the lease ends at 0.0 + 1.0 - 0.1.
    assert a.may_process(S[0], 0.89)
    assert not a.may_process(S[0], 0.9)
    assert a.next_wakeup() == pytest.approx(0.25)
    lost = [x for x in a.poll(0.95) if isinstance(x, LosePartition)]
    assert {x.partition for x in lost} == set(S)
    assert {x.reason for x in lost} == {"lease"}


def test_heartbeats_keep_the_lease() -> None:
    bus = Bus()
    a = new("a")
    bus.join(a, 0.0)
    t = 0.0
    for _ in range(20):
        t += 0.25
        assert not [x for x in bus.round(a, t) if isinstance(x, LosePartition)]
        assert a.may_process(S[0], t)
    assert sum(isinstance(r, Heartbeat) for r in bus.records()) >= 19


def test_expired_member_loses_everything_and_rejoins() -> None:
    bus = Bus()
    a, b = new("a"), new("b")
    bus.join(a, 0.0)
    bus.join(b, 0.1)
    t = 0.1
    while t < 1.5:  # a is paused; b heartbeats, and takes everything once a expires
        t += 0.25
        bus.round(b, t)
    assert b.owned() == dict.fromkeys(S, 3)
    actions = bus.round(a, t)
    assert {x.partition for x in actions if isinstance(x, LosePartition)} == set(S)
    joins = [r for r in bus.records() if isinstance(r, Join) and r.member == "a"]
    assert len(joins) == 2
    assert a.owned() == {}
    bus.round(b, t + 0.01)
    assert a.phase is Phase.ACTIVE


def test_static_member_replaced_hands_over_then_is_fenced() -> None:
    bus = Bus()
    a1 = new("a1", instance="i")
    bus.join(a1, 0.0)
    a2 = new("a2", instance="i")
    assert bus.join(a2, 0.2) == []  # a1 still owns them
    actions = bus.round(a1, 0.3)
    assert Fenced("a2") in actions
    assert a1.phase is Phase.FENCED
    revoked = [x.partition for x in actions if isinstance(x, RevokePartition)]
    assert revoked == S
    for i, p in enumerate(S):
        a1.release(p, 10 + i)
    bus.poll(a1, 0.3)
    assert starts(bus.round(a2, 0.4)) == {p: StartPartition(p, 10 + i, 2) for i, p in enumerate(S)}
    assert a1.owned() == {}


def test_leave_sends_final_offsets() -> None:
    bus = Bus()
    a = new("a", instance="i")
    bus.join(a, 0.0)
    a.leave({S[0]: 7})
    assert a.phase is Phase.CLOSED
    bus.poll(a, 0.1)
    last = bus.records()[-1]
    assert isinstance(last, Leave)
    assert last.temporary  # static members keep their slot by default
    assert [(e.partition, e.offset) for e in last.final_offsets] == [
        (0, 7),
        (1, None),
        (2, None),
        (3, None),
    ]
    assert a.poll(1.0) == []
    assert a.next_wakeup() is None


def test_leader_writes_checkpoints() -> None:
    bus = Bus()
    a = new("a")
    a.join(0.0)
    t = 0.0
    while t < 6.0:
        bus.round(a, t)
        t += 0.25
    cps = [r for r in bus.records() if isinstance(r, Checkpoint)]
    assert len(cps) == 1
    assert cps[0].as_of < len(bus.entries)


def test_update_subscriptions_rejoins() -> None:
    bus = Bus()
    a = new("a")
    bus.join(a, 0.0)
    a.update_subscriptions({"s": 4, "t": 1})
    actions = bus.round(a, 0.1)
    assert starts(actions) == {SP("t", 0): StartPartition(SP("t", 0), None, 2)}


def test_join_twice_is_an_error() -> None:
    a = new("a")
    a.join(0.0)
    with pytest.raises(RuntimeError):
        a.join(0.0)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"session_timeout": 0},
        {"heartbeat_interval": 6.0},
        {"release_timeout": 0},
        {"checkpoint_interval": 0},
        {"lease_margin": 10.0},
        {"assignors": ()},
    ],
)
def test_config_validation(kwargs: dict[str, float]) -> None:
    with pytest.raises(InvalidGroupConfig):
        MemberConfig(**kwargs)  # type: ignore[arg-type]


def test_unknown_assignor_in_config() -> None:
    with pytest.raises(InvalidGroupConfig):
        GroupMember(GROUP, "a", {"s": 1}, MemberConfig(assignors=("mine",)))
