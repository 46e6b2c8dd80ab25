"""Wall-clock time for record timestamps, and a guarded one for deciding what to delete.

Record timestamps are the wall clock (:func:`wall_ns`); the log keeps them non-decreasing
(``Log.append`` uses the last timestamp when the clock went back), so a backward jump
never misorders records.

Deciding by age what to delete (time-based retention, tombstone expiry in compaction,
age-based segment rolls) uses :class:`GuardedClock`: the wall clock, except that it never
runs ahead of how far the monotonic clock moved since the last anchor by more than
``slack_ns``. A forward jump of the wall clock (a bad NTP step, an operator's ``date -s``,
a VM resumed with a skewed clock) would otherwise make every segment look expired at once
and delete records that are not old; with the guard such records are kept until the
monotonic clock says they are old. A backward jump re-anchors the guard at the new, lower
time (deleting later is always safe). The cost: after a legitimate forward step, deletion
by age runs late by the step until the server restarts, and the server says so in its log.
A jump while the server is down cannot be told apart from time passing.

Test hook: with the environment variable ``JET_TEST_CLOCK_SHIFT_FILE`` naming a file that
holds an integer of nanoseconds, :func:`wall_ns` adds it to the system's wall clock (the
file is checked at every reading), so tests can jump a real server process's clock without
root or libfaketime. It is read at import; without it nothing is different.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable

from jetserver.logs import fields

log = logging.getLogger(__name__)

ENV_VAR = "JET_TEST_CLOCK_SHIFT_FILE"
DEFAULT_SLACK_NS = 5_000_000_000
"""How far the wall clock may run ahead of the monotonic clock's progress (5 s) before
the guard holds it back (NTP slews both clocks alike; only steps exceed this)."""


class _ShiftedWall:
    """The system wall clock plus the shift written in a file (tests only)."""

    def __init__(self, path: str) -> None:
        self._path = path
        self._stamp: tuple[int, int] = (-1, -1)
        self._shift = 0

    def __call__(self) -> int:
        try:
            st = os.stat(self._path)
            if (st.st_mtime_ns, st.st_size) != self._stamp:
                with open(self._path, encoding="ascii") as f:
                    self._shift = int(f.read().strip() or 0)
                self._stamp = (st.st_mtime_ns, st.st_size)
        except (OSError, ValueError):
            pass
        return time.time_ns() + self._shift


def _wall_source() -> Callable[[], int]:
    path = os.environ.get(ENV_VAR)
    return _ShiftedWall(path) if path else time.time_ns


wall_ns: Callable[[], int] = _wall_source()
"""Nanoseconds since the epoch: the wall clock (shifted by the test hook, if set)."""


class GuardedClock:
    """The wall clock, held back to the monotonic clock's progress on forward jumps.

    Thread-safety: callable from any thread.
    """

    def __init__(
        self,
        wall: Callable[[], int] | None = None,
        monotonic: Callable[[], int] = time.monotonic_ns,
        slack_ns: int = DEFAULT_SLACK_NS,
    ) -> None:
        self._wall = wall if wall is not None else wall_ns
        self._mono = monotonic
        self._slack = slack_ns
        self._lock = threading.Lock()
        self._anchor_wall = self._wall()
        self._anchor_mono = self._mono()
        self._held_back = 0
        """How far behind the wall clock this clock was at the last reading (ns)."""

    @property
    def held_back_ns(self) -> int:
        """How far behind the wall clock it was at the last reading (0: not held back)."""
        return self._held_back

    def __call__(self) -> int:
        wall = self._wall()
        with self._lock:
            steady = self._anchor_wall + (self._mono() - self._anchor_mono)
            if wall < steady - self._slack:
                # The wall clock went back: follow it (deleting later is safe).
                self._anchor_wall, self._anchor_mono = wall, self._mono()
                self._held_back = 0
                return wall
            limit = steady + self._slack
            if wall <= limit:
                self._held_back = 0
                return wall
            ahead = wall - limit
            first = self._held_back == 0
            self._held_back = ahead
        if first:
            log.warning(
                "the wall clock jumped ahead of the monotonic clock; deleting records by "
                "age (retention, tombstones) follows the monotonic clock until restart",
                extra=fields(ahead_s=round(ahead / 1e9, 3)),
            )
        return limit


DELETION_CLOCK = GuardedClock()
"""The process's clock for deciding by age what to delete (``Log.open``'s default)."""
