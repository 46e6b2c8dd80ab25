"""A clean close writes and fsyncs only what changed since the log was opened
(spec/storage.md §5): an idle partition's close after a clean open rewrites neither its
indexes nor its HW checkpoint, and does not fsync its ``.log`` again; the clean-shutdown
marker is always written, and the next open trusts it."""

from __future__ import annotations

from pathlib import Path

import orjson

from jetserver.storage import Log, durability_trace
from storage.helpers import SMALL, bodies, read_all


def traced_close(directory: Path, trace_path: Path, appended: int = 0) -> list[str]:
    """Open the log, append ``appended`` records (flushed, HW at the end), close it, with
    the durability trace on; the names of the files it fsynced, in order."""
    trace_path.unlink(missing_ok=True)
    durability_trace.enable(trace_path)
    try:
        log = Log.open(directory, SMALL)
        if appended:
            log.append(bodies(appended, start=log.log_end_offset), 1, 0)
            log.flush()
            log.set_high_watermark(log.log_end_offset)
        start = trace_path.stat().st_size  # what the close does, not the open
        log.close()
    finally:
        durability_trace.disable()
    synced: list[str] = []
    with trace_path.open("rb") as f:
        f.seek(start)
        for line in f:
            event = orjson.loads(line)
            if event["ev"] == "sync":
                synced.append(Path(event["path"]).name)
    return synced


def test_an_idle_clean_close_syncs_only_the_clean_shutdown_marker(tmp_path: Path) -> None:
    directory = tmp_path / "log"
    first = traced_close(directory, tmp_path / "t1", appended=30)
    assert any(name.endswith(".index") for name in first)
    assert "high-watermark-checkpoint.tmp" in first
    idle = traced_close(directory, tmp_path / "t2")  # opened cleanly, nothing appended
    assert idle == ["clean-shutdown.tmp"]
    with Log.open(directory, SMALL) as log:
        assert log.recovery.clean_shutdown
        assert log.recovery.indexes_rebuilt == 0
        log.set_high_watermark(log.log_end_offset)
        assert len(read_all(log)) == 30


def test_a_close_after_appends_writes_indexes_log_and_hw_again(tmp_path: Path) -> None:
    directory = tmp_path / "log"
    traced_close(directory, tmp_path / "t1", appended=30)
    again = traced_close(directory, tmp_path / "t2", appended=5)
    assert any(name.endswith(".index") for name in again)
    assert "high-watermark-checkpoint.tmp" in again
    assert again[-1] == "clean-shutdown.tmp"
    with Log.open(directory, SMALL) as log:
        assert log.recovery.clean_shutdown
        assert log.recovery.hw_checkpoint == 35
        assert log.high_watermark == 35
