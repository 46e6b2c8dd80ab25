"""A one-line progress bar on a terminal's stderr (``jet sub --count N``, ``jet bench``),
drawn with :mod:`rich.progress`.

Drawn only when stderr is a terminal, at most every :data:`REDRAW_S` seconds (no refresh
thread: the counting caller redraws), and erased at the end (transient), so piped output
(stdout or stderr) never contains it.
"""

from __future__ import annotations

import sys
import time
from typing import TYPE_CHECKING, TextIO

if TYPE_CHECKING:
    from rich.progress import Progress as RichProgress

REDRAW_S = 0.1
"""Least time between two redraws."""
WIDTH = 30
"""Characters of the bar itself."""


def _rich_bar(stream: TextIO) -> RichProgress:
    """The bar (rich is imported here: only a terminal pays for it)."""
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        ProgressColumn,
        Task,
        TaskProgressColumn,
    )
    from rich.progress import Progress as RichProgress
    from rich.text import Text

    class RateColumn(ProgressColumn):
        """Messages per second since the start."""

        def render(self, task: Task) -> Text:
            elapsed = task.elapsed or 0.0
            rate = task.completed / elapsed if elapsed > 0 else 0.0
            return Text(f"{rate:,.0f} msg/s")

    return RichProgress(
        BarColumn(bar_width=WIDTH),
        MofNCompleteColumn(),
        TaskProgressColumn(),
        RateColumn(),
        console=Console(file=stream, force_terminal=True, highlight=False),
        auto_refresh=False,
        transient=True,
    )


class Progress:
    """Counts towards ``total`` and redraws the bar on ``stream`` if it is a terminal."""

    def __init__(self, total: int, stream: TextIO | None = None) -> None:
        self.total = total
        self.stream = sys.stderr if stream is None else stream
        self.enabled = self.stream.isatty()
        self.done = 0
        self._drawn_at = 0.0
        self._bar: RichProgress | None = None
        if self.enabled:
            self._bar = _rich_bar(self.stream)
            self._task = self._bar.add_task("", total=total)
            self._bar.start()

    def add(self, count: int) -> None:
        """``count`` more are done."""
        self.done += count
        bar = self._bar
        if bar is None:
            return
        bar.update(self._task, completed=self.done)
        now = time.monotonic()
        if now - self._drawn_at >= REDRAW_S or self.done >= self.total:
            self._drawn_at = now
            bar.refresh()

    def close(self) -> None:
        """Erase the bar."""
        bar, self._bar = self._bar, None
        if bar is not None:
            bar.stop()
