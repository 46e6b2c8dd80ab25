from __future__ import annotations

import random
from collections.abc import Mapping, Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jetsdk.group.assignors import (
    BUILTIN_ASSIGNORS,
    Assignor,
    MemberSubscription,
    RangeAssignor,
    RoundRobinAssignor,
    StickyAssignor,
    check_assignment,
)
from jetsdk.group.stream_partition import StreamPartition as SP

ALL: list[Assignor] = [RangeAssignor(), RoundRobinAssignor(), StickyAssignor()]
STREAMS = ["a", "b", "c"]


@st.composite
def groups(
    draw: st.DrawFn, *, homogeneous: bool = False
) -> tuple[list[MemberSubscription], list[SP]]:
    counts = {s: draw(st.integers(0, 12)) for s in STREAMS[: draw(st.integers(1, 3))]}
    partitions = [SP(s, i) for s, n in counts.items() for i in range(n)]
    n_members = draw(st.integers(0, 7))
    members = []
    for i in range(n_members):
        if homogeneous:
            streams = frozenset(counts)
        else:
            streams = frozenset(draw(st.sets(st.sampled_from(sorted(counts)), max_size=3)))
        previous = (
            frozenset(draw(st.sets(st.sampled_from(partitions), max_size=6)))
            if (partitions)
            else frozenset()
        )
        members.append(MemberSubscription(f"m{i:02d}", streams, previous))
    return members, partitions


def counts_of(result: Mapping[str, Sequence[SP]]) -> list[int]:
    return [len(v) for v in result.values()]


@pytest.mark.parametrize("assignor", ALL, ids=lambda a: a.name)
@settings(max_examples=50, deadline=None)
@given(data=groups())
def test_valid_and_order_independent(
    assignor: Assignor, data: tuple[list[MemberSubscription], list[SP]]
) -> None:
    members, partitions = data
    result = assignor.assign(members, partitions)
    assert check_assignment(members, partitions, result) is None
    assert set(result) == {m.member for m in members}
    assert all(list(v) == sorted(v) for v in result.values())
    rng = random.Random(len(members) * 31 + len(partitions))
    shuffled_m, shuffled_p = members[:], partitions[:] + partitions[:1]
    rng.shuffle(shuffled_m)
    rng.shuffle(shuffled_p)
    assert assignor.assign(shuffled_m, shuffled_p) == result


@pytest.mark.parametrize("assignor", [RoundRobinAssignor(), StickyAssignor()], ids=lambda a: a.name)
@settings(max_examples=50, deadline=None)
@given(data=groups(homogeneous=True))
def test_balanced_with_equal_subscriptions(
    assignor: Assignor, data: tuple[list[MemberSubscription], list[SP]]
) -> None:
    members, partitions = data
    counts = counts_of(assignor.assign(members, partitions))
    if counts:
        assert max(counts) - min(counts) <= 1


@settings(max_examples=50, deadline=None)
@given(data=groups(homogeneous=True))
def test_range_is_balanced_per_stream(data: tuple[list[MemberSubscription], list[SP]]) -> None:
    members, partitions = data
    result = RangeAssignor().assign(members, partitions)
    for stream in STREAMS:
        per = [sum(1 for p in v if p.stream == stream) for v in result.values()]
        if per:
            assert max(per) - min(per) <= 1
        # contiguous ranges, in member order
        flat = [p.partition for k in sorted(result) for p in result[k] if p.stream == stream]
        assert flat == sorted(flat)


@settings(max_examples=80, deadline=None)
@given(data=groups())
def test_sticky_cannot_be_improved_by_one_move(
    data: tuple[list[MemberSubscription], list[SP]],
) -> None:
    members, partitions = data
    result = StickyAssignor().assign(members, partitions)
    count = {k: len(v) for k, v in result.items()}
    for owner, parts in result.items():
        for p in parts:
            for m in members:
                if p.stream in m.streams:
                    assert count[owner] - count[m.member] <= 1, (owner, m.member, p)


def _strip_previous(members: list[MemberSubscription]) -> list[MemberSubscription]:
    return [MemberSubscription(m.member, m.streams) for m in members]


def _with_previous(
    members: list[MemberSubscription], result: Mapping[str, Sequence[SP]]
) -> list[MemberSubscription]:
    return [
        MemberSubscription(m.member, m.streams, frozenset(result.get(m.member, ())))
        for m in members
    ]


@settings(max_examples=50, deadline=None)
@given(data=groups(homogeneous=True))
def test_sticky_is_stable(data: tuple[list[MemberSubscription], list[SP]]) -> None:
    members, partitions = data
    sticky = StickyAssignor()
    first = sticky.assign(_strip_previous(members), partitions)
    again = sticky.assign(_with_previous(members, first), partitions)
    assert again == first


@settings(max_examples=50, deadline=None)
@given(data=groups(homogeneous=True), leaver=st.integers(0, 6))
def test_sticky_member_leaves(data: tuple[list[MemberSubscription], list[SP]], leaver: int) -> None:
    members, partitions = data
    if len(members) < 2:
        return
    sticky = StickyAssignor()
    first = sticky.assign(_strip_previous(members), partitions)
    gone = members[leaver % len(members)].member
    rest = [m for m in _with_previous(members, first) if m.member != gone]
    after = sticky.assign(rest, partitions)
    for m in rest:
        assert set(first[m.member]) <= set(after[m.member])
    counts = counts_of(after)
    assert max(counts) - min(counts) <= 1


@settings(max_examples=50, deadline=None)
@given(data=groups(homogeneous=True))
def test_sticky_member_joins(data: tuple[list[MemberSubscription], list[SP]]) -> None:
    members, partitions = data
    if not members:
        return
    sticky = StickyAssignor()
    first = sticky.assign(_strip_previous(members), partitions)
    streams = frozenset(p.stream for p in partitions)
    newcomer = MemberSubscription("zz-new", streams)
    after = sticky.assign([*_with_previous(members, first), newcomer], partitions)
    moved = sum(len(set(first[k]) - set(after[k])) for k in first)
    assert moved == len(after["zz-new"])
    counts = counts_of(after)
    assert max(counts) - min(counts) <= 1


def test_examples() -> None:
    parts = [SP("a", i) for i in range(5)] + [SP("b", i) for i in range(2)]
    both = frozenset({"a", "b"})
    members = [MemberSubscription("x", both), MemberSubscription("y", both)]
    assert RangeAssignor().assign(members, parts) == {
        "x": [SP("a", 0), SP("a", 1), SP("a", 2), SP("b", 0)],
        "y": [SP("a", 3), SP("a", 4), SP("b", 1)],
    }
    assert RoundRobinAssignor().assign(members, parts) == {
        "x": [SP("a", 0), SP("a", 2), SP("a", 4), SP("b", 1)],
        "y": [SP("a", 1), SP("a", 3), SP("b", 0)],
    }
    only_a = [MemberSubscription("x", both), MemberSubscription("y", frozenset({"a"}))]
    result = StickyAssignor().assign(only_a, parts)
    assert set(result["x"]) >= {SP("b", 0), SP("b", 1)}
    assert abs(len(result["x"]) - len(result["y"])) <= 1


def test_no_members_or_unsubscribed_streams() -> None:
    parts = [SP("a", 0)]
    for a in ALL:
        assert a.assign([], parts) == {}
        lonely = [MemberSubscription("x", frozenset({"b"}))]
        assert a.assign(lonely, parts) == {"x": []}


def test_duplicate_member_keys_are_refused() -> None:
    m = MemberSubscription("x", frozenset({"a"}))
    for a in ALL:
        with pytest.raises(ValueError, match="unique"):
            a.assign([m, m], [SP("a", 0)])


def test_builtin_registry() -> None:
    assert sorted(BUILTIN_ASSIGNORS) == ["range", "roundrobin", "sticky"]


def test_check_assignment_finds_problems() -> None:
    members = [MemberSubscription("x", frozenset({"a"})), MemberSubscription("y", frozenset())]
    parts = [SP("a", 0), SP("a", 1)]
    assert check_assignment(members, parts, {"x": parts}) is None
    assert "unknown member" in str(check_assignment(members, parts, {"z": parts}))
    assert "twice" in str(check_assignment(members, parts, {"x": [SP("a", 0), SP("a", 0)]}))
    assert "not assigned" in str(check_assignment(members, parts, {"x": [SP("a", 0)]}))
    assert "not a partition" in str(check_assignment(members, parts, {"x": [*parts, SP("a", 9)]}))
    assert "does not subscribe" in str(check_assignment(members, parts, {"y": parts}))
    assert "not a StreamPartition" in str(check_assignment(members, parts, {"x": [("a", 0)]}))
