"""tools/fault_campaign.py keeps what a failed run's processes logged."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import pytest

from support.tools import load_tool

RUN = """
from pathlib import Path

def test_run(tmp_path: Path) -> None:
    server = tmp_path / "cluster" / "s1"
    server.mkdir(parents=True)
    (server / "server.log").write_text("s1 never listed every server")
    (server / "segment.data").write_bytes(b"x" * 100)
    assert FAILS is False
"""
"""A fault run's stand-in: it writes a server log and a data file under its tmp_path, then
passes or fails."""


def campaign() -> ModuleType:
    return load_tool("fault_campaign", "jet_fault_campaign")


def test_a_failed_run_keeps_its_process_logs_and_not_its_data(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One run of a real pytest (about 1.5 CPU-s): it fails, so its output and the log its
    "server" wrote are kept, its data file is not, and its temporary directory goes."""
    fc = campaign()
    kept_dir = tmp_path / "kept"
    monkeypatch.setattr(fc, "FAILED_OUTPUT_DIR", kept_dir)
    test_file = tmp_path / "case" / "test_stand_in.py"
    test_file.parent.mkdir()
    test_file.write_text(f"FAILS = True\n{RUN}")
    work = tmp_path / "work"
    work.mkdir()
    row = fc.Row()
    fc.run_one("stand-in", str(test_file), 7, row, work)
    assert (row.runs, row.failed) == (1, 1)
    assert list(work.iterdir()) == [], "the run's temporary directory is removed"
    kept = sorted(p.relative_to(kept_dir).as_posix() for p in kept_dir.rglob("*") if p.is_file())
    assert kept == ["stand-in-7.log", "stand-in-7/test_run0/cluster/s1/server.log"]
    server_log = kept_dir / kept[1]
    assert server_log.read_text() == "s1 never listed every server"
    assert "assert FAILS is False" in (kept_dir / "stand-in-7.log").read_text()


def test_keep_logs_copies_only_log_files_and_takes_a_missing_directory(tmp_path: Path) -> None:
    fc = campaign()
    base = tmp_path / "base"
    (base / "a" / "nats").mkdir(parents=True)
    (base / "a" / "server.log").write_text("one")
    (base / "a" / "nats" / "nats-server.log").write_text("two")
    (base / "a" / "00000000.seg").write_bytes(b"data")
    dest = tmp_path / "dest"
    assert fc.keep_logs(base, dest) == 2
    assert (dest / "a" / "server.log").read_text() == "one"
    assert (dest / "a" / "nats" / "nats-server.log").read_text() == "two"
    assert not (dest / "a" / "00000000.seg").exists()
    assert fc.keep_logs(tmp_path / "missing", tmp_path / "dest2") == 0
    assert not (tmp_path / "dest2").exists()
