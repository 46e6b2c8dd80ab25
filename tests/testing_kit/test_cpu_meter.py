"""The CPU meter (tests/support/cpu_meter.py): each worker's per-test lines summed per test
file and directory, with the collection and total lines of every worker; the top tests and
the failed ones; each test's outcome recorded by the plugin."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from support.cpu_meter import CPUACCT, OUT_ENV, per_file, read_reports, render


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


def test_the_report_ranks_directories_files_and_tests_and_lists_the_failed(
    tmp_path: Path,
) -> None:
    (tmp_path / "gw0.jsonl").write_bytes(
        _lines(
            {"test": "tests/spark/lc/test_a.py::t1", "cpu": 9.0, "wall": 20.0, "outcome": "passed"},
            {"test": "tests/spark/test_b.py::t2", "cpu": 1.0, "wall": 2.0, "outcome": "failed"},
            {"test": "tests/spark/test_b.py::t3", "cpu": 2.0, "wall": 1.0, "outcome": "skipped"},
            {"test": "tests/cli/test_c.py::t4", "cpu": 5.0, "wall": 4.0},  # before outcomes
            {"collection": 3.0, "total": 20.0},
        )
    )

    report = read_reports(tmp_path)

    assert report.per_directory() == {
        "tests/spark/lc": [9.0, 20.0, 1.0],
        "tests/spark": [3.0, 3.0, 2.0],
        "tests/cli": [5.0, 4.0, 1.0],
    }
    assert [e["test"] for e in report.top(2)] == [
        "tests/spark/lc/test_a.py::t1",
        "tests/cli/test_c.py::t4",
    ]
    assert [e["test"] for e in report.failed()] == ["tests/spark/test_b.py::t2"]
    lines = render(report, 2)
    assert lines[0] == (
        "total 20.0 CPU-s: collection 3.0, tests 17.0, other 0.0; 4 tests in 3 files"
    )
    directories = lines[1 : lines.index(next(x for x in lines if x.endswith("  file")))]
    assert [row.split()[-1] for row in directories[1:]] == [
        "tests/spark/lc",
        "tests/cli",
        "tests/spark",
    ]
    assert lines[-2:] == ["1 failed:", "     1.0      2.0  tests/spark/test_b.py::t2"]


def test_a_measured_run_records_each_tests_outcome(tmp_path: Path) -> None:
    """The plugin in a real pytest run (a cpuacct cgroup: root on cgroup v1, else skip)."""
    if not CPUACCT.is_dir() or not os.access(CPUACCT, os.W_OK):
        pytest.skip("no writable cpuacct cgroup (root on cgroup v1)")
    (tmp_path / "test_three.py").write_text(
        "import pytest\n"
        "def test_ok(): pass\n"
        "def test_bad(): assert False\n"
        "def test_later(): pytest.skip('no')\n"
        "@pytest.fixture\n"
        "def broken_teardown():\n"
        "    yield\n"
        "    raise RuntimeError('teardown')\n"
        "def test_teardown_fails(broken_teardown): pass\n"
    )
    out = tmp_path / "cpu"
    tests_dir = Path(__file__).resolve().parent.parent
    env = {**os.environ, OUT_ENV: str(out), "PYTHONPATH": str(tests_dir)}
    env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"  # 1.3 CPU-s to start, not 2.6 (load ~48)
    plugins = ["-p", "support.cpu_meter", "-p", "no:cacheprovider"]
    where = ["-c", os.devnull, "--rootdir", str(tmp_path), str(tmp_path / "test_three.py")]
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", *plugins, *where],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 1, run.stdout + run.stderr  # two failed
    outcomes = {e["test"].split("::")[-1]: e["outcome"] for e in read_reports(out).tests}
    assert outcomes == {
        "test_ok": "passed",
        "test_bad": "failed",
        "test_later": "skipped",
        "test_teardown_fails": "failed",
    }
