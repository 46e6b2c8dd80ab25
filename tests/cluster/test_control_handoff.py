"""Graceful shutdown plans (pure): which leaderships move where, which ISRs are left.

A leadership goes only to an ISR member that answered the stopping server's probe
(``live``); issue 31, case 8: a server killed 0.4 s before a graceful stop was handed
leaderships (the plan took the first other ISR member whatever the liveness view said).
"""

from __future__ import annotations

from jetserver.cluster.handoff import HandoffPlan, handoff_candidates, plan_handoffs, plan_isr_exits
from jetserver.metadata.model import MetadataState, StreamSpec
from jetserver.metadata.ops import CreateStream, ElectLeader, LeaveIsr, UpdateIsr, apply

R3 = ("s1", "s2", "s3")
ALL_LIVE = frozenset(R3)


def state_with_stream() -> MetadataState:
    """orders/0: leader s1, ISR (s1, s2, s3); orders/1: leader s2, ISR (s2, s3, s1)."""
    spec = StreamSpec(name="orders", subject="orders", partitions=2, replication_factor=3)
    state, result = apply(MetadataState(), CreateStream(spec, "id1", 5, (R3, ("s2", "s3", "s1"))))
    assert result.ok
    return state


def test_leaderships_go_to_the_next_isr_member_in_replica_order() -> None:
    state = state_with_stream()
    state, _ = apply(state, UpdateIsr("orders", 0, "s1", 0, ("s1", "s3")))
    plan = plan_handoffs(state, "s1", ALL_LIVE)
    assert plan == HandoffPlan((ElectLeader("orders", 0, "s3", 1, "id1"),), (), ())
    after, result = apply(state, plan.elections[0])
    assert result.ok
    assert plan_handoffs(after, "s1", ALL_LIVE) == HandoffPlan((), (), ())


def test_a_leader_alone_in_its_isr_keeps_the_partition() -> None:
    state = state_with_stream()
    state, _ = apply(state, UpdateIsr("orders", 0, "s1", 0, ("s1",)))
    assert plan_handoffs(state, "s1", ALL_LIVE) == HandoffPlan((), ("orders/0",), ())


def test_a_leadership_goes_only_to_an_isr_member_that_answered() -> None:
    state = state_with_stream()  # orders/0: replicas and ISR s1, s2, s3; led by s1
    assert handoff_candidates(state, "s1") == {"s2", "s3"}
    # s2 (next in replica order) was killed just before: it did not answer the probe.
    plan = plan_handoffs(state, "s1", {"s1", "s3"})
    assert plan.elections == (ElectLeader("orders", 0, "s3", 1, "id1"),)
    # Answering servers outside the ISR are never candidates.
    state, _ = apply(state, UpdateIsr("orders", 0, "s1", 0, ("s1", "s2")))
    assert handoff_candidates(state, "s1") == {"s2"}
    plan = plan_handoffs(state, "s1", {"s1", "s3"})
    assert plan == HandoffPlan((), (), ("orders/0",))


def test_no_answering_isr_member_means_no_handoff() -> None:
    """The partition stays with the stopping leader: once it is gone, the election rules
    decide (a live ISR member that reports it silent takes over; if none is alive, the
    partition waits for one)."""
    state = state_with_stream()
    plan = plan_handoffs(state, "s1", set())
    assert plan == HandoffPlan((), (), ("orders/0",))
    plan = plan_handoffs(state, "s2", {"s1"})  # orders/1: s2 leads, ISR s2, s3, s1
    assert plan.elections == (ElectLeader("orders", 1, "s1", 1, "id1"),)


def test_a_follower_leaves_every_isr_it_shares_by_removing_only_itself() -> None:
    state = state_with_stream()
    ops = plan_isr_exits(state, "s3")
    assert ops == [LeaveIsr("orders", 0, "s3", "id1"), LeaveIsr("orders", 1, "s3", "id1")]
    for op in ops:
        state, result = apply(state, op)
        assert result.ok
    assert plan_isr_exits(state, "s3") == []
    # A leader is never planned out of its own ISR (it hands the leadership over first).
    assert all(op.partition != 0 for op in plan_isr_exits(state, "s1"))


def test_an_exit_planned_before_a_leader_change_still_removes_only_the_leaver() -> None:
    state = state_with_stream()
    (op, *_rest) = plan_isr_exits(state, "s3")
    state, _ = apply(state, ElectLeader("orders", 0, "s2", 1, "id1"))  # s1 leaves the ISR
    state, result = apply(state, op)
    assert result.ok
    a = state.streams["orders"].partitions[0]
    assert (a.leader, a.isr) == ("s2", ("s2",))  # s1 is not put back


def test_the_leader_cannot_leave_its_own_isr() -> None:
    _, result = apply(state_with_stream(), LeaveIsr("orders", 0, "s1", "id1"))
    assert not result.ok
