"""Follower-side replication state of one partition: its high watermark and leader silence.

Pure: times come from the caller's injected clock.

- **High watermark.** A follower's HW is the leader's HW carried by each fetch answer,
  capped at what the follower itself has: its flushed offset (durability ``flushed``) or
  its LEO (``replicated``). It never decreases. Read-replica consumers are served below it.
- **Silence.** A follower that has heard nothing from its leader (no successful answer,
  data or not) for ``silence_s`` reports the leader silent to the controller, then again
  after every further ``silence_s`` of silence.
- **Not leading.** A leader whose server answers ``NOT_LEADER`` in its own epoch for
  :data:`NOT_LEADER_REPORTED_S` without a break is reported too (:class:`NotLeaderRun`).

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


NOT_LEADER_REPORTED_S = 30.0
"""A leader whose server answers a follower's fetches with NOT_LEADER, in the epoch the
follower's assignment has it lead, for this long without a break is reported silent
although its server answers probes: it does not lead (it stepped aside: recovery found
damaged records), and its answers are not hearing from a leader. Far longer than a new
leader takes to apply its epoch (it answers NOT_LEADER until then: seconds, in a failover
of thousands of partitions; up to 29 s seen at 10,000 partitions with the machine's load
at 11, when 10 s would have moved live leaderships); such reports move the leadership only
when a majority of the ISR makes them, so one follower never moves a slow new leader of
an ISR of two."""


@attrs.define
class NotLeaderRun:
    """Decides when a follower reports a leader that answers NOT_LEADER in its own epoch
    (:data:`NOT_LEADER_REPORTED_S`)."""

    after_s: float = NOT_LEADER_REPORTED_S
    """Seconds of NOT_LEADER answers without a break before a report."""
    since: float | None = None
    """Clock time of the run's first NOT_LEADER answer (None: no run)."""
    reported: float | None = None
    """Clock time of the run's last report (None: none yet)."""

    def answered(self) -> None:
        """The leader answered as the leader: the run ends."""
        self.since = None

    def not_leader(self, now: float, repeat_s: float) -> bool:
        """A NOT_LEADER answer came at ``now``: True if a report is due (the caller sends
        it; again every ``repeat_s`` while the run lasts)."""
        if self.since is None:
            self.since, self.reported = now, None
            return False
        if now - self.since < self.after_s:
            return False
        if self.reported is not None and now - self.reported < repeat_s:
            return False
        self.reported = now
        return True
