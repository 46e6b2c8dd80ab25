"""The CPU meter's report (tests/support/cpu_meter.py): each worker's per-test lines summed
per test file, with the collection and total lines of every worker."""

from __future__ import annotations

from pathlib import Path

import orjson

from support.cpu_meter import per_file


def _lines(*entries: dict[str, object]) -> bytes:
    return b"".join(orjson.dumps(e) + b"\n" for e in entries)


def test_per_file_sums_every_workers_tests_by_file(tmp_path: Path) -> None:
    (tmp_path / "gw0.jsonl").write_bytes(
        _lines(
            {"test": "tests/a/test_x.py::test_one", "cpu": 1.5, "wall": 2.0},
            {"test": "tests/a/test_x.py::test_two[1]", "cpu": 0.25, "wall": 0.5},
            {"collection": 6.0, "total": 9.0},
        )
    )
    (tmp_path / "gw1.jsonl").write_bytes(
        _lines(
            {"test": "tests/a/test_x.py::test_two[2]", "cpu": 0.25, "wall": 1.0},
            {"test": "tests/b/test_y.py::test_three", "cpu": 4.0, "wall": 3.0},
        )  # an interrupted worker: no end line
    )
    (tmp_path / "notes.txt").write_text("not a report")

    files, collection, total = per_file(tmp_path)

    assert files == {
        "tests/a/test_x.py": [2.0, 3.5, 3.0],
        "tests/b/test_y.py": [4.0, 3.0, 1.0],
    }
    assert (collection, total) == (6.0, 9.0)
