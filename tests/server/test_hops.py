"""The hop trace (``JET_HOP_TRACE``): what a traced process records and writes at exit."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

_SCRIPT = textwrap.dedent(
    """
    import gc
    from jetserver.infra import hops

    gc.disable()
    before = gc.get_count()[0]
    for i in range(5000):
        hops.mark("x")
    sum(range(3_000_000))  # some CPU between two marks
    hops.mark("y")
    print(gc.get_count()[0] - before)
    """
)


def _traced(tmp_path: Path, usage: bool) -> tuple[int, list[list[str]]]:
    prefix = tmp_path / "hops"
    env = {"JET_HOP_TRACE": str(prefix), "PYTHONPATH": ":".join(sys.path)}
    if usage:
        env["JET_HOP_USAGE"] = "1"
    out = subprocess.run(
        [sys.executable, "-c", _SCRIPT], env=env, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    (path,) = tmp_path.glob("hops.*")
    return int(out.stdout), [line.split() for line in path.read_text().splitlines()]


TICK_NS = 10_000_000
"""Most a schedstat reading can lag the thread's CPU time: one scheduler tick at HZ=100."""


def test_marks_make_no_garbage_collector_work(tmp_path: Path) -> None:
    # A mark kept as a tuple counted against the young generation's threshold: 5,000
    # marks made 5,000 net container allocations, so the trace caused the collections
    # it marks.
    grown, lines = _traced(tmp_path, usage=False)
    assert grown < 50
    assert [line[0] for line in lines] == ["x"] * 5000 + ["y"]
    assert all(len(line) == 2 for line in lines)
    times = [int(line[1]) for line in lines]
    assert times == sorted(times)


def test_usage_records_the_thread_cpu_and_its_wait_for_a_cpu(tmp_path: Path) -> None:
    grown, lines = _traced(tmp_path, usage=True)
    assert grown < 50
    assert all(len(line) == 5 for line in lines)
    threads = {line[2] for line in lines}
    assert len(threads) == 1  # one thread marked them all
    first, last = lines[-2], lines[-1]
    cpu = int(last[3]) - int(first[3])
    waited = int(last[4]) - int(first[4])
    wall = int(last[1]) - int(first[1])
    # A running thread's schedstat CPU is brought up to date at the scheduler's tick or
    # switch, so each reading may lag by up to a tick (10 ms at HZ=100): CPU ran 2 ms past
    # the wall time once under CI's load with a bound of 1 ms.
    assert 0 < cpu <= wall + TICK_NS  # the sum between them took CPU, within its wall time
    assert 0 <= waited <= wall + TICK_NS
