from __future__ import annotations

import random
from collections.abc import Sequence

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jetsdk.group.assignors import BUILTIN_ASSIGNORS, MemberSubscription
from jetsdk.group.changes import (
    AssignorFailed,
    CommitAccepted,
    CommitRejected,
    GenerationChanged,
    MemberAdded,
    MemberParked,
    MemberRemoved,
    PartitionAcquired,
    PartitionReleased,
    RecordIgnored,
    ReleaseCancelled,
    ReleaseIgnored,
    ReleaseRequested,
)
from jetsdk.group.errors import InvalidGroupRecord, UnknownAssignor
from jetsdk.group.membership import MemberInfo
from jetsdk.group.records import GroupRecord, Heartbeat
from jetsdk.group.state import GroupState
from jetsdk.group.stream_partition import StreamPartition as SP

from .helpers import GROUP, Log, checkpoint, commit, hb, join, leave, ns, owners, release

S = [SP("s", i) for i in range(4)]


def settled_pair() -> Log:
    """a joined at 0, b at 0.1; a released s2, s3 at 0.2."""
    log = Log()
    log.add(join("a"), 0.0)
    log.add(join("b"), 0.1)
    log.add(release("a", (S[2], 1, 20), (S[3], 1, 30)), 0.2)
    assert log.state.is_settled()
    return log


def test_first_member_gets_everything() -> None:
    log = Log()
    changes = log.add(join("a"), 0.0)
    assert changes[0] == MemberAdded("a")
    assert isinstance(changes[1], GenerationChanged)
    assert changes[2:] == [PartitionAcquired("a", p, 1, None) for p in S]
    state = log.state
    assert state.generation == 1
    assert state.assignor == "sticky"
    assert state.assignment() == {"a": S}
    assert state.leader() == "a"
    assert state.is_settled()


def test_cooperative_handoff_and_commit_fencing() -> None:
    log = Log()
    log.add(join("a"), 0.0)
    changes = log.add(join("b"), 0.1)
    assert log.state.generation == 2
    assert log.state.assignment() == {"a": S[:2], "b": S[2:]}
    force = ns(0.1) + 2_000_000_000
    assert ReleaseRequested("a", S[2], force) in changes
    # b does not own s2 until a releases it: nobody consumes it twice.
    assert owners(log.state)[S[2]] == "a"
    assert not log.state.is_settled()
    assert log.add(commit("b", S[2], 2, 5), 0.11) == [CommitRejected("b", S[2], 5, "not_owner")]
    assert log.add(commit("a", S[2], 1, 10), 0.12) == [CommitAccepted("a", S[2], 10)]
    changes = log.add(release("a", (S[2], 1, 12)), 0.13)
    assert changes == [
        CommitAccepted("a", S[2], 12),
        PartitionReleased("a", S[2], "released"),
        PartitionAcquired("b", S[2], 2, 12),
    ]
    assert log.add(commit("b", S[2], 2, 15), 0.14) == [CommitAccepted("b", S[2], 15)]
    # A late commit from the old owner never moves the offset.
    assert log.add(commit("a", S[2], 1, 20), 0.15) == [CommitRejected("a", S[2], 20, "not_owner")]
    assert log.add(commit("b", S[2], 1, 20), 0.16) == [
        CommitRejected("b", S[2], 20, "stale_generation")
    ]
    assert log.add(commit("b", S[2], 2, 14), 0.17) == [CommitRejected("b", S[2], 14, "regression")]
    committed = log.state.committed(S[2])
    assert committed is not None
    assert (committed.position.offset, committed.member, committed.generation) == (15, "b", 2)
    assert committed.timestamp == ns(0.14)


def test_release_by_the_owner_always_releases() -> None:
    log = settled_pair()  # generation 2; a acquired s0 in 1, b acquired s2 in 2
    # a still has s0 as target but releases it: ownership ends, a re-acquires it anew.
    changes = log.add(release("a", (S[0], 1, 7)), 0.3)
    assert changes == [
        CommitAccepted("a", S[0], 7),
        PartitionReleased("a", S[0], "released"),
        PartitionAcquired("a", S[0], 2, 7),
    ]
    # Nothing to hand over: b acquired s2 in the current generation and is its target.
    assert log.add(release("b", (S[2], 2, None)), 0.4) == [ReleaseIgnored("b", S[2])]
    # Not the owner, or not its owner generation: ignored.
    assert log.add(release("b", (S[0], 2, None)), 0.5) == [ReleaseIgnored("b", S[0])]
    assert log.add(release("a", (S[0], 1, None)), 0.6) == [ReleaseIgnored("a", S[0])]


def test_expiry_waits_for_a_later_record() -> None:
    log = settled_pair()
    log.add(hb("a"), 0.5)
    log.add(hb("b"), 0.9)
    log.add(hb("b"), 1.5)  # a's deadline is 0.5 + 1.0: not passed yet (strictly)
    assert log.state.member("a") is not None
    changes = log.add(hb("b"), 1.5001)
    assert changes[0] == MemberRemoved("a", "expired")
    assert PartitionReleased("a", S[0], "expired") in changes
    assert PartitionAcquired("b", S[0], 3, None) in changes
    assert log.state.assignment() == {"b": S}
    assert log.state.is_settled()


def test_no_record_means_no_expiry() -> None:
    log = settled_pair()
    assert log.state.member("a") is not None
    # The clock only moves with records: a record of another group does not expire anyone.
    other = Heartbeat(group="other", member="x")
    assert log.state.apply(other, offset=99, timestamp=ns(100)) == []
    assert log.state.member("a") is not None
    assert log.state.clock == ns(0.2)


def test_forced_release_after_release_timeout() -> None:
    log = Log()
    log.add(join("a"), 0.0)
    log.add(hb("a"), 0.9)
    log.add(join("b"), 1.0)  # force at 1.0 + 2.0
    for t in (1.5, 2.0, 2.5, 3.0):
        log.add(hb("a"), t)
        log.add(hb("b"), t)
    assert owners(log.state)[S[2]] == "a"
    changes = log.add(hb("b"), 3.01)
    assert PartitionReleased("a", S[2], "forced") in changes
    assert PartitionAcquired("b", S[2], 2, None) in changes
    assert log.state.member("a") is not None  # a stays, only the partitions move


def test_release_cancelled_when_assigned_back() -> None:
    log = Log()
    log.add(join("a"), 0.0)
    log.add(join("b"), 0.1)
    changes = log.add(leave("b"), 0.2)
    assert ReleaseCancelled("a", S[2]) in changes
    assert log.state.is_settled()
    # a's release arriving late still ends that ownership; a gets s2 again, anew.
    changes = log.add(release("a", (S[2], 1, 9)), 0.3)
    assert changes == [
        CommitAccepted("a", S[2], 9),
        PartitionReleased("a", S[2], "released"),
        PartitionAcquired("a", S[2], 3, 9),
    ]


def test_leave_commits_then_hands_over() -> None:
    log = settled_pair()
    changes = log.add(leave("b", (S[2], 2, 25), (S[3], 2, 35)), 0.3)
    assert changes[:2] == [CommitAccepted("b", S[2], 25), CommitAccepted("b", S[3], 35)]
    assert PartitionAcquired("a", S[2], 3, 25) in changes
    assert log.state.member("b") is None


def test_static_restart_keeps_the_assignment() -> None:
    log = Log()
    log.add(join("a1", instance="i"), 0.0)
    log.add(join("b"), 0.1)
    log.add(release("a1", (S[2], 1, 5), (S[3], 1, None)), 0.2)
    before = log.state.assignment()
    assert before == {"a1": S[:2], "b": S[2:]}
    # a1 crashes; its restart joins with the same instance id before the session ends.
    log.add(hb("b"), 0.5)
    changes = log.add(join("a2", instance="i"), 0.6)
    assert MemberRemoved("a1", "replaced") in changes
    assert MemberAdded("a2", replaces="a1") in changes
    assert log.state.assignment() == {"a2": S[:2], "b": S[2:]}
    assert log.state.member_for_instance("i") == "a2"
    assert log.state.member("a2") is not None
    assert log.state.member("a2").joined_offset == 0  # type: ignore[union-attr]
    # b's partitions do not move; a1's wait for a1's session (0.2 + 1.0) at the latest.
    assert not any(isinstance(c, ReleaseRequested) and c.member == "b" for c in changes)
    assert ReleaseRequested("a1", S[0], ns(1.2)) in changes
    assert owners(log.state)[S[0]] == "a1"
    changes = log.add(hb("b"), 1.21)
    assert PartitionReleased("a1", S[0], "forced") in changes
    assert PartitionAcquired("a2", S[0], 3, None) in changes


def test_replaced_member_can_hand_over_cleanly() -> None:
    log = Log()
    log.add(join("a1", instance="i"), 0.0)
    log.add(join("a2", instance="i"), 0.1)
    assert log.add(commit("a1", S[0], 1, 9), 0.2) == [CommitAccepted("a1", S[0], 9)]
    assert log.add(hb("a1"), 0.25) == [RecordIgnored("a1", "heartbeat from a non-member")]
    changes = log.add(release("a1", (S[0], 1, 10)), 0.3)
    assert PartitionAcquired("a2", S[0], 2, 10) in changes
    # A leave from the old incarnation releases the rest.
    changes = log.add(leave("a1"), 0.4)
    assert {c.partition for c in changes if isinstance(c, PartitionAcquired)} == set(S[1:])
    assert log.state.members()[0].member == "a2"


def test_temporary_leave_parks_a_static_member() -> None:
    log = Log()
    log.add(join("a1", instance="i"), 0.0)
    log.add(join("b"), 0.1)
    log.add(release("a1", (S[2], 1, None), (S[3], 1, None)), 0.2)
    generation = log.state.generation
    changes = log.add(leave("a1", (S[0], 1, 3), temporary=True), 0.3)
    assert MemberParked("a1") in changes
    assert PartitionReleased("a1", S[0], "left") in changes
    assert not any(isinstance(c, PartitionAcquired) for c in changes)
    assert log.state.generation == generation
    assert log.state.leader() == "b"
    log.add(hb("a1"), 0.35)  # ignored: parked members do not heartbeat
    changes = log.add(join("a2", instance="i"), 0.5)
    assert PartitionAcquired("a2", S[0], generation + 1, 3) in changes
    assert log.state.assignment() == {"a2": S[:2], "b": S[2:]}


def test_parked_member_expires_after_its_session() -> None:
    log = Log()
    log.add(join("a1", instance="i"), 0.0)
    log.add(join("b"), 0.1)
    log.add(leave("a1", temporary=True), 0.2)
    log.add(hb("b"), 0.9)
    changes = log.add(hb("b"), 1.25)
    assert MemberRemoved("a1", "expired") in changes
    assert log.state.assignment() == {"b": S}
    assert set(owners(log.state)) == set(S)


def test_rejoin_same_spec_is_a_heartbeat() -> None:
    log = settled_pair()
    generation = log.state.generation
    assert log.add(join("a"), 0.3) == []
    assert log.state.generation == generation
    changes = log.add(join("a", {"s": 4, "t": 2}), 0.4)
    assert log.state.generation == generation + 1
    assert isinstance(changes[0], GenerationChanged)
    assert SP("t", 1) in log.state.partitions()
    assert log.add(join("a", instance="other"), 0.5) == [
        RecordIgnored("a", "join with another instance id")
    ]


def test_partition_count_is_the_largest_reported() -> None:
    log = Log()
    log.add(join("a", {"s": 2}), 0.0)
    log.add(join("b", {"s": 4}), 0.1)
    assert log.state.partitions() == S


def test_assignor_choice() -> None:
    log = Log()
    log.add(join("a", assignors=["range", "sticky"]), 0.0)
    assert log.state.assignor == "range"
    log.add(join("b", assignors=["roundrobin", "sticky"]), 0.1)
    assert log.state.assignor == "sticky"  # the oldest's first choice that all support
    log.add(join("c", assignors=["roundrobin"]), 0.2)
    assert log.state.assignor == "range"  # nothing in common: range


@attrs.frozen
class Lopsided:
    name: str = "lopsided"

    def assign(
        self, members: Sequence[MemberSubscription], partitions: Sequence[SP]
    ) -> dict[str, list[SP]]:
        return {members[0].member: list(partitions[:1])}


@attrs.frozen
class Raising:
    name: str = "raising"

    def assign(
        self, members: Sequence[MemberSubscription], partitions: Sequence[SP]
    ) -> dict[str, list[SP]]:
        raise RuntimeError("boom")


@pytest.mark.parametrize("custom", [Lopsided(), Raising()])
def test_broken_custom_assignor_falls_back_to_range(custom: Lopsided | Raising) -> None:
    state = GroupState(GROUP, assignors={**BUILTIN_ASSIGNORS, custom.name: custom})
    log = Log(state)
    changes = log.add(join("a", assignors=[custom.name, "range"]), 0.0)
    failed = [c for c in changes if isinstance(c, AssignorFailed)]
    assert len(failed) == 1
    assert failed[0].assignor == custom.name
    assert state.assignor == "range"
    assert state.assignment() == {"a": S}


def test_unknown_assignor_stops_the_reader() -> None:
    log = Log()
    with pytest.raises(UnknownAssignor):
        log.add(join("a", assignors=["mine"]), 0.0)


def test_lease_end() -> None:
    log = settled_pair()  # a: last record at 0.2 (its release); clock 0.2
    state = log.state
    assert state.lease_end("a", S[0]) == min(ns(0.2) + 1_000_000_000, ns(0.2) + 2_000_000_000)
    assert state.lease_end("b", S[0]) is None
    log.add(hb("a"), 0.9)
    log.add(join("c"), 0.95)  # something of a's must move: its lease is the force time
    pending = [p for p, o in state.owned_by("a").items() if o.releasing]
    assert pending
    own = state.ownership(pending[0])
    assert own is not None
    assert own.force_at == ns(0.95) + 2_000_000_000
    assert state.lease_end("a", pending[0]) == ns(1.9)  # session end comes first


def test_duplicates_and_other_groups_are_ignored() -> None:
    log = settled_pair()
    before = log.state.snapshot()
    assert log.state.apply(join("z"), offset=1, timestamp=ns(5)) == []
    assert log.state.apply(hb("a"), offset=2, timestamp=ns(5)) == []
    assert log.state.snapshot() == before


def test_snapshot_round_trip() -> None:
    log = settled_pair()
    log.add(commit("a", S[0], 1, 4), 0.3)
    snap = log.state.snapshot()
    restored = GroupState.restore(snap)
    assert restored.snapshot() == snap
    assert restored.assignment() == log.state.assignment()


EMPTY_SNAPSHOT: dict[str, object] = {
    "group": "g",
    "clock": 0,
    "generation": 0,
    "last_offset": 0,
    "assignor": "",
    "last_checkpoint_at": None,
    "members": [],
    "targets": [],
    "owners": [],
    "offsets": [],
}
"""A well-formed snapshot of an empty group; the malformed ones below differ in one field."""


@pytest.mark.parametrize(
    "bad",
    [
        {},
        {"group": "g", "clock": -1},
        {**EMPTY_SNAPSHOT, "members": {}},
        {**EMPTY_SNAPSHOT, "targets": [["s", 0, "ghost"]]},
        {**EMPTY_SNAPSHOT, "owners": [[1]]},
    ],
)
def test_restore_refuses_malformed_snapshots(bad: dict[str, object]) -> None:
    with pytest.raises(InvalidGroupRecord):
        GroupState.restore(bad)


def test_the_snapshot_the_malformed_ones_differ_from_restores() -> None:
    assert GroupState.restore(EMPTY_SNAPSHOT).snapshot() == EMPTY_SNAPSHOT


def random_log(rng: random.Random, n: int) -> list[tuple[GroupRecord, float]]:
    """A plausible but adversarial record sequence (stale commits, late releases...)."""
    members = ["a", "b", "c", "d"]
    out: list[tuple[GroupRecord, float]] = []
    t = 0.0
    for _ in range(n):
        t += rng.choice([0.01, 0.1, 0.3, 0.6, 1.2])
        m = rng.choice(members)
        p = SP("s", rng.randrange(4))
        kind = rng.random()
        record: GroupRecord
        if kind < 0.15:
            record = join(
                m,
                {"s": rng.choice([2, 4]), "t": 1} if rng.random() < 0.2 else None,
                instance=rng.choice([None, "i"]) if m in "ab" else None,
            )
        elif kind < 0.5:
            record = hb(m)
        elif kind < 0.7:
            record = commit(m, p, rng.randrange(1, 8), rng.randrange(0, 50))
        elif kind < 0.85:
            record = release(m, (p, rng.randrange(1, 8), rng.choice([None, 10, 40])))
        else:
            record = leave(m, (p, rng.randrange(1, 8), 30), temporary=rng.random() < 0.5)
        out.append((record, t))
    return out


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**32), cut=st.integers(0, 80))
def test_checkpoint_then_rest_equals_full_replay(seed: int, cut: int) -> None:
    records = random_log(random.Random(seed), 80)
    full = Log()
    for i, (record, t) in enumerate(records):
        full.add(record, t)
        if i + 1 == cut:
            snap = full.state.snapshot()
    if cut == 0 or cut > len(records):
        return
    resumed = GroupState.restore(snap)
    for offset, stamp, _ in full.entries[cut:]:
        record = records[offset][0]
        resumed.apply(record, offset=offset, timestamp=stamp)
    assert resumed.snapshot() == full.state.snapshot()


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**32))
def test_state_invariants_under_random_logs(seed: int) -> None:
    log = Log()
    committed: dict[SP, int] = {}
    for record, t in random_log(random.Random(seed), 120):
        changes = log.add(record, t)
        state = log.state
        # one owner per partition, owners own in a generation that existed
        for p in state.partitions():
            own = state.ownership(p)
            if own is not None:
                assert 1 <= own.generation <= state.generation
        for c in changes:
            if isinstance(c, CommitAccepted):
                assert c.offset >= committed.get(c.partition, 0)
                committed[c.partition] = c.offset
        # checkpoints written now restore to the same state
        assert GroupState.restore(checkpoint("x", state).state).snapshot() == state.snapshot()


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 2**32))
def test_reconciling_after_every_record_changes_nothing(seed: int) -> None:
    """spec/groups.md §4.2 step 6: the reconcile condition is only an optimisation."""
    lazy, eager = Log(), Log()
    for record, t in random_log(random.Random(seed), 100):
        lazy.add(record, t)
        eager.add(record, t)
        extra: list[object] = []
        eager.state._reconcile(extra)  # type: ignore[arg-type]
        assert extra == []
        assert eager.state.snapshot() == lazy.state.snapshot()


@pytest.mark.parametrize("parked", [False, True])
def test_seen_at_is_evolve_of_last_seen(parked: bool) -> None:
    # MemberInfo.seen_at is GroupState's fast path for attrs.evolve(info, last_seen=...): it
    # must carry every other field, including any a later change adds (hence all of them).
    info = MemberInfo.from_join(
        join("a", instance="i-a"), joined_offset=3, last_seen=ns(1.0), parked=parked
    )
    seen = info.seen_at(ns(2.5))
    assert seen == attrs.evolve(info, last_seen=ns(2.5))
    assert [getattr(seen, f.name) for f in attrs.fields(MemberInfo) if f.name != "last_seen"] == [
        getattr(info, f.name) for f in attrs.fields(MemberInfo) if f.name != "last_seen"
    ]
    assert seen.last_seen == ns(2.5)
    assert info.last_seen == ns(1.0)
