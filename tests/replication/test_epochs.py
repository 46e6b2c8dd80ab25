"""Reconciliation by leader epoch (KIP-101) against real epoch caches."""

from __future__ import annotations

from collections.abc import Sequence

from jetserver.replication import truncation_point
from jetserver.replication.epochs import answer_cannot_cut
from jetserver.storage import EpochEntry, LeaderEpochCache


def cache(entries: Sequence[tuple[int, int]], leo: int) -> LeaderEpochCache:
    return LeaderEpochCache(None, lambda: leo, [EpochEntry(e, o) for e, o in entries])


def reconcile(
    follower: Sequence[tuple[int, int]],
    follower_leo: int,
    leader: Sequence[tuple[int, int]],
    leader_leo: int,
    follower_hw: int = 0,
) -> tuple[int, int]:
    """Run the exchange to the end; return (truncation offset, rounds)."""
    entries = list(follower)
    leo = follower_leo
    for rounds in range(1, 20):
        local = cache(entries, leo)
        answer = cache(leader, leader_leo).epoch_and_end_offset_for(local.latest_epoch)
        t = truncation_point(
            local_epoch_end=local.epoch_and_end_offset_for,
            local_leo=leo,
            local_hw=follower_hw,
            leader_epoch=answer[0],
            leader_end_offset=answer[1],
        )
        leo = min(leo, t.offset)
        entries = [(e, o) for e, o in entries if o < leo]
        if t.done:
            return leo, rounds
    raise AssertionError("no convergence")


def test_same_epoch_follower_behind_keeps_everything() -> None:
    assert reconcile([(0, 0)], 5, [(0, 0)], 9) == (5, 1)


def test_kip101_scenario_1_no_loss_of_committed_data() -> None:
    # A leader epoch 0 wrote 0..1; B (follower) has 0..1 too but hw 1 (checkpoint lag).
    # A dies, B leads epoch 1 and appends 2. A comes back: truncate-to-HW would drop 1;
    # by epoch A keeps 0..1 and fetches 2 from B.
    assert reconcile([(0, 0)], 2, [(0, 0), (1, 2)], 3, follower_hw=1) == (2, 1)


def test_kip101_scenario_2_divergent_tail_is_cut() -> None:
    # Follower has epoch 1 records 5..7 that never got committed; the new leader has epoch
    # 2 starting at 5.
    assert reconcile([(0, 0), (1, 5)], 8, [(0, 0), (2, 5)], 9) == (5, 1)


def test_follower_ahead_in_same_epoch_is_cut_to_the_leader_leo() -> None:
    assert reconcile([(0, 0), (3, 10)], 20, [(0, 0), (3, 10), (4, 15)], 30) == (15, 1)


def test_multi_round() -> None:
    follower = [(0, 0), (2, 10), (3, 20)]
    leader = [(0, 0), (1, 10), (4, 30)]
    # leader answers (1, 30) for epoch 3; follower knows 0 (<1) ending at 10 -> cut to 10,
    # ask again about 0 -> leader (0, 10) -> done at 10.
    assert reconcile(follower, 25, leader, 40) == (10, 2)


def test_unknown_answer_falls_back_to_hw() -> None:
    t = truncation_point(
        local_epoch_end=cache([(0, 0)], 5).epoch_and_end_offset_for,
        local_leo=5,
        local_hw=3,
        leader_epoch=-1,
        leader_end_offset=-1,
    )
    assert (t.offset, t.done) == (3, True)


def test_empty_follower() -> None:
    t = truncation_point(
        local_epoch_end=cache([], 0).epoch_and_end_offset_for,
        local_leo=0,
        local_hw=0,
        leader_epoch=3,
        leader_end_offset=10,
    )
    assert (t.offset, t.done) == (0, True)


def test_a_later_epoch_the_leader_never_had_is_cut_at_its_start() -> None:
    # Found by the simulation (seed 12): the follower led epoch 2 from offset 101 while the
    # new leader (epoch 3) kept epoch 1 up to 103. The leader answers (1, 103) for epoch 2;
    # the follower's epoch 1 ends at 101, so both logs agree only up to 101.
    follower = [(0, 0), (1, 62), (2, 101)]
    leader = [(0, 0), (1, 62), (3, 103)]
    assert reconcile(follower, 179, leader, 200) == (101, 1)


def test_no_answer_cuts_a_log_without_records() -> None:
    # A replica that led epoch 2 without appending holds the entry (2, 0) on an empty log:
    # whatever the leader answers, the exchange ends at its LEO, only dropping the entry.
    for leader in ([], [(0, 0)], [(0, 0), (3, 40)], [(1, 0), (3, 40)], [(5, 0)]):
        assert reconcile([(2, 0)], 0, leader, 40)[0] == 0
    assert answer_cannot_cut(log_start=0, leo=0, latest_epoch=2, following=3)
    assert answer_cannot_cut(log_start=7, leo=7, latest_epoch=2, following=3)


def test_no_answer_cuts_a_log_already_in_the_epoch_it_follows() -> None:
    # Its records of epoch 4 came from this leader, whose log in epoch 4 only grows: the
    # answer is (4, leader's LEO >= its LEO), so the cut is its LEO.
    follower, leader = [(0, 0), (4, 50)], [(0, 0), (4, 50)]
    assert reconcile(follower, 60, leader, 90) == (60, 1)
    assert answer_cannot_cut(log_start=0, leo=60, latest_epoch=4, following=4)
    # An older latest epoch may be cut: asked.
    assert reconcile([(0, 0), (2, 30)], 60, [(0, 0), (4, 50)], 90) == (30, 1)
    assert not answer_cannot_cut(log_start=0, leo=60, latest_epoch=2, following=4)
