"""Follower-side replication state of one partition: its high watermark and leader silence.

Pure: times come from the caller's injected clock.

- **High watermark.** A follower's HW is the leader's HW carried by each fetch answer,
  capped at what the follower itself has: its flushed offset (durability ``flushed``) or
  its LEO (``replicated``). It never decreases. Read-replica consumers are served below it.
- **Silence.** A follower that has heard nothing from its leader (no successful answer,
  data or not) for ``silence_s`` reports the leader silent to the controller, then again
  after every further ``silence_s`` of silence.

Task safety: not thread-safe; one owner.
"""

from __future__ import annotations

import attrs

from jetserver.metadata.model import DURABILITY_FLUSHED


def follower_hw(current_hw: int, leader_hw: int, *, leo: int, flushed: int, durability: str) -> int:
    """The follower's new HW after an answer carrying ``leader_hw`` (never below ``current_hw``)."""
    cap = flushed if durability == DURABILITY_FLUSHED else leo
    return max(current_hw, min(leader_hw, cap))


@attrs.define
class SilenceDetector:
    """Decides when a follower reports its leader silent."""

    silence_s: float
    """Seconds without an answer before a report."""
    last_heard_s: float
    """Clock time of the last answer (or of the start of following)."""
    last_report_s: float | None = None
    """Clock time of the last report in the current silence (None: none)."""

    def heard(self, now: float) -> None:
        """An answer arrived from the leader."""
        self.last_heard_s = max(self.last_heard_s, now)
        self.last_report_s = None

    def should_report(self, now: float) -> bool:
        """True if a report is due now (the caller then sends it)."""
        if now - self.last_heard_s < self.silence_s:
            return False
        if self.last_report_s is not None and now - self.last_report_s < self.silence_s:
            return False
        self.last_report_s = now
        return True

    def leader_down(self, now: float) -> bool:
        """The leader's server is down in the liveness view: True if no report went out
        in this silence yet (the caller sends one now, without waiting for ``silence_s``;
        repeats then follow every ``silence_s``)."""
        if self.last_report_s is not None:
            return False
        self.last_report_s = now
        return True

    def next_check_s(self, now: float) -> float:
        """Seconds until a report could next be due."""
        base = self.last_heard_s if self.last_report_s is None else self.last_report_s
        return max(base + self.silence_s - now, 0.0)
