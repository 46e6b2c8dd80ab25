"""Failed-login throttle (pure, injected clock)."""

from __future__ import annotations

from jetserver.security.throttle import LoginThrottle


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_delays_double_per_address_up_to_the_cap() -> None:
    throttle = LoginThrottle(base_s=0.1, max_s=1.0, clock=Clock())
    delays = [throttle.failed("10.0.0.1") for _ in range(7)]
    assert delays == [0.0, 0.1, 0.2, 0.4, 0.8, 1.0, 1.0]
    assert throttle.failed("10.0.0.2") == 0.0  # another address starts over


def test_a_quiet_window_forgets_the_failures() -> None:
    clock = Clock()
    throttle = LoginThrottle(base_s=0.1, window_s=60.0, clock=clock)
    assert [throttle.failed("a"), throttle.failed("a")] == [0.0, 0.1]
    clock.now += 59.0
    assert throttle.failed("a") == 0.2  # within the window of the last failure
    clock.now += 61.0
    assert throttle.failed("a") == 0.0


def test_the_table_is_bounded() -> None:
    throttle = LoginThrottle(max_tracked=3, clock=Clock())
    for address in ["a", "b", "c", "a", "d"]:
        throttle.failed(address)
    # "b" failed least recently and was dropped: it starts over; "a" is still counted.
    assert throttle.failed("b") == 0.0
    assert throttle.failed("a") > 0.0
