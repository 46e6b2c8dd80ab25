from __future__ import annotations

from pathlib import Path

import pytest

from jetserver.cli import demo_storage


def test_demo_runs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    demo_storage.run(tmp_path)
    out = capsys.readouterr().out
    assert "compaction: 360 -> 48 records" in out
    assert "bytes truncated: 49" in out
    assert "read back 52 records" in out
