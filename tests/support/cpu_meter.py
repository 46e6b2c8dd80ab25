"""CPU seconds of each test, with every process it started (servers, nats-server, Spark's
JVM and Python workers, forked or spawned, reaped or not): a pytest plugin.

    JET_TEST_CPU=DIR PYTHONPATH=tests pytest -p support.cpu_meter [-n 4 ...] tests/...
    python tests/support/cpu_meter.py DIR [TOP]

Each pytest process that runs tests (the serial run, or each xdist worker) moves itself
into a cpuacct cgroup of its own (cgroup v1, /sys/fs/cgroup/cpuacct; root only), which
every process it starts inherits; a test's CPU is the cgroup's usage over its setup, call
and teardown. A process that outlives its test (a module or session fixture's server)
bears its idle CPU on the tests that run while it lives, and its start on the first test
that uses it, as a test's duration does. Each process appends to ``DIR/<worker>.jsonl``
one line per test, ``{"test": node id, "cpu": s, "wall": s, "outcome": o}``, after it ran
(so an interrupted run keeps what it measured; ``o`` is ``passed``, ``failed`` (in any
phase: a test that timed out on a loaded machine spent CPU unlike a passing one) or
``skipped``), then ``{"collection": s, "total": s}`` at its end (collection: the process's
own CPU from its start to the end of collection, with any children; total: that plus its
cgroup's usage to the end). The second command sums them per test directory and per test
file, largest first, and lists the TOP (40) tests that took the most CPU, with the failed
tests.

Why a cgroup: ``/usr/bin/time`` (RUSAGE_CHILDREN) counts only processes that were waited
for up the tree; the JVMs, servers and daemons the tests start are killed or reparented.
On tests/spark (-n 2, load 30-45, 2026-11-30) time's user+sys was 67 CPU-s, the cgroups'
252 CPU-s.

Without ``JET_TEST_CPU``, or where the cgroup cannot be made, the plugin does nothing.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import attrs
import orjson
import pytest

CPUACCT = Path("/sys/fs/cgroup/cpuacct")
OUT_ENV = "JET_TEST_CPU"


def _own_cpu_s() -> float:
    """This process's CPU so far, its threads and its reaped children included."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


class CpuMeter:
    """The plugin object of one pytest process (see the module docstring)."""

    def __init__(self, out: Path, worker: str) -> None:
        self.before_group = _own_cpu_s()
        self.group = CPUACCT / f"jet-cpu-{os.getpid()}"
        self.group.mkdir()
        (self.group / "cgroup.procs").write_text(str(os.getpid()))
        self.collection = 0.0
        self.outcome = "passed"
        out.mkdir(parents=True, exist_ok=True)
        self.lines = (out / f"{worker}.jsonl").open("ab", buffering=0)

    def usage_s(self) -> float:
        return int((self.group / "cpuacct.usage").read_text()) / 1e9

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item) -> Iterator[None]:
        cpu, wall = self.usage_s(), time.monotonic()
        self.outcome = "passed"
        yield
        spent = {"cpu": self.usage_s() - cpu, "wall": time.monotonic() - wall}
        line = {"test": item.nodeid, **spent, "outcome": self.outcome}
        self.lines.write(orjson.dumps(line) + b"\n")

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        """The test's outcome over its phases: failed if any failed, else skipped if one
        skipped."""
        if report.failed:
            self.outcome = "failed"
        elif report.skipped and self.outcome == "passed":
            self.outcome = "skipped"

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        self.collection = self.before_group + self.usage_s()

    def pytest_unconfigure(self, config: pytest.Config) -> None:
        total = self.before_group + self.usage_s()
        self.lines.write(orjson.dumps({"collection": self.collection, "total": total}) + b"\n")
        self.lines.close()
        (CPUACCT / "cgroup.procs").write_text(str(os.getpid()))
        with contextlib.suppress(OSError):  # a process still in it: the group stays
            self.group.rmdir()


def pytest_configure(config: pytest.Config) -> None:
    """Register the meter in a process that runs tests, when ``JET_TEST_CPU`` is set."""
    out = os.environ.get(OUT_ENV)
    if not out or (getattr(config.option, "numprocesses", None) and not _is_worker(config)):
        return
    worker = config.workerinput["workerid"] if _is_worker(config) else "serial"  # type: ignore[attr-defined]
    try:
        meter = CpuMeter(Path(out), worker)
    except OSError as exc:
        print(f"cpu_meter: no cgroup ({exc}): not measuring", file=sys.stderr)
        return
    config.pluginmanager.register(meter, "jet-cpu-meter")


def _is_worker(config: pytest.Config) -> bool:
    return hasattr(config, "workerinput")


@attrs.frozen
class Report:
    """What the reports of one run hold (see :func:`read_reports`)."""

    tests: list[dict[str, Any]]
    """Each test's line: ``test``, ``cpu``, ``wall`` and (since outcomes were recorded)
    ``outcome``."""
    collection: float
    total: float

    def per_file(self) -> dict[str, list[float]]:
        """``{file: [cpu s, wall s, tests]}``."""
        return self._summed(lambda test: test.split("::", 1)[0])

    def per_directory(self) -> dict[str, list[float]]:
        """``{directory: [cpu s, wall s, tests]}``: the test file's directory (tests/cluster,
        tests/spark/local_cluster)."""
        return self._summed(lambda test: test.split("::", 1)[0].rsplit("/", 1)[0])

    def _summed(self, key: Callable[[str], str]) -> dict[str, list[float]]:
        rows: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0])
        for entry in self.tests:
            row = rows[key(entry["test"])]
            row[0] += entry["cpu"]
            row[1] += entry["wall"]
            row[2] += 1
        return dict(rows)

    def top(self, count: int) -> list[dict[str, Any]]:
        """The ``count`` tests that took the most CPU, most first."""
        return sorted(self.tests, key=lambda e: -e["cpu"])[:count]

    def failed(self) -> list[dict[str, Any]]:
        return [e for e in self.tests if e.get("outcome") == "failed"]


def read_reports(out: Path) -> Report:
    """The per-test lines and the summed collection and total lines of the reports in
    ``out``."""
    tests: list[dict[str, Any]] = []
    collection = total = 0.0
    for path in sorted(out.glob("*.jsonl")):
        for line in path.read_bytes().splitlines():
            entry: dict[str, Any] = orjson.loads(line)
            if "test" in entry:
                tests.append(entry)
            else:
                collection += entry["collection"]
                total += entry["total"]
    return Report(tests, collection, total)


def per_file(out: Path) -> tuple[dict[str, list[float]], float, float]:
    """``({file: [cpu s, wall s, tests]}, collection cpu s, total cpu s)`` over the
    reports in ``out``."""
    report = read_reports(out)
    return report.per_file(), report.collection, report.total


def _table(title: str, rows: dict[str, list[float]], count: int) -> list[str]:
    lines = [f"{'cpu s':>8} {'wall s':>8} {'tests':>6}  {title}"]
    for name, (cpu, wall, n) in sorted(rows.items(), key=lambda kv: -kv[1][0])[:count]:
        lines.append(f"{cpu:8.1f} {wall:8.1f} {int(n):6d}  {name}")
    return lines


def render(report: Report, top: int) -> list[str]:
    """The lines the second command prints."""
    tests_cpu = sum(e["cpu"] for e in report.tests)
    files = report.per_file()
    lines = [
        f"total {report.total:.1f} CPU-s: collection {report.collection:.1f},"
        f" tests {tests_cpu:.1f}, other {report.total - report.collection - tests_cpu:.1f};"
        f" {len(report.tests)} tests in {len(files)} files"
    ]
    directories = report.per_directory()
    lines += _table("directory", directories, len(directories))
    lines += _table("file", files, top)
    lines.append(f"{'cpu s':>8} {'wall s':>8}  test (the {top} that took the most CPU)")
    lines += [f"{e['cpu']:8.1f} {e['wall']:8.1f}  {e['test']}" for e in report.top(top)]
    failed = report.failed()
    lines.append(f"{len(failed)} failed" + (":" if failed else ""))
    lines += [f"{e['cpu']:8.1f} {e['wall']:8.1f}  {e['test']}" for e in failed]
    return lines


def main(argv: list[str]) -> None:
    if not argv:
        sys.exit(__doc__)
    top = int(argv[1]) if len(argv) > 1 else 40
    print("\n".join(render(read_reports(Path(argv[0])), top)))


if __name__ == "__main__":
    main(sys.argv[1:])
