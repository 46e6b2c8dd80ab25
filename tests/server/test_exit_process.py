"""How a ``python -m jetserver.cli.main`` process ends (``exit_process``): without the
interpreter's teardown, yet with its output flushed, its ``atexit`` functions run and its
non-daemon threads joined, as at a normal exit."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

TIMEOUT_S = 60.0
"""Bound on one child interpreter (a loaded 2-core machine)."""


def _run(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=TIMEOUT_S
    )


def test_output_is_flushed_and_atexit_functions_run() -> None:
    done = _run(
        "import atexit, logging, sys\n"
        "from jetserver.cli.main import exit_process\n"
        "logging.basicConfig(stream=sys.stderr)\n"
        "atexit.register(lambda: print('atexit ran', flush=True))\n"
        "sys.stdout = open(sys.stdout.fileno(), 'w', buffering=65536, closefd=False)\n"
        "print('buffered', end=' ')\n"
        "logging.getLogger('t').warning('logged')\n"
        "exit_process(5)\n"
    )
    assert done.returncode == 5
    assert done.stdout == "buffered atexit ran\n"
    assert "logged" in done.stderr


def test_a_running_non_daemon_thread_is_joined(tmp_path: Path) -> None:
    marker = tmp_path / "thread-done"
    done = _run(
        "import threading, time\n"
        "from pathlib import Path\n"
        "from jetserver.cli.main import exit_process\n"
        "def work():\n"
        "    time.sleep(0.3)\n"
        f"    Path({str(marker)!r}).write_text('done')\n"
        "threading.Thread(target=work).start()\n"
        "exit_process(0)\n"
    )
    assert done.returncode == 0, done.stderr
    assert marker.read_text() == "done"
