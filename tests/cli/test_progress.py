"""The progress bar of ``jet sub --count``: drawn on a terminal only, erased at the end."""

from __future__ import annotations

import io
import os
import pty
import select

from jetserver.cli.progress import Progress, render


def test_render() -> None:
    assert render(0, 200, 0.0).startswith("[" + "-" * 30 + "] 0/200")
    line = render(100, 200, 2.0)
    assert "#" * 15 + "-" * 15 in line
    assert "100/200" in line
    assert "50%" in line
    assert "50 msg/s" in line
    assert "100%" in render(300, 200, 1.0)


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
        # The pty hands the bytes over asynchronously: read until the bar ("\r" + line)
        # and its erasure ("\r" + blanks + "\r") have all arrived, or 5 s without any.
        while written.count("\r") < 3 and select.select([main], [], [], 5.0)[0]:
            written += os.read(main, 4096).decode()
    finally:
        os.close(main)
        os.close(side)
    assert "10/10" in written
    assert written.endswith("\r")  # erased: the line ends blank with the cursor at its start
