"""Replication's invariants fire on a broken state (issue 37, item 5): cheap checks that
stay on in the server, each shown here tripping on the state it guards against."""

from __future__ import annotations

from typing import NamedTuple

import pytest

from jetserver.metadata.model import PartitionAssignment
from jetserver.replication import LeaderPolicy, LeaderState
from jetserver.replication.core import ROLE_NONE, ReplicaCore
from jetserver.replication.invariants import ReplicaInvariantViolation


class Ack(NamedTuple):
    offset: int


def assignment(leader: str, epoch: int) -> PartitionAssignment:
    return PartitionAssignment(0, leader, ("s1", "s2"), ("s1", "s2"), epoch, 0)


def test_the_high_watermark_never_passes_the_leaders_log_end() -> None:
    state = LeaderState.start(
        leader="s1", leader_epoch=1, replicas=("s1", "s2"), isr=("s1", "s2"),
        policy=LeaderPolicy(lag_max_s=10.0), leo=10, flushed=10, hw=5, now=0.0,
    )  # fmt: skip
    assert state.on_fetch("s2", 10, 10, now=1.0)  # the follower has it all: HW 10
    assert state.hw == 10
    state.on_append(12)
    state.flushed = 20  # a bug: the leader vouches for records past its log end
    with pytest.raises(ReplicaInvariantViolation, match="would pass the leader's log end 12"):
        state.on_fetch("s2", 20, 20, now=2.0)
    assert state.hw == 10  # nothing was acted on


def test_a_replica_never_takes_an_older_leader_epoch() -> None:
    core: ReplicaCore[Ack] = ReplicaCore(me="s1", clustered=True)
    core.follow(assignment("s2", 3), "h2")
    core.end_role(ROLE_NONE)
    core.lead(assignment("s1", 4), leo=0, flushed=0, hw=0, now=0.0)
    core.end_role(ROLE_NONE)
    core.lead(assignment("s1", 4), leo=0, flushed=0, hw=0, now=0.0)  # the same: allowed
    core.end_role(ROLE_NONE)
    with pytest.raises(ReplicaInvariantViolation, match="follow in leader epoch 3 after"):
        core.follow(assignment("s2", 3), "h2")
    with pytest.raises(ReplicaInvariantViolation, match="lead in leader epoch 2 after"):
        core.lead(assignment("s1", 2), leo=0, flushed=0, hw=0, now=0.0)
