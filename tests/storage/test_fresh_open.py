"""Opening a new partition's empty directory (spec/storage.md §9): the new segment's
directory entry is fsynced once and nothing else is written or synced; the recovery is
reported ``fresh``; the HW checkpoint is first written once the HW moves. A server creating
thousands of replicated partitions did four fsyncs and logged an "unclean shutdown" line for
each before."""

from __future__ import annotations

from pathlib import Path

import orjson

from jetserver.storage import Log, durability_trace
from jetserver.storage.checkpoint import HIGH_WATERMARK_FILE, LOG_START_OFFSET_FILE
from storage.helpers import SMALL, bodies


def _synced(trace: Path) -> list[tuple[str, str]]:
    """(``sync`` or ``dir``, name) of each file or directory fsync, in order."""
    events = [orjson.loads(line) for line in trace.read_bytes().splitlines()]
    return [(e["ev"], Path(e["path"]).name) for e in events if e["ev"] in ("sync", "dir")]


def test_a_fresh_directory_syncs_only_itself_and_reports_fresh(tmp_path: Path) -> None:
    directory = tmp_path / "new"
    trace = tmp_path / "trace"
    durability_trace.enable(trace)
    try:
        log = Log.open(directory, SMALL, lock=False)
    finally:
        durability_trace.disable()
    try:
        assert _synced(trace) == [("dir", directory.name)]  # the directory, once
        assert log.recovery.fresh
        assert log.recovery.ok
        assert not (directory / LOG_START_OFFSET_FILE).exists()  # missing reads as 0
        assert (log.log_start_offset, log.log_end_offset, log.high_watermark) == (0, 0, 0)
        log.checkpoint_high_watermark()  # HW 0 = what a missing checkpoint reads as
        assert not (directory / HIGH_WATERMARK_FILE).exists()
        log.append(bodies(3), 1, 0)
        log.flush()
        log.set_high_watermark(3)
        log.checkpoint_high_watermark()
        assert (directory / HIGH_WATERMARK_FILE).exists()
    finally:
        log.close()
    with Log.open(directory, SMALL, lock=False) as again:
        assert not again.recovery.fresh
        assert (again.log_start_offset, again.log_end_offset, again.high_watermark) == (0, 3, 3)


def test_a_crash_before_anything_was_written_opens_fresh_again(tmp_path: Path) -> None:
    directory = tmp_path / "new"
    first = Log.open(directory, SMALL, lock=False)
    try:
        # Not closed (as after a kill): the directory holds only the empty segment.
        with Log.open(directory, SMALL, lock=False) as again:
            assert not again.recovery.fresh  # a segment file is there: a normal recovery
            assert again.log_end_offset == 0
            assert not again.recovery.clean_shutdown
    finally:
        first.close()


def test_a_caller_may_take_the_directory_fsync_to_run_later(tmp_path: Path) -> None:
    """``sync_dir`` receives the directory instead of it being fsynced during the open (a
    server opening many partitions fsyncs their directories at once after)."""
    directory = tmp_path / "new"
    trace = tmp_path / "trace"
    recorded: list[Path] = []
    durability_trace.enable(trace)
    try:
        log = Log.open(directory, SMALL, lock=False, sync_dir=recorded.append)
    finally:
        durability_trace.disable()
    assert recorded == [directory]
    assert _synced(trace) == []  # left to the caller
    log.close()
    again_recorded: list[Path] = []
    with Log.open(directory, SMALL, lock=False, sync_dir=again_recorded.append) as again:
        assert again.recovery.clean_shutdown
    assert again_recorded == []  # nothing changed in the directory: nothing to sync
