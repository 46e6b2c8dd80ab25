"""LeaderState: follower progress, HW, ISR shrink/expand, min ISR (pure)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from jetserver.replication import LeaderPolicy, LeaderState

LAG = 10.0


def leader(
    *,
    isr: tuple[str, ...] = ("a", "b", "c"),
    durability: str = "flushed",
    min_isr: int = 2,
    leo: int = 0,
    hw: int = 0,
    now: float = 0.0,
) -> LeaderState:
    return LeaderState.start(
        leader="a",
        leader_epoch=1,
        replicas=("a", "b", "c"),
        isr=isr,
        policy=LeaderPolicy(durability=durability, min_isr=min_isr, lag_max_s=LAG),
        leo=leo,
        flushed=leo,
        hw=hw,
        now=now,
    )


def test_hw_is_min_flushed_over_the_isr() -> None:
    s = leader()
    s.on_append(10)
    assert not s.on_flush(10)  # followers have not fetched: HW stays
    assert s.hw == 0
    assert not s.on_fetch("b", 10, 10, 1.0)
    assert s.on_fetch("c", 10, 7, 1.0)
    assert s.hw == 7
    assert s.on_fetch("c", 10, 10, 1.1)
    assert s.hw == 10


def test_flushed_durability_waits_for_the_leaders_own_fsync() -> None:
    s = leader()
    s.on_append(10)
    s.on_fetch("b", 10, 10, 1.0)
    s.on_fetch("c", 10, 10, 1.0)
    assert s.hw == 0
    assert s.on_flush(10)
    assert s.hw == 10


def test_replicated_durability_counts_follower_leos_and_the_leaders_flush() -> None:
    s = leader(durability="replicated")
    s.on_append(10)
    s.on_fetch("b", 10, 0, 1.0)
    s.on_fetch("c", 8, 0, 1.0)
    assert s.hw == 0  # the leader itself always fsyncs before committing
    assert s.on_flush(10)
    assert s.hw == 8


def test_hw_never_decreases_and_never_passes_the_leo() -> None:
    s = leader(leo=5, hw=5)
    s.on_fetch("b", 5, 5, 1.0)
    s.on_fetch("c", 5, 5, 1.0)
    assert s.hw == 5
    s.on_fetch("b", 3, 3, 2.0)  # the follower restarted with less
    assert s.hw == 5
    s2 = leader(leo=5, hw=0, isr=("a",))
    assert s2.hw == 5  # ISR of one: the leader's flushed offset


def test_a_lagging_follower_is_dropped_and_hw_waits_for_the_metadata() -> None:
    s = leader()
    s.on_append(10)
    s.on_flush(10)
    s.on_fetch("b", 10, 10, 1.0)
    assert s.isr_proposal(5.0) is None
    assert s.hw == 0  # c never fetched: it holds the HW back
    proposal = s.isr_proposal(LAG + 0.5)
    assert proposal == ("a", "b")
    assert s.pending_isr == ("a", "b")
    assert s.maximal_isr == ("a", "b", "c")
    assert s.hw == 0  # not committed yet
    assert s.isr_proposal(LAG + 0.6) is None  # one in flight at a time
    assert s.proposal_done(("a", "b"), accepted=True)
    assert s.isr == ("a", "b")
    assert s.hw == 10


def test_a_refused_proposal_changes_nothing() -> None:
    s = leader()
    proposal = s.isr_proposal(LAG + 1)
    assert proposal == ("a",)
    assert not s.proposal_done(proposal, accepted=False)
    assert s.isr == ("a", "b", "c")
    assert s.pending_isr is None


def under_load(s: LeaderState, rounds: int, fetched: Callable[[int, int], dict[str, int]]) -> float:
    """``rounds`` of 0.5 s, each: the leader appends and flushes 10 records, then every
    follower of ``fetched(round, leo)`` fetches from (and has flushed) its offset. The
    time at the end."""
    leo = 0
    t = 0.0
    for i in range(rounds):
        t += 0.5
        leo += 10
        s.on_append(leo)
        s.on_flush(leo)
        for follower, offset in fetched(i, leo).items():
            s.on_fetch(follower, offset, offset, t)
    return t


def test_a_follower_that_keeps_up_under_load_stays_in_sync() -> None:
    s = leader()
    # b and c fetch what the leader had at their previous fetch: never exactly at the end
    t = under_load(s, 100, lambda _i, leo: {"b": leo - 10, "c": leo - 10})
    assert s.isr_proposal(t) is None


def test_a_slow_follower_is_dropped() -> None:
    s = leader()
    t = under_load(s, 40, lambda i, leo: {"b": leo, "c": i})  # c falls further behind
    assert s.isr_proposal(t) == ("a", "b")


def test_a_caught_up_follower_rejoins() -> None:
    s = leader(isr=("a", "b"))
    s.on_append(10)
    s.on_flush(10)
    s.on_fetch("b", 10, 10, 1.0)
    assert s.hw == 10
    s.on_fetch("c", 4, 4, 1.0)
    assert s.isr_proposal(1.0) is None
    s.on_fetch("c", 10, 10, 1.5)
    proposal = s.isr_proposal(1.5)
    assert proposal == ("a", "b", "c")
    # while the expansion is in flight, c already counts for the HW
    s.on_append(20)
    s.on_flush(20)
    s.on_fetch("b", 20, 20, 2.0)
    assert s.hw == 10
    s.on_fetch("c", 20, 20, 2.0)
    assert s.hw == 20
    s.proposal_done(proposal, accepted=True)
    assert s.isr == ("a", "b", "c")


def test_rejoin_needs_the_current_epoch() -> None:
    s = leader(isr=("a",), leo=50, hw=40)
    s.on_fetch("c", 45, 45, 1.0)  # behind this epoch's start: not reconciled/caught up
    assert s.isr_proposal(1.0) is None


def test_min_isr() -> None:
    s = leader(min_isr=2)
    assert s.enough_replicas()
    s.set_isr(("a",))
    assert not s.enough_replicas()
    assert not s.committed_on_enough()
    s.set_isr(("a", "c"))
    assert s.enough_replicas()


def test_hw_sent_tracking() -> None:
    s = leader(isr=("a",), leo=3, hw=0)
    assert s.hw == 3
    assert s.follower_needs_hw("b")
    s.note_hw_sent("b", 3)
    assert not s.follower_needs_hw("b")


def test_hw_news_alone_waits_for_the_delay_records_do_not() -> None:
    s = LeaderState.start(
        leader="a", leader_epoch=1, replicas=("a", "b", "c"), isr=("a", "b", "c"),
        policy=LeaderPolicy(lag_max_s=LAG, hw_news_delay_s=0.025), leo=0, flushed=0, hw=0, now=0.0,
    )  # fmt: skip
    s.on_append(1)
    s.on_flush(1)
    assert s.fetch_has_news("b", 0, 1, 0.0)  # records: at once
    s.note_hw_sent("b", 0)
    s.on_fetch("b", 1, 1, 1.0)
    assert s.on_fetch("c", 1, 1, 1.0)  # c's report moved the HW
    assert s.hw == 1
    # c parks at once with only HW news: not answered before the delay.
    assert not s.fetch_has_news("c", 1, 1, 0.0)
    assert s.hw_news_due_s("c", 0.0) == pytest.approx(0.025)
    assert not s.fetch_has_news("b", 1, 1, 0.010)
    assert s.hw_news_due_s("b", 0.010) == pytest.approx(0.015)
    assert s.fetch_has_news("b", 1, 1, 0.025)  # the delay is over: the HW alone
    assert s.hw_news_due_s("b", 0.025) == 0.0
    assert s.fetch_has_news("c", 1, 2, 0.0)  # new records carry it at once
    s.note_hw_sent("c", s.hw)
    assert s.hw_news_due_s("c", 0.0) is None  # nothing to tell: the long poll's end
    assert not s.fetch_has_news("c", 1, 1, 100.0)


def test_hw_news_delay_zero_answers_the_hw_at_once() -> None:
    s = leader(leo=1, hw=1)
    assert s.policy.hw_news_delay_s == 0.0
    assert s.fetch_has_news("b", 1, 1, 0.0)
    s.note_hw_sent("b", 1)
    assert not s.fetch_has_news("b", 1, 1, 0.0)


def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match="durability"):
        leader(durability="maybe")
    with pytest.raises(ValueError, match="replica"):
        LeaderState.start(
            leader="z",
            leader_epoch=0,
            replicas=("a",),
            isr=("a",),
            policy=LeaderPolicy(lag_max_s=1),
            leo=0,
            flushed=0,
            hw=0,
            now=0,
        )
    with pytest.raises(KeyError):
        leader().on_fetch("z", 0, 0, 0.0)


def test_caught_up_is_measured_against_what_the_leader_can_replicate() -> None:
    s = leader()
    s.on_append(100)  # appended, not yet fsynced: replicable (the follower fsyncs alongside)
    assert s.replicable_end == 100
    s.on_fetch("b", 0, 0, 20.0)
    assert not s.followers["b"].caught_up_at_last_fetch
    s.on_fetch("b", 100, 0, 21.0)
    assert s.followers["b"].last_caught_up_s == 21.0
    s.on_append(200)
    s.on_fetch("b", 150, 100, 22.0)  # a partial catch-up
    assert s.followers["b"].last_caught_up_s == 22.0 - 1.0  # reached the end of its last fetch
    assert s.hw == 0  # nothing the leader has not fsynced commits


def test_a_cut_of_records_a_follower_was_sent_ends_the_epoch() -> None:
    s = leader()
    s.on_append(10)
    s.on_flush(6)
    s.note_served(8)  # a replica fetch answer carried offsets 6 and 7, not yet fsynced here
    assert not s.on_cut(8)  # nothing sent was cut
    assert s.on_cut(6)
    assert (s.leo, s.flushed) == (6, 6)


def test_a_failed_expansion_keeps_counting_the_member_until_resolved() -> None:
    s = leader(isr=("a", "b"))
    s.on_append(10)
    s.on_flush(10)
    s.on_fetch("b", 10, 10, 1.0)
    s.on_fetch("c", 10, 10, 1.0)
    proposal = s.isr_proposal(1.0)
    assert proposal == ("a", "b", "c")
    s.proposal_done(proposal, accepted=False)  # maybe applied after all
    assert s.maximal_isr == ("a", "b", "c")
    s.on_append(20)
    s.on_flush(20)
    s.on_fetch("b", 20, 20, 2.0)
    assert s.hw == 10  # c may be in the metadata's ISR: it still counts
    assert s.isr_proposal(2.0) == ("a", "b", "c")  # proposed again
    s.proposal_done(("a", "b", "c"), accepted=True)
    assert s.unresolved == frozenset()
    s2 = leader(isr=("a", "b"))
    s2.on_fetch("c", 0, 0, 1.0)
    p2 = s2.isr_proposal(1.0)
    assert p2 is not None
    s2.proposal_done(p2, accepted=False)
    s2.set_isr(("a", "b"))  # the metadata says it was not applied
    assert s2.maximal_isr == ("a", "b")


def test_the_maximal_isr_is_built_once_while_a_change_is_pending() -> None:
    # A failover's re-pointed followers fetch thousands of times while their leaders' ISR
    # proposals are pending: each fetch's HW asked for a new tuple built from sets.
    s = leader(isr=("a", "b"))
    s.on_fetch("c", 0, 0, 1.0)
    proposal = s.isr_proposal(1.0)
    assert proposal == ("a", "b", "c")
    first = s.maximal_isr
    assert first == ("a", "b", "c")
    for t in range(100):
        s.on_fetch("b", 0, 0, 1.0 + t)
        assert s.maximal_isr is first
    s.proposal_done(proposal, accepted=False)
    assert s.maximal_isr == ("a", "b", "c")  # unresolved: rebuilt for the new inputs
    s.set_isr(("a", "b"))
    assert s.maximal_isr == ("a", "b")


def test_next_shrink_is_when_the_first_isr_follower_could_lag() -> None:
    s = leader(now=0.0)
    assert s.next_shrink_s(2.0) == LAG - 2.0  # nobody fetched: due from the epoch start
    s.on_fetch("b", 0, 0, 3.0)  # caught up at 3.0
    s.on_fetch("c", 0, 0, 5.0)  # caught up at 5.0
    assert s.next_shrink_s(6.0) == 3.0 + LAG - 6.0  # b's bound comes first
    assert s.isr_proposal(3.0 + LAG - 0.01) is None  # nothing due before then
    assert s.next_shrink_s(100.0) == 0.0  # overdue
    assert s.isr_proposal(100.0) == ("a",)
    alone = leader(isr=("a",))
    assert alone.next_shrink_s(1.0) is None  # no ISR follower: nothing can shrink


def test_a_follower_parked_at_the_end_is_in_sync_through_a_poll_over_the_lag_bound() -> None:
    # An idle partition whose followers' long polls (fetch_max_wait_s) outlast
    # replica_lag_max_s: a fetch parked at the leader's end is caught up until it is
    # answered. Before, each follower left the ISR lag_max_s after its fetch arrived and
    # rejoined at its next one: the ISR flapped, and two followers out of phase were never
    # in it together (a CI failure: "a full ISR of 3" not within 30 s).
    s = leader(leo=10, hw=10)
    s.on_fetch("b", 10, 10, 1.0, poll_s=3 * LAG)
    s.on_fetch("c", 10, 10, 1.0 + LAG / 2, poll_s=3 * LAG)
    assert s.isr_proposal(1.0 + 2 * LAG) is None
    assert s.next_shrink_s(1.0 + 2 * LAG) == 2 * LAG  # b's poll runs until 1 + 3 LAG
    # records arrive: the parked fetches are answered, and the followers ask again
    s.on_append(20)
    s.on_flush(20)
    assert s.isr_proposal(1.5 + 2 * LAG) is None  # answered: about to ask again
    s.on_fetch("b", 10, 10, 2.0 + 2 * LAG)
    s.on_fetch("c", 20, 20, 2.0 + 2 * LAG)
    assert s.isr_proposal(2.0 + 2.5 * LAG) is None  # b was caught up until its answer


def test_a_follower_gone_while_parked_leaves_the_isr_once_its_long_poll_is_over() -> None:
    s = leader(leo=10, hw=10)
    s.on_fetch("b", 10, 10, 1.0, poll_s=5.0)
    s.on_fetch("c", 10, 10, 1.0, poll_s=5.0)
    s.on_fetch("c", 10, 10, 6.0, poll_s=5.0)  # c asks again; b never does
    assert s.isr_proposal(6.0 + LAG - 0.01) is None
    assert s.isr_proposal(6.0 + LAG + 0.01) == ("a", "c")


def test_a_parked_follower_answered_and_gone_lags_from_its_answer() -> None:
    s = leader(leo=10, hw=10)
    s.on_fetch("b", 10, 10, 1.0, poll_s=5.0)
    s.on_fetch("c", 10, 10, 1.0, poll_s=5.0)
    s.on_append(11)  # records: both parked fetches are answered at 2.0
    s.on_poll_ended("b", 2.0)
    s.on_poll_ended("c", 2.0)
    s.on_fetch("c", 11, 11, 2.01, poll_s=5.0)  # c asks again; b is gone
    assert s.isr_proposal(2.0 + LAG - 0.01) is None
    assert s.isr_proposal(2.0 + LAG + 0.01) == ("a", "c")  # not 6.0 + LAG: b's poll end
