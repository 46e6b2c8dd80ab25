"""The progress bar of ``jet sub --count`` and ``jet bench`` (rich.progress): drawn on a
terminal only, erased at the end."""

from __future__ import annotations

import io
import os
import pty
import select

from jetserver.cli.progress import Progress


def test_nothing_is_written_when_not_a_terminal() -> None:
    out = io.StringIO()
    progress = Progress(10, out)
    progress.add(5)
    progress.add(5)
    progress.close()
    assert out.getvalue() == ""


def test_drawn_and_erased_on_a_terminal() -> None:
    main, side = pty.openpty()
    try:
        with os.fdopen(side, "w", closefd=False) as tty:
            progress = Progress(10, tty)
            assert progress.enabled
            progress.add(10)  # the last one is always drawn
            progress.close()
        written = ""
        # The pty hands the bytes over asynchronously: read until the bar's erasure (rich:
        # carriage return, cursor up, erase the line) has arrived, or 5 s without any.
        while not written.endswith("\x1b[2K") and select.select([main], [], [], 5.0)[0]:
            written += os.read(main, 4096).decode()
    finally:
        os.close(main)
        os.close(side)
    last = written.rindex("10/10")
    assert "100%" in written[last:]
    assert "msg/s" in written[last:]
    assert "\u2501" * 10 in written  # rich's bar
    assert written.endswith("\x1b[2K")  # erased: the bar's line is blank again
