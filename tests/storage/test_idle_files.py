"""Idle logs hold no open active segment file (issue 34, item 3).

An idle log's active segment file is parked (closed) by :class:`IdleFiles` once it is fully
fsynced and unused; the next append, read or fsync opens it again. Real logs on real files;
the races are made deterministic with gates inside the writer's write and the fsync.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from jetsdk.codec.record import iter_records
from jetserver.storage import Log, durability_trace
from jetserver.storage import log as log_module
from jetserver.storage import segment as segment_module
from jetserver.storage.durability_trace import simulate_power_loss
from jetserver.storage.idle_files import IdleFiles

from .helpers import SMALL, bodies, fill, open_logs, read_all

TS = 1_000_000_000
WAIT_S = 10.0
"""Bound on every wait for a gate."""


def test_idle_logs_are_parked_by_the_second_sweep_and_work_again(tmp_path: Path) -> None:
    idle = IdleFiles()
    logs = [Log.open(tmp_path / f"p{i}", SMALL, idle_files=idle) for i in range(30)]
    try:
        for log in logs:
            log.append(bodies(3), TS, 0)
            log.flush()
        assert open_logs(tmp_path) == 30
        assert idle.sweep() == 0  # the first sweep only notes each log's activity
        logs[0].append(bodies(1, start=3), TS, 0)  # busy since: kept open
        logs[0].flush()
        assert idle.sweep() == 29
        assert open_logs(tmp_path) == 1
        assert (len(idle), idle.parked, idle.parks) == (1, 29, 29)
        # A parked log takes appends and reads; its file is open again until idle.
        log = logs[5]
        log.append(bodies(2, start=3), TS, 0)
        log.flush()
        log.set_high_watermark(log.log_end_offset)
        assert [r.value[:2] for r in read_all(log)] == [b"v0", b"v1", b"v2", b"v3", b"v4"]
        assert open_logs(tmp_path) == 2
        assert (len(idle), idle.parked) == (2, 28)
        idle.sweep()
        idle.sweep()
        assert open_logs(tmp_path) == 0
        assert (len(idle), idle.parked) == (0, 30)
        logs[7].close()
        assert idle.parked == 29  # a closed log is neither open nor parked
    finally:
        for log in logs:
            log.close()
    assert (len(idle), idle.parked) == (0, 0)
    with Log.open(tmp_path / "p5", SMALL, idle_files=idle) as log:
        log.set_high_watermark(log.log_end_offset)
        assert len(read_all(log)) == 5


def test_unflushed_records_keep_the_file_open(tmp_path: Path) -> None:
    idle = IdleFiles(park_opened=True)
    with Log.open(tmp_path / "p", SMALL, idle_files=idle) as log:
        assert open_logs(tmp_path) == 0  # opened idle: parked at once
        assert (len(idle), idle.parked, idle.parks) == (0, 1, 1)
        log.append(bodies(3), TS, 0)
        assert open_logs(tmp_path) == 1
        assert (len(idle), idle.parked) == (1, 0)
        idle.sweep()
        assert idle.sweep() == 0
        assert idle.make_room(1) == 0
        assert open_logs(tmp_path) == 1
        log.flush()
        assert idle.make_room(1) == 1
        assert open_logs(tmp_path) == 0


def test_the_budget_parks_the_least_recently_opened_idle_files(tmp_path: Path) -> None:
    idle = IdleFiles(budget=4)
    logs = [Log.open(tmp_path / f"p{i}", SMALL, idle_files=idle) for i in range(12)]
    try:
        assert open_logs(tmp_path) == 4
        for log in logs:
            log.append(bodies(2), TS, 0)  # reopens a parked file; unflushed: busy
        assert open_logs(tmp_path) == 12  # the working set goes beyond the budget
        for log in logs:
            log.flush()
        logs.append(Log.open(tmp_path / "p12", SMALL, idle_files=idle))
        assert open_logs(tmp_path) == 4  # one more open parks the idle ones beyond it
        assert len(idle) == 4
        assert idle.parks == 8 + 4 + 9  # at open; displaced by 4 reopens; by the last open
    finally:
        for log in logs:
            log.close()


def test_a_read_slice_keeps_the_active_file_open(tmp_path: Path) -> None:
    """A reader (sendfile) uses the descriptor's number outside any log lock: its lease
    keeps the file open. Closed under it, the number would be reused by the next open and
    the reader would send another file's bytes."""
    idle = IdleFiles()
    with Log.open(tmp_path / "p", SMALL, idle_files=idle) as log:
        log.append(bodies(3), TS, 0)
        log.append(bodies(3, start=3), TS, 0)  # the last append is served from memory
        log.flush()
        log.set_high_watermark(log.log_end_offset)
        with log.read(0, 1000, max_offset=3) as sl:
            assert sl.fileno >= 0
            parked = idle.make_room(1)
            other = os.open(tmp_path / "other", os.O_RDWR | os.O_CREAT, 0o644)
            try:
                os.write(other, b"x" * sl.length)
                data = sl.read_bytes()
            finally:
                os.close(other)
        assert data[: sl.length] != b"x" * sl.length, "read another file's bytes"
        assert [r.offset for r in iter_records(data)] == [0, 1, 2]
        assert parked == 0
        assert idle.make_room(1) == 1
        assert open_logs(tmp_path) == 0


def test_an_fsync_in_flight_keeps_its_descriptor(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The fsync runs outside the log's locks with the descriptor's number: while it runs,
    the parker closes nothing, so it never syncs a reused number (another file)."""
    idle = IdleFiles()
    inside, release = threading.Event(), threading.Event()
    synced: list[str] = []
    real = log_module.fdatasync

    def gated(fd: int) -> None:
        inside.set()
        assert release.wait(WAIT_S)
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        real(fd)

    monkeypatch.setattr(log_module, "fdatasync", gated)
    with Log.open(tmp_path / "p", SMALL, idle_files=idle) as log:
        log.append(bodies(3), TS, 0)
        flusher = threading.Thread(target=log.flush)
        flusher.start()
        assert inside.wait(WAIT_S)
        idle.sweep()
        assert idle.sweep() == 0
        assert idle.make_room(1) == 0
        other = os.open(tmp_path / "other", os.O_RDWR | os.O_CREAT, 0o644)
        release.set()
        flusher.join(WAIT_S)
        os.close(other)
        assert not flusher.is_alive()
        assert synced == [str((tmp_path / "p" / f"{0:020d}.log").resolve())]
        assert log.flushed_offset == 3
        assert idle.make_room(1) == 1


def test_the_writer_in_an_append_keeps_its_descriptor(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The writer writes with the descriptor outside any lease: the parker only parks
    while it holds the log's writer lock, so an append in progress keeps the file open."""
    idle = IdleFiles(park_opened=True)
    with Log.open(tmp_path / "p", SMALL, idle_files=idle) as log:
        log.append(bodies(3), TS, 0)
        log.flush()
        assert idle.make_room(1) == 1  # parked: the next append opens it again
        inside, release = threading.Event(), threading.Event()
        real = segment_module.write_all

        def gated(fd: int, data: object, position: int) -> None:
            inside.set()
            assert release.wait(WAIT_S)
            real(fd, data, position)  # type: ignore[arg-type]

        monkeypatch.setattr(segment_module, "write_all", gated)
        writer = threading.Thread(target=log.append, args=(bodies(2, start=3), TS, 0))
        writer.start()
        assert inside.wait(WAIT_S)
        assert idle.make_room(1) == 0
        release.set()
        writer.join(WAIT_S)
        assert not writer.is_alive()
        log.flush()
        log.set_high_watermark(log.log_end_offset)
        assert [r.offset for r in read_all(log)] == [0, 1, 2, 3, 4]


def test_records_appended_after_a_park_survive_a_power_loss(tmp_path: Path) -> None:
    trace_path = tmp_path / "trace"
    durability_trace.enable(trace_path)
    idle = IdleFiles(park_opened=True)
    try:
        log = Log.open(tmp_path / "p", SMALL, idle_files=idle)
        fill(log, 3)
        log.flush()
        assert idle.make_room(1) == 1
        fill(log, 6)  # reopened by the append; rolls too (small segments)
        log.flush()
        idle.sweep()
        idle.sweep()
        log.append(bodies(1, start=1000), TS, 0)  # reopened again, never flushed
        leo_flushed = log.flushed_offset
        log.abandon()  # a kill -9: no clean close
    finally:
        durability_trace.disable()
    simulate_power_loss(trace_path)
    with Log.open(tmp_path / "p", SMALL, idle_files=idle) as log:
        log.set_high_watermark(log.log_end_offset)
        offsets = [r.offset for r in read_all(log)]
    assert offsets[:leo_flushed] == list(range(leo_flushed))
    assert leo_flushed == 90
