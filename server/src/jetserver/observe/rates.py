"""Rates of counters that move in steps, for the sampler's "out msg/s".

Consumer groups commit their offsets every few seconds, so the committed offset of a
partition stands still for seconds and then jumps: its growth per sample read 0 most
seconds and then several times the real rate (issue 35: "a sawtooth"). :class:`StepRate`
reports instead the growth of the last step over the time that step took, from one change
to the next, and keeps reporting it until a step is overdue; then it decays (the growth over
the time since the previous change), to 0 once commits stop.
"""

from __future__ import annotations

import attrs


@attrs.define
class _Steps:
    value: int
    changed_at: float
    """When ``value`` was first seen (a change, except for the first sighting)."""
    step: int = 0
    """The growth of the last change."""
    step_s: float | None = None
    """The time between the last two changes (None: fewer than two changes seen; the first
    sighting is not a change: it may fall anywhere within a step)."""
    changes: int = 0


@attrs.define
class StepRate:
    """Per key: the rate of a counter that moves in steps (see the module doc)."""

    _seen: dict[object, _Steps] = attrs.field(factory=dict)

    def rate(self, key: object, value: int, now: float) -> float | None:
        """The rate of ``key`` with ``value`` seen at ``now`` (monotonic seconds); None until
        a step's duration is known (two changes seen)."""
        seen = self._seen.get(key)
        if seen is None:
            self._seen[key] = _Steps(value, now)
            return None
        if value != seen.value:
            if value < seen.value:  # reset backwards: start again
                self._seen[key] = _Steps(value, now)
                return None
            seen.changes += 1
            if seen.changes >= 2:
                seen.step, seen.step_s = value - seen.value, now - seen.changed_at
            seen.value, seen.changed_at = value, now
            if seen.step_s is not None and seen.step_s <= 0:
                return None
        if seen.step_s is None:
            return None
        # Until the next step is due, the last step's rate; after, it decays.
        return seen.step / max(seen.step_s, now - seen.changed_at)

    def forget(self, keep: set[object]) -> None:
        """Drop the keys not in ``keep`` (streams deleted, groups gone)."""
        for key in list(self._seen):
            if key not in keep:
                del self._seen[key]
