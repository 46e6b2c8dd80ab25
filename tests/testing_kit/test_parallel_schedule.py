"""The parallel suite's order (tests/support/parallel.py): units longest first by the table
of measured seconds, a busy worker handed the shortest unit, a table that names only
tests that exist, and the per-worker seconds printed at the end."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from support import durations
from support.parallel import (
    BUSY_S,
    CLUSTER_LANE_OF,
    DEFAULT_TEST_S,
    DURATIONS_FILE,
    IN_PROCESS_FILES,
    TESTS_ROOT,
    Estimates,
    WorkerLoad,
)


def test_units_are_ordered_by_their_summed_seconds_ties_in_collection_order() -> None:
    estimates = Estimates({"a::slow": 30.0, "b::one": 4.0, "b::two": 4.0, "c::mid": 10.0})
    units = {
        "a": {"a::slow": False},
        "quick1": {"q::1": False},
        "b": {"b::one": False, "b::two": False, "b::unlisted": False},
        "c": {"c::mid": False},
        "quick2": {"q::2": False},
    }
    assert estimates.of(units["b"]) == 8.0 + DEFAULT_TEST_S
    assert estimates.longest_first(units) == ["a", "c", "b", "quick1", "quick2"]


def test_a_worker_busy_for_longer_than_the_bound_gets_the_shortest_unit() -> None:
    estimates = Estimates({"long": BUSY_S + 1, "short": BUSY_S / 2})
    assert estimates.take_last(["long"])
    assert not estimates.take_last(["short"])
    assert not estimates.take_last([])  # an idle worker gets the longest unit left


def test_the_table_names_tests_that_exist() -> None:
    table = Estimates.load().seconds
    assert table, f"{DURATIONS_FILE} is missing or empty"
    missing = {n.split("::", 1)[0] for n in table} - {
        p.relative_to(TESTS_ROOT.parent).as_posix() for p in TESTS_ROOT.rglob("test_*.py")
    }
    assert not missing, f"{DURATIONS_FILE.name} names files that are gone: {sorted(missing)}"


def test_the_in_process_files_exist_and_only_the_others_are_dealt_to_lanes() -> None:
    files = {p.name for p in (TESTS_ROOT / "cluster").glob("test_*.py")}
    assert files >= IN_PROCESS_FILES
    assert set(CLUSTER_LANE_OF) == files - IN_PROCESS_FILES


def _report(worker: str | None, nodeid: str, when: str, duration: float) -> object:
    node = None if worker is None else SimpleNamespace(gateway=SimpleNamespace(id=worker))
    return SimpleNamespace(node=node, nodeid=nodeid, when=when, duration=duration)


def test_each_workers_seconds_tests_and_last_test_are_summed_from_its_reports() -> None:
    load = WorkerLoad(cpu=lambda: None)
    for report in (
        _report("gw0", "a::one", "setup", 1.5),
        _report("gw0", "a::one", "call", 2.0),
        _report("gw1", "b::two", "call", 0.5),
        _report("gw0", "a::three", "call", 4.0),
        _report("gw0", "a::three", "teardown", 0.5),
        _report(None, "c::serial", "call", 9.0),  # not from a worker: not counted
    ):
        load.record(report)  # type: ignore[arg-type]
    lines = load.lines()
    assert len(lines) == 2  # and no CPU line: no /proc/stat here
    assert lines[0].startswith("gw0: 2 tests, 8.0 s in tests, last ended at ")
    assert lines[0].endswith("(a::three)")
    assert lines[1].startswith("gw1: 1 tests, 0.5 s in tests")
    assert lines[1].endswith("(b::two)")
    assert WorkerLoad(cpu=lambda: None).lines() == []  # a serial run prints nothing


def test_the_machines_busy_share_over_the_run_and_in_the_tail() -> None:
    ticks = iter([(0, 0), (180, 200), (190, 300)])  # (busy, total): start, then 2 reports
    load = WorkerLoad(cpu=lambda: next(ticks))
    load.record(_report("gw0", "a::one", "call", 1.0))  # type: ignore[arg-type]
    load.record(_report("gw1", "b::one", "call", 1.0))  # type: ignore[arg-type]
    load.last_end = {"gw0": 10.0, "gw1": 30.0}  # the times of those two reports
    load.samples = [(0.0, *load.samples[0][1:]), (10.0, 180, 200), (30.0, 190, 300)]
    assert load.busy_share(0.0) == 190 / 300
    assert load.busy_share(10.0) == 10 / 100
    assert load.busy_share(30.0) is None  # one sample: no span
    assert load.lines()[-1] == (
        "CPU busy (whole machine, /proc/stat): 63% over the run; 10% in its last 20.0 s,"
        " after all workers but one had ended"
    )


def test_the_durations_tool_keeps_listed_tests_of_the_old_table_and_drops_gone_files(
    tmp_path: Path,
) -> None:
    (tmp_path / "tests").mkdir()
    for name in ("a", "b", "c"):
        (tmp_path / "tests" / f"test_{name}.py").write_text("")
    logs = [
        "12.00s call     tests/test_a.py::test_x\n1.50s setup    tests/test_a.py::test_x\n",
        "9.00s call     tests/test_a.py::test_x\n2.00s call     tests/test_c.py::test_z\n",
    ]
    previous = {
        "tests/test_a.py::test_x": 30.0,  # listed again: the logs' median replaces it
        "tests/test_b.py::test_y": 4.2,  # in no log: kept
        "tests/test_gone.py::test_w": 6.0,  # its file is gone: dropped
    }
    assert durations.table(logs, previous, root=tmp_path) == {
        "tests/test_a.py::test_x": 11.2,  # median of 13.5 and 9.0
        "tests/test_b.py::test_y": 4.2,
        "tests/test_c.py::test_z": 2.0,
    }
