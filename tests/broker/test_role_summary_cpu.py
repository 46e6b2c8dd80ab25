"""jetserver.broker.role_summary: a burst's line carries the CPU its role changes took."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

import anyio.lowlevel
import pytest

from jetserver.broker.role_summary import RoleSummary
from jetserver.logs import FIELDS_ATTR

pytestmark = pytest.mark.anyio

BUSY_S = 0.05
"""CPU burnt between two role changes (a busy loop: thread CPU, not wall time)."""


def _burn(seconds: float, clock: Callable[[], float] = time.thread_time) -> None:
    end = clock() + seconds
    while clock() < end:
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


async def test_a_burst_in_one_loop_turn_reads_the_cpu_clocks_twice_not_per_role(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The clocks are system calls (and were most of a loaded survivor's burst): read at
    the burst's first role change and at the end of the turn, whatever the count."""
    reads = {"process": 0, "thread": 0}
    real_process, real_thread = time.process_time, time.thread_time

    def process_time() -> float:
        reads["process"] += 1
        return real_process()

    def thread_time() -> float:
        reads["thread"] += 1
        return real_thread()

    summary = RoleSummary()
    monkeypatch.setattr(time, "process_time", process_time)
    monkeypatch.setattr(time, "thread_time", thread_time)
    for p in range(1000):  # one turn: no await between them
        summary.applied("leader", 1.0, 1.0, ("s", p, 1))
    _burn(BUSY_S, real_thread)
    await anyio.lowlevel.checkpoint()  # the turn's end: its read runs
    monkeypatch.undo()
    assert reads == {"process": 2, "thread": 2}
    with caplog.at_level(logging.INFO, logger="jetserver.broker.role_summary"):
        summary.flush()
    (line,) = (getattr(r, FIELDS_ATTR) for r in caplog.records)
    assert line["count"] == 1000
    assert BUSY_S <= line["loop_cpu_s"] <= line["cpu_s"] + 0.001  # the turn's CPU counted
