"""Mapping log time to the member's own clock, safely (spec/groups.md, "Leases").

A member may process a partition only while no other member can have taken it over. The group
state gives that bound in log time (server timestamps, :meth:`GroupState.lease_end`); this
module turns it into a deadline on the member's local monotonic clock.

Each acknowledged append gives a sample: the member sent at local time ``sent_at`` and the
server stamped ``timestamp``, which happened after the send. So at local time ``sent_at`` the
server clock read at most ``timestamp``: ``server - local <= timestamp - sent_at``. The smallest
such difference over recent samples bounds the server clock from above at any local time; a
log-time deadline D is then safe until local time ``D - bound``. Servers are assumed to agree on
time within the lease margin the member subtracts (clocks of different partition leaders).

Pure code. Not thread-safe: one member owns one.
"""

from __future__ import annotations

from collections import deque

import attrs

__all__ = ["DEFAULT_SAMPLE_WINDOW", "ServerClockBound"]

DEFAULT_SAMPLE_WINDOW = 16
"""How many recent append acknowledgements the bound is taken over."""


@attrs.define(eq=False)
class ServerClockBound:
    """An upper bound on (server clock - local clock), from append acknowledgements."""

    window: int = DEFAULT_SAMPLE_WINDOW
    """Number of recent samples kept (older ones age out, so a changed leader clock shows)."""
    _samples: deque[float] = attrs.field(init=False)
    _offset: float | None = attrs.field(default=None, init=False)

    def __attrs_post_init__(self) -> None:
        if self.window < 1:
            raise ValueError("window must be >= 1")
        self._samples = deque(maxlen=self.window)

    def observe(self, sent_at: float, timestamp_ns: int) -> None:
        """Record that an append sent at local ``sent_at`` (s) got server ``timestamp_ns``."""
        self._samples.append(timestamp_ns / 1e9 - sent_at)
        self._offset = min(self._samples)

    @property
    def offset(self) -> float | None:
        """The bound in seconds, or None before the first sample."""
        return self._offset

    def local_deadline(self, server_ns: int) -> float | None:
        """The local time before which the server clock surely has not reached ``server_ns``."""
        bound = self._offset
        return None if bound is None else server_ns / 1e9 - bound
