"""A member's look-ahead (spec/share-groups.md §5, "Pacing"): it acquires what its application
takes in a few claim cycles at its measured rate, at least one batch, at most
``batch x max_held`` and what fits in a lease."""

from __future__ import annotations

import pytest

from jetsdk.share.member import LOOK_AHEAD, ShareConfig, ShareMember
from jetsdk.share.records import encode_share_record

S = 1_000_000_000
KEY = ("s", 0)


def member_at(rate: float, *, batch: int = 500, max_held: int = 16) -> tuple[ShareMember, float]:
    """A member whose application took ``rate`` messages per busy second for 5 s."""
    member = ShareMember(
        ShareConfig("g", "a", (KEY,), ack_deadline=30.0, batch=batch, max_held=max_held)
    )
    t, step = 0.0, 0.01
    for _ in range(500):
        member.meter.waiting(t)
        member.meter.done_waiting(t, max(1, round(rate * step)))
        t += step
    return member, t


def win_one_claim(member: ShareMember, now: float, cycle: float) -> None:
    """Send a claim at ``now`` and read its win back ``cycle`` seconds later."""
    (claim, *_) = member.claims(now, {KEY: 1_000_000}, wall_ns=100 * S)
    member.on_record(0, 100 * S, encode_share_record(claim), now + cycle)
    assert member.held, "the claim was won"


def test_a_slow_application_holds_one_batch_not_a_lease_worth() -> None:
    """100 messages/s, a 50 ms claim cycle: the look-ahead is 20 messages, so one batch (500);
    before, it held what fits in the lease (about 2,800)."""
    member, now = member_at(100.0)
    rate = member.meter.rate(now)
    assert rate == pytest.approx(100.0, rel=0.05)
    assert member.capacity(now) > 2000  # no claim cycle measured yet: what fits in the lease
    win_one_claim(member, now, 0.05)
    assert member.capacity(now + 0.05) == 500


@pytest.mark.parametrize(("cycle", "expected"), [(0.05, 8000), (0.005, 2000)])
def test_a_fast_application_holds_what_it_takes_in_the_cycles(cycle: float, expected: int) -> None:
    """100,000 messages/s: 4 cycles of 5 ms are 2,000 messages; 4 of 50 ms are more than the
    most a member holds (500 x 16)."""
    member, now = member_at(100_000.0)
    win_one_claim(member, now, cycle)
    rate = member.meter.rate(now + cycle)
    assert rate is not None
    assert rate * LOOK_AHEAD * cycle == pytest.approx(expected, rel=0.05) or expected == 8000
    assert member.capacity(now + cycle) == pytest.approx(expected, rel=0.05)


def test_a_fast_member_leaves_the_others_a_fair_share() -> None:
    """100 messages, batch 10: a fast member holding nothing claims half (50), not all it
    could hold (160); holding 50 it claims nothing more while only 50 are left, and once
    it handed those out it claims half of the rest."""
    member, now = member_at(100_000.0, batch=10)
    hws = {KEY: 100}
    first = member.claims(now, hws, wall_ns=100 * S)
    assert [c.size for c in first] == [10] * 5
    for q, claim in enumerate(first):
        member.on_record(q, 100 * S, encode_share_record(claim), now + 0.01)
    assert member.waiting_count() == 50
    assert member.claims(now + 0.01, hws, wall_ns=100 * S) == []
    member.on_appended(now, 100 * S, now + 0.001)  # the lease clock: it may hand out
    assert len(member.take(now + 0.01, 50)) == 50  # the application takes the 50
    assert sum(c.size or 0 for c in member.claims(now + 0.02, hws, wall_ns=100 * S)) == 25


def test_a_lone_member_takes_the_last_few() -> None:
    """8 messages left, batch 500: a member holding nothing claims all 8."""
    member, now = member_at(100_000.0)
    (claim,) = member.claims(now, {KEY: 8}, wall_ns=100 * S)
    assert claim.size == 8
