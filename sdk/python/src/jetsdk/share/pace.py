"""How fast the application takes messages (spec/share-groups.md §5, "Pacing"), pure.

A share-group member must not acquire more than its application can be handed before the
lease runs out (an acquired message that is never handed out would otherwise come back with a
raised delivery count). :class:`RateMeter` measures the application's rate: messages handed
out per second of the application's *busy* time, the time it is not waiting for a message
(inside ``next()``/``fetch()``, or with a free worker slot in the simulation), so a starved
application is not mistaken for a slow one. Both sums decay exponentially with time constant
``tau``, so the rate follows the application as it speeds up or slows down; an application
stuck on one message is busy without taking any, so its rate falls towards zero.

No clock of its own: every call passes the local time.
"""

from __future__ import annotations

import math

import attrs

__all__ = ["MIN_SAMPLES", "RateMeter"]

MIN_SAMPLES = 2.0
"""Fewest (decayed) hand-outs before the meter gives a rate."""


@attrs.define(eq=False)
class RateMeter:
    """Hand-outs per busy second, exponentially decayed (see the module docstring)."""

    tau: float
    """Decay time constant, seconds."""
    _handed: float = 0.0
    _busy: float = 0.0
    _waiters: int = 0
    _last: float | None = None
    _started: bool = False
    """Busy time counts only once the application was handed a message (before that it
    has nothing to be busy with: it is starting)."""

    def _advance(self, now: float) -> None:
        last = self._last
        self._last = now
        if last is None or now <= last:
            return
        f = math.exp(-(now - last) / self.tau)
        self._handed *= f
        self._busy *= f
        if self._waiters == 0 and self._started:
            self._busy += self.tau * (1.0 - f)  # the decayed integral of "busy" over dt

    def waiting(self, now: float) -> None:
        """The application started waiting for messages (it is not busy while it waits)."""
        self._advance(now)
        self._waiters += 1

    def done_waiting(self, now: float, handed: int) -> None:
        """A wait ended with ``handed`` messages handed out."""
        self._advance(now)
        self._waiters = max(0, self._waiters - 1)
        self._handed += handed
        self._started = self._started or handed > 0

    def handed(self, now: float, count: int) -> None:
        """``count`` messages handed out without a wait."""
        self._advance(now)
        self._handed += count
        self._started = self._started or count > 0

    @property
    def is_waiting(self) -> bool:
        """Whether the application is waiting for messages now."""
        return self._waiters > 0

    def rate(self, now: float) -> float | None:
        """Messages per busy second; None while unknown (fewer than :data:`MIN_SAMPLES`
        recent hand-outs and less than ``tau / 4`` of busy time: a new application)."""
        self._advance(now)
        if self._handed < MIN_SAMPLES and self._busy < self.tau / 4:
            return None
        return self._handed / self._busy if self._busy > 0.0 else None
