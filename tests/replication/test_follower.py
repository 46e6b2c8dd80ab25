"""Follower HW rule and silence detection (pure)."""

from __future__ import annotations

from jetserver.replication import SilenceDetector, follower_hw


def test_follower_hw_is_capped_by_what_it_has() -> None:
    assert follower_hw(0, 10, leo=8, flushed=6, durability="flushed") == 6
    assert follower_hw(0, 10, leo=8, flushed=6, durability="replicated") == 8
    assert follower_hw(0, 5, leo=8, flushed=8, durability="flushed") == 5


def test_follower_hw_never_decreases() -> None:
    assert follower_hw(7, 3, leo=8, flushed=8, durability="flushed") == 7


def test_silence_reports_once_per_period() -> None:
    d = SilenceDetector(silence_s=1.0, last_heard_s=0.0)
    assert not d.should_report(0.5)
    assert d.next_check_s(0.5) == 0.5
    assert d.should_report(1.0)
    assert not d.should_report(1.5)
    assert d.should_report(2.0)
    d.heard(2.1)
    assert not d.should_report(2.5)
    assert d.should_report(3.2)
