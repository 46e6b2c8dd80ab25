"""Simple commits (spec/groups.md §7.2): commits from outside the membership, generation -1."""

from __future__ import annotations

import pytest

from jetsdk.group.changes import CommitAccepted, CommitRejected, PartitionAcquired
from jetsdk.group.errors import InvalidGroupRecord
from jetsdk.group.records import SIMPLE_GENERATION, decode_record, encode_record
from jetsdk.group.state import GroupState
from jetsdk.group.stream_partition import StreamPartition as SP

from .helpers import GROUP, Log, checkpoint, commit, join, leave

S = [SP("s", i) for i in range(4)]
OTHER = SP("t", 0)
"""A partition of a stream no member subscribes to."""


def test_accepted_with_no_members_and_may_move_back() -> None:
    log = Log()
    assert log.add(commit("spark", S[0], SIMPLE_GENERATION, 50), 0.0) == [
        CommitAccepted("spark", S[0], 50)
    ]
    # Like an offset reset: a simple commit may move the offset back.
    assert log.add(commit("spark", S[0], SIMPLE_GENERATION, 20), 0.1) == [
        CommitAccepted("spark", S[0], 20)
    ]
    got = log.state.committed(S[0])
    assert got is not None
    assert (got.position.offset, got.member, got.generation) == (20, "spark", SIMPLE_GENERATION)


def test_refused_while_a_member_owns_or_targets_the_partition() -> None:
    log = Log()
    log.add(commit("spark", S[1], SIMPLE_GENERATION, 7), 0.0)
    changes = log.add(join("a"), 0.1)
    # The member starts from the simple commit's offset.
    assert PartitionAcquired("a", S[1], 1, 7) in changes
    assert log.add(commit("spark", S[1], SIMPLE_GENERATION, 99), 0.2) == [
        CommitRejected("spark", S[1], 99, "group_active")
    ]
    # A partition of a stream nobody in the group subscribes to stays open to simple commits.
    assert log.add(commit("spark", OTHER, SIMPLE_GENERATION, 3), 0.3) == [
        CommitAccepted("spark", OTHER, 3)
    ]
    # A simple commit does not touch a member that happens to share its name.
    log.add(commit("a", S[2], SIMPLE_GENERATION, 1), 0.4)
    # Once the member left (final offset 11), simple commits apply again.
    log.add(leave("a", (S[1], 1, 11)), 0.5)
    assert log.state.committed(S[1]) is not None
    assert log.add(commit("spark", S[1], SIMPLE_GENERATION, 5), 0.6) == [
        CommitAccepted("spark", S[1], 5)
    ]


def test_a_member_cannot_use_generation_minus_one_to_bypass_fencing() -> None:
    log = Log()
    log.add(join("a"), 0.0)
    log.add(commit("a", S[0], 1, 10), 0.1)
    assert log.add(commit("a", S[0], SIMPLE_GENERATION, 2), 0.2) == [
        CommitRejected("a", S[0], 2, "group_active")
    ]
    got = log.state.committed(S[0])
    assert got is not None
    assert got.position.offset == 10


def test_record_and_checkpoint_round_trip() -> None:
    rec = commit("spark", S[3], SIMPLE_GENERATION, 42)
    data = encode_record(rec)
    assert b'"generation":-1' in data
    assert decode_record(data) == rec
    with pytest.raises(InvalidGroupRecord):
        decode_record(data.replace(b'"generation":-1', b'"generation":-2'))
    log = Log()
    log.add(rec, 0.0)
    restored = GroupState.restore(checkpoint("x", log.state).state)
    assert restored.snapshot() == log.state.snapshot()
    got = restored.committed(S[3])
    assert got is not None
    assert got.generation == SIMPLE_GENERATION
    assert restored.group == GROUP
