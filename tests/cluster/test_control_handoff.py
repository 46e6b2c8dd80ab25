"""Graceful shutdown plans (pure): which leaderships move where, which ISRs are left."""

from __future__ import annotations

from jetserver.cluster.handoff import plan_handoffs, plan_isr_exits
from jetserver.metadata.model import MetadataState, StreamSpec
from jetserver.metadata.ops import CreateStream, ElectLeader, LeaveIsr, UpdateIsr, apply

R3 = ("s1", "s2", "s3")


def state_with_stream() -> MetadataState:
    """orders/0: leader s1, ISR (s1, s2, s3); orders/1: leader s2, ISR (s2, s3, s1)."""
    spec = StreamSpec(name="orders", subject="orders", partitions=2, replication_factor=3)
    state, result = apply(MetadataState(), CreateStream(spec, "id1", 5, (R3, ("s2", "s3", "s1"))))
    assert result.ok
    return state


def test_leaderships_go_to_the_next_isr_member_in_replica_order() -> None:
    state = state_with_stream()
    state, _ = apply(state, UpdateIsr("orders", 0, "s1", 0, ("s1", "s3")))
    ops, kept = plan_handoffs(state, "s1")
    assert ops == [ElectLeader("orders", 0, "s3", 1, "id1")]
    assert kept == []
    after, result = apply(state, ops[0])
    assert result.ok
    assert plan_handoffs(after, "s1") == ([], [])


def test_a_leader_alone_in_its_isr_keeps_the_partition() -> None:
    state = state_with_stream()
    state, _ = apply(state, UpdateIsr("orders", 0, "s1", 0, ("s1",)))
    assert plan_handoffs(state, "s1") == ([], ["orders/0"])


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
