"""The deletion clock: a forward wall-clock jump is held back, a backward one followed."""

from __future__ import annotations

import logging

import pytest

from jetserver.storage.clock import GuardedClock

S = 10**9


class Clocks:
    def __init__(self) -> None:
        self.wall = 1_000 * S
        self.mono = 50 * S

    def step(self, seconds: float) -> None:
        self.wall += int(seconds * S)
        self.mono += int(seconds * S)


def guarded(c: Clocks) -> GuardedClock:
    return GuardedClock(lambda: c.wall, lambda: c.mono, slack_ns=5 * S)


def test_it_is_the_wall_clock_while_both_clocks_agree() -> None:
    c = Clocks()
    clock = guarded(c)
    for _ in range(3):
        c.step(10)
        assert clock() == c.wall
    c.wall += 4 * S  # within the slack (an NTP step of a few seconds)
    assert clock() == c.wall
    assert clock.held_back_ns == 0


def test_a_forward_jump_is_held_back_to_the_monotonic_progress(
    caplog: pytest.LogCaptureFixture,
) -> None:
    c = Clocks()
    clock = guarded(c)
    start = c.wall
    c.wall += 2 * 86_400 * S
    with caplog.at_level(logging.WARNING):
        assert clock() == start + 5 * S
        c.step(60)
        assert clock() == start + 65 * S
    assert clock.held_back_ns == 2 * 86_400 * S - 5 * S
    assert sum("jumped ahead" in r.getMessage() for r in caplog.records) == 1


def test_a_backward_jump_is_followed_and_re_anchors() -> None:
    c = Clocks()
    clock = guarded(c)
    c.wall -= 3_600 * S
    assert clock() == c.wall
    c.step(10)
    assert clock() == c.wall
    # Coming forward again (the clock corrected) is a forward jump from the new anchor.
    c.wall += 3_600 * S
    assert clock() < c.wall
