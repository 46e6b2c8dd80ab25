"""One log line per cause per interval for an event that thousands of partitions report at
once (:class:`LogTally`).

A failover of 3,334 leaderships made a survivor log "replication interrupted" 7,783 times
and "cannot confirm the subscription" 2,793 times (one line per partition, each with its
fields built and formatted on the event loop). A tally logs the first event of a cause at
once, with its fields, and counts the others of that cause: once the interval that began
with the first is over, one line "<message> (repeated)" gives their number (``more``) and
the last one's fields. A cause with no more events logs nothing more; the next event of
that cause begins a new interval.

Task safety: event loop only (the summary is a timer of the running loop).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

import attrs

from jetserver.logs import FIELDS_ATTR

__all__ = ["LOG_TALLY_INTERVAL_S", "LogTally"]

LOG_TALLY_INTERVAL_S = 5.0
"""The summary of a cause's further events comes this long after its first."""


@attrs.define(eq=False)
class _Cause:
    more: int = 0
    """Events since the first line of the interval."""
    last: Callable[[], dict[str, Any]] | None = None
    """The last event's ``extra=`` mapping, built only if the summary is logged."""
    timer: asyncio.TimerHandle | None = None


@attrs.define(eq=False)
class LogTally:
    """Logs ``message`` once per cause per interval (module docstring)."""

    logger: logging.Logger
    """Where the lines go."""
    message: str
    """The line's text (the summary's ends with "(repeated)")."""
    level: int = logging.INFO
    """The lines' level."""
    interval_s: float = LOG_TALLY_INTERVAL_S
    """How long after a cause's first line its summary comes."""
    lines: int = 0
    """Lines logged."""
    events: int = 0
    """Events counted."""
    _causes: dict[str, _Cause] = attrs.field(factory=dict)

    def event(self, cause: str, extra: Callable[[], dict[str, Any]]) -> None:
        """One event of ``cause``; ``extra()`` gives its ``extra=`` mapping
        (:func:`jetserver.logs.fields`; called only if the level is enabled)."""
        self.events += 1
        if not self.logger.isEnabledFor(self.level):
            return
        c = self._causes.get(cause)
        if c is not None:
            c.more += 1
            c.last = extra
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # no asyncio loop (another backend): every event is a line
            loop = None
        if loop is not None:
            c = self._causes[cause] = _Cause()
            c.timer = loop.call_later(self.interval_s, self._summary, cause)
        self._log(self.message, extra())

    def _summary(self, cause: str) -> None:
        c = self._causes.pop(cause, None)
        if c is None or c.last is None:
            return
        values = {**c.last().get(FIELDS_ATTR, {}), "more": c.more, "in_s": self.interval_s}
        self._log(f"{self.message} (repeated)", {FIELDS_ATTR: values})

    def close(self) -> None:
        """Log the pending summaries now (the tally's owner ends)."""
        for cause in list(self._causes):
            c = self._causes[cause]
            if c.timer is not None:
                c.timer.cancel()
            self._summary(cause)

    def _log(self, message: str, extra: dict[str, Any]) -> None:
        self.lines += 1
        self.logger.log(self.level, message, extra=extra)
