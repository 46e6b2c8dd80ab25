"""The replica core's decisions, event by event (the simulation drives it as a whole)."""

from __future__ import annotations

from typing import NamedTuple

from jetsdk.codec.error_codes import ErrorCode
from jetserver.metadata.model import PartitionAssignment
from jetserver.replication import LeaderPolicy
from jetserver.replication.core import (
    ROLE_FOLLOWER,
    ROLE_LEADER,
    ROLE_NONE,
    ROLE_SINGLE,
    Plan,
    ReplicaCore,
)


class Ack(NamedTuple):
    offset: int
    rid: int


def a(
    leader: str, epoch: int = 1, isr: tuple[str, ...] = ("s1", "s2", "s3"), pe: int = 0
) -> PartitionAssignment:
    return PartitionAssignment(0, leader, ("s1", "s2", "s3"), isr, epoch, pe)


def test_a_server_alone_acks_what_is_flushed() -> None:
    core: ReplicaCore[Ack] = ReplicaCore(me="s1", clustered=False)
    assert core.role == ROLE_SINGLE
    assert core.leading
    for i in range(3):
        core.add_pending(Ack(i, i))
    out = core.flushed(2, leo=3, hw=0)
    assert out.hw == 2
    assert [(p.rid, code) for p, code, _ in out.acks] == [(0, ErrorCode.NONE), (1, ErrorCode.NONE)]
    assert [p.offset for p in core.pending] == [2]


def test_assignments_become_plans() -> None:
    core: ReplicaCore[Ack] = ReplicaCore(me="s1", clustered=True)
    assert core.role == ROLE_NONE
    assert not core.leading
    assert core.assign(a("s2"), "h2") is Plan.FOLLOW
    core.end_role(ROLE_FOLLOWER)
    core.follow(a("s2"), "h2")
    assert core.assign(a("s2"), "h2") is Plan.KEEP
    assert core.assign(a("s2"), "elsewhere") is Plan.FOLLOW
    assert core.assign(a("s1", epoch=2), "h1") is Plan.LEAD
    core.end_role(ROLE_NONE)
    core.lead(a("s1", epoch=2), leo=10, flushed=10, hw=8, now=0.0)
    assert core.role == ROLE_LEADER
    assert core.assign(a("s1", epoch=2, isr=("s1", "s2"), pe=1), "h1") is Plan.ADOPT_ISR
    assert core.assign(PartitionAssignment(0, "s2", ("s2", "s3"), ("s2", "s3"), 3), "") is Plan.NONE


def test_a_damaged_replica_steps_aside_while_another_can_lead() -> None:
    core: ReplicaCore[Ack] = ReplicaCore(me="s1", clustered=True, damaged=True, found_damage=True)
    assert core.assign(a("s1"), "h1") is Plan.STEP_ASIDE
    assert core.assign(a("s1", epoch=2, isr=("s1",)), "h1") is Plan.LEAD
    core.caught_up()
    assert core.assign(a("s1", epoch=3), "h1") is Plan.LEAD


def test_losing_the_leadership_fails_pending_acks_with_not_leader() -> None:
    core: ReplicaCore[Ack] = ReplicaCore(me="s1", clustered=True, policy=LeaderPolicy(min_isr=2))
    core.assign(a("s1"), "h1")
    core.lead(a("s1"), leo=0, flushed=0, hw=0, now=0.0)
    core.add_pending(Ack(0, 7))
    out = core.end_role(ROLE_FOLLOWER)
    assert out.leadership_ended
    assert [(p.rid, code) for p, code, _ in out.acks] == [(7, ErrorCode.NOT_LEADER)]
    assert core.leader_state is None
    assert not core.pending


def test_the_hw_waits_for_the_isr_and_a_cut_fails_the_acks_above_it() -> None:
    core: ReplicaCore[Ack] = ReplicaCore(me="s1", clustered=True, policy=LeaderPolicy(min_isr=2))
    core.assign(a("s1", isr=("s1", "s2")), "h1")
    core.lead(a("s1", isr=("s1", "s2")), leo=0, flushed=0, hw=0, now=0.0)
    for i in range(4):
        core.add_pending(Ack(i, i))
    assert core.appended(4, 0) is None  # durability flushed: a flush commits
    assert core.flushed(4, leo=4, hw=0).hw is None  # s2 has not fetched
    out = core.replica_fetched("s2", 2, 2, 0.1, hw=0)
    assert out.hw == 2
    assert [p.rid for p, _, _ in out.acks] == [0, 1]
    out = core.cut(3, "fsync failed")
    assert [(p.rid, code) for p, code, _ in out.acks] == [(3, ErrorCode.STORAGE_ERROR)]
    out = core.replica_fetched("s2", 4, 4, 0.2, hw=2)
    assert out.hw == 3
    assert [p.rid for p, _, _ in out.acks] == [2]


def test_acks_queued_out_of_order_are_all_sent() -> None:
    core: ReplicaCore[Ack] = ReplicaCore(me="s1", clustered=False)
    core.add_pending(Ack(5, 1))
    core.add_pending(Ack(2, 2))  # a duplicate of an earlier record
    assert core.pending_unordered
    out = core.flushed(3, leo=6, hw=0)
    assert [p.rid for p, _, _ in out.acks] == [2]
    assert not core.pending_unordered
    out = core.flushed(6, leo=6, hw=3)
    assert [p.rid for p, _, _ in out.acks] == [1]


def test_durability_written_commits_on_append() -> None:
    core: ReplicaCore[Ack] = ReplicaCore(
        me="s1", clustered=False, policy=LeaderPolicy(durability="written")
    )
    core.add_pending(Ack(0, 1))
    out = core.appended(2, 0)
    assert out is not None
    assert out.hw == 2
    assert [(p.rid, code) for p, code, _ in out.acks] == [(1, ErrorCode.NONE)]
    # The flush that follows changes nothing visible.
    assert core.flushed(2, leo=2, hw=2).hw is None


def test_durability_written_in_a_cluster_commits_on_the_leaders_append() -> None:
    core: ReplicaCore[Ack] = ReplicaCore(
        me="s1", clustered=True, policy=LeaderPolicy(durability="written")
    )
    solo = PartitionAssignment(0, "s1", ("s1",), ("s1",), 1)
    core.assign(solo, "h1")
    core.lead(solo, leo=0, flushed=0, hw=0, now=0.0)
    core.add_pending(Ack(0, 1))
    out = core.appended(1, 0)
    assert out is not None
    assert out.hw == 1
    assert [p.rid for p, _, _ in out.acks] == [1]
    # A failed fsync cuts below the HW: with "written" the HW comes back down with it.
    core.cut(0, "fsync failed")
    assert core.leader_state is not None
    assert core.leader_state.hw == 0


def test_an_idle_leader_checks_its_isr_once_per_lag_bound() -> None:
    core: ReplicaCore[Ack] = ReplicaCore(
        me="s1", clustered=True, policy=LeaderPolicy(lag_max_s=10.0)
    )
    assert core.isr_check_wait_s(0.0, 0.25) == 0.25  # not leading
    core.lead(a("s1"), leo=0, flushed=0, hw=0, now=0.0)
    assert core.isr_check_wait_s(4.0, 0.25) == 6.0  # the followers could lag at 10.0
    core.replica_fetched("s2", 0, 0, 5.0, hw=0)
    core.replica_fetched("s3", 0, 0, 7.0, hw=0)
    assert core.isr_check_wait_s(8.0, 0.25) == 7.0  # s2, caught up at 5.0, first
    assert core.isr_check_wait_s(14.9, 0.25) == 0.25  # never closer than the interval
    proposal = core.isr_proposal(16.0)
    assert proposal is not None
    assert proposal[0] == ("s1", "s3")
    assert core.isr_check_wait_s(16.0, 0.25) == 0.25  # a proposal in flight


def test_a_cut_of_records_a_follower_holds_gives_up_the_epoch_until_a_later_one() -> None:
    core: ReplicaCore[Ack] = ReplicaCore(me="s1", clustered=True, policy=LeaderPolicy(min_isr=2))
    core.assign(a("s1"), "h1")
    core.lead(a("s1"), leo=0, flushed=0, hw=0, now=0.0)
    for i in range(4):
        core.add_pending(Ack(i, i))
    core.appended(4, 0)
    core.flushed(2, leo=4, hw=0)
    state = core.leader_state
    assert state is not None
    state.note_served(4)  # followers were sent offsets 0-3; 2 and 3 are not fsynced here
    out = core.cut(2, "fsync failed")
    assert out.renew_epoch == 1
    assert out.leadership_ended
    assert core.role == ROLE_NONE
    assert not core.leading
    assert sorted((p.rid, code) for p, code, _ in out.acks) == [
        (0, ErrorCode.NOT_LEADER),  # fsynced here, maybe committed later: may or may not
        (1, ErrorCode.NOT_LEADER),
        (2, ErrorCode.STORAGE_ERROR),  # cut: not stored
        (3, ErrorCode.STORAGE_ERROR),
    ]
    assert core.assign(a("s1", pe=1), "h1") is Plan.FENCED  # the same epoch, again
    assert core.assign(a("s1", epoch=2), "h1") is Plan.LEAD  # renewed


def test_a_cut_of_records_no_follower_was_sent_keeps_the_epoch() -> None:
    core: ReplicaCore[Ack] = ReplicaCore(me="s1", clustered=True)
    core.assign(a("s1"), "h1")
    core.lead(a("s1"), leo=0, flushed=0, hw=0, now=0.0)
    core.appended(4, 0)
    core.flushed(2, leo=4, hw=0)
    out = core.cut(2, "fsync failed")
    assert out.renew_epoch is None
    assert core.role == ROLE_LEADER
