"""The power-loss hook (JET_TEST_DURABLE_LOG): a Log in a child process is killed with
SIGKILL, then every file is cut back to what was fsynced; only flushed records survive.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

from jetserver.storage import Log, LogConfig, durability_trace, files
from jetserver.storage.durability_trace import ENV_VAR, simulate_power_loss

from .helpers import read_all

WAIT_S = 30.0
"""Bound on the child process."""

CHILD = textwrap.dedent(
    """
    import sys
    from jetserver.storage import Log, LogConfig
    from jetsdk.codec.record import encode_body

    directory, flushed, unflushed, segment_bytes = sys.argv[1:5]
    log = Log.open(directory, LogConfig(segment_max_bytes=int(segment_bytes)))
    values = [encode_body(b"value-%06d" % i) for i in range(int(flushed) + int(unflushed))]
    for i in range(int(flushed)):
        log.append([values[i]], 1, 0)
        if i % 7 == 6:
            log.flush()
    log.flush()
    log.set_high_watermark(log.log_end_offset)
    log.checkpoint_high_watermark()
    for i in range(int(flushed), len(values)):
        log.append([values[i]], 1, 1 if i >= int(flushed) + 3 else 0)
    print(log.log_end_offset, log.flushed_offset, flush=True)
    sys.stdin.read()  # killed here, with unflushed records in the page cache
    """
)


def run_and_kill(
    directory: Path, trace: Path | None, flushed: int, unflushed: int, segment_bytes: int
) -> tuple[int, int]:
    """Run CHILD, wait for its report, SIGKILL it; return (LEO, flushed offset) it printed."""
    env = {**os.environ}
    env.pop(ENV_VAR, None)
    if trace is not None:
        env[ENV_VAR] = str(trace)
    proc = subprocess.Popen(
        [
            sys.executable,
            "-c",
            CHILD,
            str(directory),
            str(flushed),
            str(unflushed),
            str(segment_bytes),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env=env,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        leo, flushed_offset = map(int, line.split())
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(WAIT_S)
    return leo, flushed_offset


def test_kill_9_alone_loses_nothing_written(tmp_path: Path) -> None:
    leo, flushed = run_and_kill(tmp_path / "log", None, 50, 20, 1 << 20)
    assert (leo, flushed) == (70, 50)
    with Log.open(tmp_path / "log") as log:
        assert log.log_end_offset == 70


def test_power_loss_keeps_exactly_the_fsynced_records(tmp_path: Path) -> None:
    trace = tmp_path / "trace.jsonl"
    leo, flushed = run_and_kill(tmp_path / "log", trace, 50, 20, 1 << 20)
    assert (leo, flushed) == (70, 50)
    report = simulate_power_loss(trace)
    assert any(p.endswith(".log") for p in report.truncated), report
    assert any(p.endswith(".lock") or "lock" in p for p in report.deleted), report
    with Log.open(tmp_path / "log") as log:
        assert log.log_end_offset == 50
        assert log.high_watermark == 50  # the checkpoint was fsynced before the loss
        assert [r.value for r in read_all(log)] == [b"value-%06d" % i for i in range(50)]
        assert log.epochs.latest_epoch == 0  # epoch 1 started in the lost records


def test_power_loss_across_segment_rolls(tmp_path: Path) -> None:
    trace = tmp_path / "trace.jsonl"
    leo, flushed = run_and_kill(tmp_path / "log", trace, 120, 40, 1200)
    assert leo == 160
    assert 120 <= flushed < leo  # a roll fsyncs the segment it closes
    with_rolls = len(list((tmp_path / "log").glob("*.log")))
    assert with_rolls > 3
    simulate_power_loss(trace)
    with Log.open(tmp_path / "log", LogConfig(segment_max_bytes=1200)) as log:
        assert log.log_end_offset == flushed
        log.set_high_watermark(log.log_end_offset)
        values = [r.value for r in read_all(log)]
        assert values == [b"value-%06d" % i for i in range(log.log_end_offset)]


def test_unsynced_files_and_directory_entries_are_dropped(tmp_path: Path) -> None:
    trace_path = tmp_path / "trace.jsonl"
    directory = tmp_path / "d"
    directory.mkdir()
    trace = durability_trace.enable(trace_path)
    try:
        files.write_file_atomically(directory / "durable", b"12345")
        stray = files.SharedFile.open(directory / "created-not-synced", create=True)
        files.write_all(stray.fd, b"abc", 0)
        stray.release()
        files.write_file_durably(directory / "synced-name-not-durable", b"xyz")
        with open(directory / "outside-the-engine", "wb") as f:
            f.write(b"?")
        fd = os.open(directory / "durable", os.O_WRONLY)
        files.write_all(fd, b"67", 5)  # written, never fsynced
        os.close(fd)
    finally:
        durability_trace.disable()
    assert trace.path == trace_path
    report = simulate_power_loss(trace_path)
    assert sorted(os.listdir(directory)) == ["durable"]
    assert (directory / "durable").read_bytes() == b"12345"
    assert report.deleted[str(directory / "created-not-synced")] == (
        "directory entry never fsynced"
    )
    assert report.deleted[str(directory / "outside-the-engine")] == "never fsynced"


def test_tracing_is_off_by_default() -> None:
    assert os.environ.get(ENV_VAR) is None
    assert durability_trace.TRACE is None


def test_power_loss_after_a_new_leader_epoch_keeps_the_epochs_of_the_records(
    tmp_path: Path,
) -> None:
    """A new epoch's checkpoint is written without fsync (spec/storage.md §6): after a power
    loss, the epochs of the records that were flushed are back, at their first offsets."""
    trace_path = tmp_path / "trace.jsonl"
    directory = tmp_path / "log"
    trace = durability_trace.enable(trace_path)
    try:
        log = Log.open(directory, LogConfig(segment_max_bytes=1 << 20))
        log.append([b"a" * 10] * 6, 1, 0)
        log.flush()
        log.epochs.assign(3, log.log_end_offset)  # a new leader: no record yet, no fsync
        log.epochs.assign(4, log.log_end_offset)  # and another, whose records follow
        log.append([b"b" * 10] * 5, 2, 4)
        log.flush()  # the records of epoch 4 are durable
        log.epochs.assign(7, log.log_end_offset)  # led again: lost with the power
        log._crash()
    finally:
        durability_trace.disable()
    assert trace.path == trace_path
    simulate_power_loss(trace_path)
    with Log.open(directory) as log:
        assert log.log_end_offset == 11
        assert [(e.epoch, e.start_offset) for e in log.epochs.entries] == [(0, 0), (4, 6)]
        assert log.epochs.end_offset_for(0) == 6
