"""``jet server`` counts each stop signal once: a SIGTERM then a SIGINT (as
:meth:`jetserver.testing.Cluster.stop` sends) is a hurried stop, never the immediate one
of a third signal, even when uvloop would yield the SIGINT twice (its Python-level handler
and its wake-up byte read on either side of one reading of the socket; see
tests/server/signal_halves_child.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

CHILD = Path(__file__).with_name("signal_halves_child.py")


@pytest.mark.parametrize("loop", ["uvloop", "asyncio"])
def test_a_signal_split_around_a_read_of_the_wakeup_socket_is_yielded_once(loop: str) -> None:
    done = subprocess.run(
        [sys.executable, str(CHILD), loop], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["SIGTERM", "SIGINT"], done.stderr
