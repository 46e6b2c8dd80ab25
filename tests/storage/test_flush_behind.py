"""The background fsyncs of a ``written`` partition (jetserver.storage.flush_behind): spaced
by a least gap from one fsync's start to the next one's, at once when the partition was idle,
at once again when the log is about to close.

Real logs on real files and the server's fsync threads; the fdatasync the log calls is
wrapped to be held open where a test needs an fsync to be running.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from jetserver.storage import Log
from jetserver.storage.flush_behind import FlushBehind
from jetserver.testing import wait_until_async

from .helpers import bodies, gate_fdatasync

pytestmark = pytest.mark.anyio
WAIT_S = 10.0
LONG_GAP_S = 600.0
"""A gap no test waits out: an fsync it delays runs only when the log closes."""


@pytest.fixture
def log(tmp_path: Path) -> Iterator[Log]:
    with Log.open(tmp_path) as lg:
        yield lg


def _failed(error: BaseException) -> None:
    raise AssertionError(f"an fsync failed: {error!r}")


async def test_fsyncs_are_spaced_by_the_gap_and_the_close_takes_the_waiting_one(log: Log) -> None:
    behind = FlushBehind(log, asyncio.get_running_loop(), _failed, min_gap_s=LONG_GAP_S)
    log.append(bodies(2), 1, 0)
    assert behind.kick()  # idle: at once
    await wait_until_async(lambda: not behind.running, WAIT_S, "the first fsync ended")
    assert (behind.fsyncs, log.flushed_offset) == (1, 2)

    log.append(bodies(1, start=2), 1, 0)
    assert behind.kick()  # sooner than the gap: a timer, no fsync
    assert behind.waiting
    assert behind.running
    log.append(bodies(1, start=3), 1, 0)
    assert not behind.kick()  # covered by the waiting one
    assert (behind.fsyncs, log.flushed_offset) == (1, 2)

    await behind.wait_idle()  # the log is about to close: the waiting fsync runs now
    assert (behind.fsyncs, log.flushed_offset) == (2, 4)
    assert not behind.waiting
    assert not behind.running


async def test_a_kick_during_an_fsync_sooner_than_the_gap_waits_for_its_timer(
    log: Log, monkeypatch: pytest.MonkeyPatch
) -> None:
    release, held = gate_fdatasync(monkeypatch, WAIT_S)
    behind = FlushBehind(log, asyncio.get_running_loop(), _failed, min_gap_s=LONG_GAP_S)
    log.append(bodies(1), 1, 0)
    assert behind.kick()
    await wait_until_async(held.is_set, WAIT_S, "the first fsync is held")
    log.append(bodies(1, start=1), 1, 0)
    assert not behind.kick()  # running: once more after it
    release.set()
    await wait_until_async(lambda: behind.waiting, WAIT_S, "the second fsync waits for the gap")
    assert behind.running
    assert behind.fsyncs == 1
    await behind.wait_idle()
    assert (behind.fsyncs, log.flushed_offset) == (2, 2)


async def test_without_a_gap_a_kick_during_an_fsync_runs_the_next_at_once(
    log: Log, monkeypatch: pytest.MonkeyPatch
) -> None:
    release, held = gate_fdatasync(monkeypatch, WAIT_S)
    behind = FlushBehind(log, asyncio.get_running_loop(), _failed, min_gap_s=0.0)
    log.append(bodies(1), 1, 0)
    assert behind.kick()
    await wait_until_async(held.is_set, WAIT_S, "the first fsync is held")
    log.append(bodies(1, start=1), 1, 0)
    assert not behind.kick()
    release.set()
    await wait_until_async(lambda: not behind.running, WAIT_S, "both fsyncs ended")
    assert (behind.fsyncs, log.flushed_offset) == (2, 2)
    assert not behind.waiting


async def test_a_kick_soon_while_an_fsync_runs_or_waits_for_its_timer_schedules_nothing(
    log: Log, monkeypatch: pytest.MonkeyPatch
) -> None:
    """At light load nearly every append finds the partition's fsync running or waiting
    for the gap: that fsync, or the one it is asked to run after it, covers the append, so
    no loop callback is scheduled per message for a kick that would only find it so."""
    release, held = gate_fdatasync(monkeypatch, WAIT_S)
    loop = asyncio.get_running_loop()
    behind = FlushBehind(log, loop, _failed, min_gap_s=LONG_GAP_S)
    log.append(bodies(1), 1, 0)
    assert behind.kick_soon()  # idle: one turn from now
    await wait_until_async(held.is_set, WAIT_S, "the first fsync is held")
    scheduled: list[object] = []
    real_call_soon = loop.call_soon

    def counted(*args: Any, **kwargs: Any) -> asyncio.Handle:
        scheduled.append(args[0])
        return real_call_soon(*args, **kwargs)

    with monkeypatch.context() as patch:
        patch.setattr(loop, "call_soon", counted)
        for i in range(1, 6):
            log.append(bodies(1, start=i), 1, 0)
            assert not behind.kick_soon()  # running: once more after it
    assert scheduled == []
    release.set()
    await wait_until_async(lambda: behind.waiting, WAIT_S, "the next fsync waits for the gap")
    with monkeypatch.context() as patch:
        patch.setattr(loop, "call_soon", counted)
        for i in range(6, 12):
            log.append(bodies(1, start=i), 1, 0)
            assert not behind.kick_soon()  # covered by the waiting fsync
    assert scheduled == []
    assert behind.fsyncs == 1
    await behind.wait_idle()  # the waiting fsync covers all of them
    assert (behind.fsyncs, log.flushed_offset) == (2, 12)
