"""A clean close writes and fsyncs only what changed since the log was opened
(spec/storage.md §5): an idle partition's close after a clean open rewrites neither its
indexes nor its HW checkpoint, and does not fsync its ``.log`` again; the clean-shutdown
marker is always written, and the next open trusts it."""

from __future__ import annotations

import os
from pathlib import Path

import orjson

from jetserver.storage import Log, durability_trace
from jetserver.storage.files import sync_file_system
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


def test_a_kept_marker_goes_before_the_first_truncation(tmp_path: Path) -> None:
    directory = tmp_path / "log"
    marker = directory / "clean-shutdown"
    segment = directory / "00000000000000000000.log"
    traced_close(directory, tmp_path / "t1", appended=3)
    size = segment.stat().st_size
    log = Log.open(directory, SMALL, keep_clean_marker=True)
    assert log.recovery.clean_shutdown
    assert log.recovery.clean_marker_kept
    assert marker.exists()  # not deleted at open
    log.append(bodies(2, start=3), 1, 0)
    assert marker.exists()  # appends only grow the segment past the size it names
    log._crash()  # killed: the marker names a smaller size than the file has
    os.truncate(segment, size)  # a power loss took every appended byte
    with Log.open(directory, SMALL, keep_clean_marker=True) as lost:
        assert lost.recovery.clean_shutdown  # exactly what the marker described
        assert lost.log_end_offset == 3
        lost.append(bodies(2, start=3), 1, 0)
        lost._crash()
    with Log.open(directory, SMALL, keep_clean_marker=True) as grown:
        assert not grown.recovery.clean_shutdown  # scanned as after any crash
        assert not grown.recovery.clean_marker_kept
        assert not marker.exists()  # a marker that names nothing here is deleted
        assert grown.log_end_offset == 5
    with Log.open(directory, SMALL, keep_clean_marker=True) as log:
        assert marker.exists()
        log.truncate_to(1)
        assert not marker.exists()  # deleted before the cut
    assert marker.exists()  # the clean close writes it again


def test_a_marker_left_to_a_later_sync_is_written_without_fsyncs(tmp_path: Path) -> None:
    directory = tmp_path / "log"
    traced_close(directory, tmp_path / "t1", appended=3)
    trace_path = tmp_path / "t2"
    durability_trace.enable(trace_path)
    try:
        Log.open(directory, SMALL).close(sync_marker=False)
    finally:
        durability_trace.disable()
    events = [orjson.loads(line) for line in trace_path.read_bytes().splitlines()]
    assert [e for e in events if e["ev"] in ("sync", "dir") and "clean" in str(e)] == []
    sync_file_system(directory)  # as the server does once for all its partitions
    with Log.open(directory, SMALL) as log:
        assert log.recovery.clean_shutdown


def test_a_torn_marker_is_a_crash_not_a_clean_stop(tmp_path: Path) -> None:
    directory = tmp_path / "log"
    traced_close(directory, tmp_path / "t1", appended=3)
    marker = directory / "clean-shutdown"
    whole = marker.read_bytes()
    for cut in range(len(whole)):  # every way an unsynced marker can come back short
        marker.write_bytes(whole[:cut])
        with Log.open(directory, SMALL) as log:
            assert not log.recovery.clean_shutdown, whole[:cut]
            log.set_high_watermark(log.log_end_offset)
            assert len(read_all(log)) == 3
        marker.write_bytes(whole)


def test_a_segment_without_index_entries_keeps_no_index_files(tmp_path: Path) -> None:
    # spec/storage.md §3: a new partition's clean close creates no index files while its
    # active segment has no index entries; the next open scans it (clean, nothing rebuilt).
    directory = tmp_path / "log"
    index, timeindex = directory / f"{0:020d}.index", directory / f"{0:020d}.timeindex"
    Log.open(directory, SMALL).close()
    assert not index.exists()
    assert not timeindex.exists()
    with Log.open(directory, SMALL) as log:
        assert log.recovery.clean_shutdown
        assert log.recovery.indexes_rebuilt == 0
        log.append(bodies(2), 1, 0)  # under index_interval_bytes (100): still no entry
        log.flush()
        log.set_high_watermark(log.log_end_offset)
    assert not index.exists()
    assert not timeindex.exists()
    with Log.open(directory, SMALL) as log:
        assert log.recovery.clean_shutdown
        assert log.recovery.indexes_rebuilt == 0
        assert len(read_all(log)) == 2
        log.append(bodies(10, start=2, size=30), 1, 0)  # past the interval: entries
        log.flush()
        log.set_high_watermark(log.log_end_offset)
    assert index.stat().st_size > 0
    assert timeindex.stat().st_size > 0
    with Log.open(directory, SMALL) as log:
        assert log.recovery.clean_shutdown
        assert log.recovery.indexes_rebuilt == 0
        assert len(read_all(log)) == 12
        log.truncate_to(1)  # no entries again, but the files exist: rewritten (empty)
        log.set_high_watermark(log.log_end_offset)
    assert index.read_bytes() == b""
    assert timeindex.read_bytes() == b""
    with Log.open(directory, SMALL) as log:
        assert log.recovery.clean_shutdown
        assert log.log_end_offset == 1


def test_an_empty_log_reopened_needs_no_hw_checkpoint(tmp_path: Path) -> None:
    """A missing HW checkpoint reads as the log start: an empty partition, reopened after
    a restart, does not write one (at 50,000 idle partitions the first housekeeping round
    after a restart wrote one each: an atomic write and two fsyncs, issue 34)."""
    directory = tmp_path / "log"
    Log.open(directory, SMALL).close()  # created: a .log, no checkpoint
    hw_file = directory / "high-watermark-checkpoint"
    assert not hw_file.exists()
    with Log.open(directory, SMALL) as log:
        assert not log.recovery.fresh
        assert log.recovery.hw_checkpoint is None
        assert log.checkpointed_high_watermark == log.high_watermark == 0
        log.checkpoint_high_watermark()
        assert not hw_file.exists()
        log.append(bodies(2), 1, 0)
        log.flush()
        log.set_high_watermark(2)
        log.checkpoint_high_watermark()  # it moved: written
        assert log.checkpointed_high_watermark == 2
    with Log.open(directory, SMALL) as log:
        assert log.recovery.hw_checkpoint == 2
        assert log.high_watermark == 2


def test_a_corrupt_hw_checkpoint_is_rewritten(tmp_path: Path) -> None:
    directory = tmp_path / "log"
    traced_close(directory, tmp_path / "t1", appended=3)
    hw_file = directory / "high-watermark-checkpoint"
    hw_file.write_bytes(b"garbage")
    with Log.open(directory, SMALL) as log:
        assert "high-watermark-checkpoint" in log.recovery.corrupt_files
        assert log.checkpointed_high_watermark is None
        log.checkpoint_high_watermark()
        assert log.checkpointed_high_watermark == log.high_watermark
    with Log.open(directory, SMALL) as log:
        assert log.recovery.hw_checkpoint == log.high_watermark
        assert not log.recovery.corrupt_files
