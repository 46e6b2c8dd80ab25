"""pytest-timeout's alarm held while pytest makes a test's report.

With ``timeout_method = signal`` (the suite's, on Linux) the alarm is armed for a test's
whole protocol: setup, call, teardown, and pytest's own work between them. A test that
fails close to its bound on a loaded machine can then see the alarm go off while pytest
formats its failure (reading and parsing the source of every traceback entry): the
``Failed`` it raises, or a ``SystemError`` from ``ast.parse`` interrupted half way, escapes
from pytest's reporting, the worker ends with INTERNALERROR and pytest-xdist aborts the
whole run (load ~40, 2026-12-01: a suite run stopped after 101 of 3,459 tests, at
tests/cluster/test_faults_partition.py::test_flapping_link). :func:`held_alarm` stops the
timer while a report is made and arms it again with what was left: the test's own phases
keep their bound, pytest's formatting is not counted against it.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from contextlib import contextmanager

MIN_REARM_S = 0.001
"""setitimer's 0 disarms: what is left is armed again as at least this."""


@contextmanager
def held_alarm() -> Iterator[None]:
    """The real-time interval timer stopped for the block, then armed again with what it
    had left (not at all if it was not armed)."""
    if not hasattr(signal, "setitimer"):
        yield
        return
    left, interval = signal.setitimer(signal.ITIMER_REAL, 0)
    try:
        yield
    finally:
        if left > 0:
            signal.setitimer(signal.ITIMER_REAL, max(left, MIN_REARM_S), interval)
