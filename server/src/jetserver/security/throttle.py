"""Slows down password and token guessing: failed logins are answered late, per client address.

The first failure from an address within :attr:`LoginThrottle.window_s` is answered at once;
each further one waits twice as long as the one before (``base_s``, ``2 * base_s``, ...) up to
``max_s``. A success does not reset the count (an identity of its own must not help guess
another's). The table is bounded: past ``max_tracked`` addresses the oldest entry goes.
Pure code with an injected clock; :class:`~jetserver.security.gate.Security` sleeps the
returned delay before it sends UNAUTHENTICATED and closes the connection.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import attrs

FAILED_LOGIN_BASE_DELAY_S = 0.1
"""Delay of the second failure from one address within the window."""
FAILED_LOGIN_MAX_DELAY_S = 2.0
"""Longest delay of an answer to a failed login."""
FAILED_LOGIN_WINDOW_S = 60.0
"""Failures older than this (since the last one) are forgotten."""
FAILED_LOGIN_MAX_TRACKED = 10_000
"""Client addresses remembered at most."""


@attrs.define
class LoginThrottle:
    """Failed-login counts per client address (not thread-safe: one event loop)."""

    base_s: float = FAILED_LOGIN_BASE_DELAY_S
    """Delay of the second failure within the window."""
    max_s: float = FAILED_LOGIN_MAX_DELAY_S
    """Cap on the delay."""
    window_s: float = FAILED_LOGIN_WINDOW_S
    """Quiet time after which an address starts over."""
    max_tracked: int = FAILED_LOGIN_MAX_TRACKED
    """Bound on the table."""
    clock: Callable[[], float] = time.monotonic
    """Monotonic seconds."""
    _failures: dict[str, tuple[int, float]] = attrs.field(factory=dict)

    def failed(self, address: str) -> float:
        """Record a failed login from ``address``; the seconds to wait before answering it."""
        now = self.clock()
        count, last = self._failures.pop(address, (0, now))
        if now - last > self.window_s:
            count = 0
        count += 1
        while len(self._failures) >= self.max_tracked:
            del self._failures[next(iter(self._failures))]  # least recently failed
        self._failures[address] = (count, now)
        if count == 1:
            return 0.0
        return min(self.max_s, self.base_s * 2.0 ** (count - 2))
