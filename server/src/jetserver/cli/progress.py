"""A one-line progress bar on a terminal's stderr (``jet sub --count N``).

Drawn only when stderr is a terminal, at most every :data:`REDRAW_S` seconds, and erased at
the end, so piped output (stdout or stderr) never contains it.
"""

from __future__ import annotations

import sys
import time
from typing import TextIO

REDRAW_S = 0.1
"""Least time between two redraws."""
WIDTH = 30
"""Characters of the bar itself."""


def render(done: int, total: int, elapsed_s: float) -> str:
    """The line for ``done`` of ``total`` after ``elapsed_s`` seconds."""
    share = min(1.0, done / total) if total > 0 else 1.0
    filled = int(share * WIDTH)
    rate = done / elapsed_s if elapsed_s > 0 else 0.0
    bar = "#" * filled + "-" * (WIDTH - filled)
    return f"[{bar}] {done:,}/{total:,} {share:4.0%} {rate:,.0f} msg/s"


class Progress:
    """Counts towards ``total`` and redraws the bar on ``stream`` if it is a terminal."""

    def __init__(self, total: int, stream: TextIO | None = None) -> None:
        self.total = total
        self.stream = sys.stderr if stream is None else stream
        self.enabled = self.stream.isatty()
        self.done = 0
        self._started = time.monotonic()
        self._drawn_at = 0.0
        self._width = 0

    def add(self, count: int) -> None:
        """``count`` more are done."""
        self.done += count
        now = time.monotonic()
        if self.enabled and (now - self._drawn_at >= REDRAW_S or self.done >= self.total):
            self._drawn_at = now
            line = render(self.done, self.total, now - self._started)
            self._width = max(self._width, len(line))
            self.stream.write("\r" + line.ljust(self._width))
            self.stream.flush()

    def close(self) -> None:
        """Erase the bar."""
        if self.enabled and self._width:
            self.stream.write("\r" + " " * self._width + "\r")
            self.stream.flush()
