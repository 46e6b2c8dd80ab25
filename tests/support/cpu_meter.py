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
one line per test, ``{"test": node id, "cpu": s, "wall": s}``, after it ran (so an
interrupted run keeps what it measured), then ``{"collection": s, "total": s}`` at its end
(collection: the process's own CPU from its start to the end of collection, with any
children; total: that plus its cgroup's usage to the end). The second command sums them
per test file, largest first.

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
from collections.abc import Iterator
from pathlib import Path
from typing import Any

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
        out.mkdir(parents=True, exist_ok=True)
        self.lines = (out / f"{worker}.jsonl").open("ab", buffering=0)

    def usage_s(self) -> float:
        return int((self.group / "cpuacct.usage").read_text()) / 1e9

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item) -> Iterator[None]:
        cpu, wall = self.usage_s(), time.monotonic()
        yield
        spent = {"cpu": self.usage_s() - cpu, "wall": time.monotonic() - wall}
        self.lines.write(orjson.dumps({"test": item.nodeid, **spent}) + b"\n")

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


def per_file(out: Path) -> tuple[dict[str, list[float]], float, float]:
    """``({file: [cpu s, wall s, tests]}, collection cpu s, total cpu s)`` over the
    reports in ``out``."""
    files: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0])
    collection = total = 0.0
    for path in sorted(out.glob("*.jsonl")):
        for line in path.read_bytes().splitlines():
            entry: dict[str, Any] = orjson.loads(line)
            if "test" not in entry:
                collection += entry["collection"]
                total += entry["total"]
                continue
            row = files[entry["test"].split("::", 1)[0]]
            row[0] += entry["cpu"]
            row[1] += entry["wall"]
            row[2] += 1
    return dict(files), collection, total


def main(argv: list[str]) -> None:
    if not argv:
        sys.exit(__doc__)
    files, collection, total = per_file(Path(argv[0]))
    top = int(argv[1]) if len(argv) > 1 else 40
    tests_cpu = sum(r[0] for r in files.values())
    print(
        f"total {total:.1f} CPU-s: collection {collection:.1f}, tests {tests_cpu:.1f},"
        f" other {total - collection - tests_cpu:.1f}; {len(files)} files"
    )
    print(f"{'cpu s':>8} {'wall s':>8} {'tests':>6}  file")
    for name, (cpu, wall, n) in sorted(files.items(), key=lambda kv: -kv[1][0])[:top]:
        print(f"{cpu:8.1f} {wall:8.1f} {int(n):6d}  {name}")


if __name__ == "__main__":
    main(sys.argv[1:])
