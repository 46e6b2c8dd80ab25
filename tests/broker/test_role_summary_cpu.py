"""jetserver.broker.role_summary: a burst's line carries the CPU its role changes took."""

from __future__ import annotations

import logging
import time

import pytest

from jetserver.broker.role_summary import RoleSummary
from jetserver.logs import FIELDS_ATTR

pytestmark = pytest.mark.anyio

BUSY_S = 0.05
"""CPU burnt between two role changes (a busy loop: thread CPU, not wall time)."""


def _burn(seconds: float) -> None:
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


async def test_the_line_counts_the_cpu_from_the_first_role_change_to_the_last(
    caplog: pytest.LogCaptureFixture,
) -> None:
    summary = RoleSummary()
    with caplog.at_level(logging.INFO, logger="jetserver.broker.role_summary"):
        summary.applied("follower", 1.0, 1.0)
        _burn(BUSY_S)
        summary.applied("leader", 1.0, 1.1, ("s", 0, 3))
        summary.flush()
        summary.applied("follower", 2.0, 2.0)  # alone in its burst: no CPU figures
        summary.flush()
    first, alone = (getattr(r, FIELDS_ATTR) for r in caplog.records)
    assert first["count"] == 2
    assert BUSY_S <= first["cpu_s"] < 10 * BUSY_S  # the process's: this thread's and more
    assert BUSY_S <= first["loop_cpu_s"] <= first["cpu_s"] + 0.001
    assert first["cpu_ms_per_role"] == pytest.approx(1000 * first["cpu_s"], abs=1.0)  # rounded
    assert "cpu_s" not in alone
