"""How the suite runs in parallel (pytest-xdist, ``nox -s tests`` passes ``-n``): which
tests must share a worker, and which start first.

- **Groups** (``--dist loadgroup``): a test that uses a fixture of module scope defined in
  tests/ (a `jet dev`, a cluster) runs on the same worker as the rest of its module, and
  one that uses a package- or session-scoped one (Spark's JVM, the CLI tests' 3-server
  `jet dev` and console) on the same worker as the rest of that conftest's tests: each such
  fixture then starts once per run, as in a serial run. The multi-server tests of
  tests/cluster run in :data:`CLUSTER_LANES` groups (whole files, dealt by their measured
  time), so that at most that many clusters run at once beside the lighter tests. Every
  other test is its own unit of work. Fixtures cheap to make again per worker
  (:data:`CHEAP_SHARED`) group nothing.
- **How the groups reach the scheduler:** xdist's own loadgroup renames node ids, which
  pytest 9.2 ignores (pytest-xdist issue 1386: the groups are silently dropped). Here the
  workers write each test's group to a file (:data:`GROUPS_ENV` names it, set by the
  controller) and :class:`GroupScheduling` reads it.
- **Order** (:class:`Estimates`, from the measured seconds of the slow tests in
  tests/support/durations.json): the longest units start first, so that no long test
  starts last and runs alone at the end while the other workers idle. A worker must hold
  the test after the one it runs (xdist's worker waits for its next test before running
  one), so a worker busy with a long test is handed the shortest unit left, not the
  longest: the longest then go to the workers about to be free (list scheduling, longest
  first). Regenerate the table after a parallel run with ``--durations=0``:
  ``python tests/support/durations.py LOG``.

Per-worker isolation needs nothing here: every port is picked free at start (port 0, or
:func:`jetserver.testing.free_ports` just before use), every data directory is under the
test's own ``tmp_path`` (xdist gives each worker its own base directory), and every
process a test starts is stopped by its PID.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import attrs
import orjson
import pytest

TESTS_ROOT = Path(__file__).resolve().parent.parent
"""The tests/ directory."""
CHEAP_SHARED = frozenset({"fsync_shim", "ca", "other_ca", "jet_dev", "chromium"})
"""Session fixtures cheap enough to make once per worker (a compiled shim, throwaway CAs, the
1-server `jet dev` its tests share, the browser tests' Chromium): they do not tie their
tests to one worker."""
CLUSTER_LANES = 2
"""Groups the files of tests/cluster are dealt into, so that at most that many clusters run
at once beside the lighter tests. With one lane its ~160 tests ran one after another on
one worker for longer than the rest of the suite together (the run's critical path). The
files are dealt by :data:`CLUSTER_SECONDS`, longest first, each to the lane with the least
so far, so that the lanes end together. The lanes wait far more than they compute: the 212
tests of tests/cluster took 199 CPU-s (their processes and all they started, a cpuacct
cgroup per worker) in 1,535 s of test time on 2 workers at load ~25 (2026-11-30), while
the CI run of 98fd002 kept 91 % of both cores busy: the suite's time is mostly the CPU
of the other tests."""
CLUSTER_SECONDS = {
    "test_faults_partition.py": 307,
    "test_faults_fsync.py": 199,
    "test_control_failover.py": 184,
    "test_faults_power_loss.py": 160,
    "test_faults_random.py": 121,
    "test_takeover_cluster.py": 111,
    "test_faults_corruption.py": 110,
    "test_rolling_restart.py": 101,
    "test_preferred_leaders.py": 92,
    "test_disk_full_cluster.py": 83,
    "test_faults_two_stops.py": 81,
    "test_faults_bitrot.py": 77,
    "test_faults_follower.py": 69,
    "test_parked_wakes.py": 55,
    "test_message_limit_cluster.py": 43,
    "test_group_cluster.py": 42,
    "test_faults_leader.py": 37,
    "test_isr_long_poll.py": 37,
    "test_rf3_turns.py": 33,
    "test_fetch_sessions.py": 29,
    "test_create_ready.py": 27,
    "test_replication_cluster.py": 26,
    "test_stop_after_kill.py": 25,
    "test_produce_many_cluster.py": 23,
    "test_incremental_sessions.py": 24,  # its CI run of 2026-11-30 (not the run below)
    "test_fetch_stream_cluster.py": 21,
    "test_reconcile_skip.py": 14,  # its CI run of 2026-11-30 (not the run below)
    "test_key_cas_failover.py": 20,
    "test_role_summary.py": 20,
    "test_control_metadata.py": 17,
    "test_stop_all.py": 16,
    "test_hw_news.py": 14,
    "test_control_dev.py": 13,
}
"""Seconds each cluster test file took (its tests' setup, call and teardown summed) in one
run of tests/cluster and tests/spark on 4 xdist workers (load 15-30 on 2 cores shared,
2026-11-29, at 3d62eea: 359 passed in 1246 s); a file not listed counts
:data:`CLUSTER_DEFAULT_S`. Only the order matters: dealt by the table before this one
(another run's), the lanes of that run held 1207 and 1036 s, and the worker of the
1207 s lane ended 168 s after the other three; the same seconds dealt by this table make
lanes of 1122 and 1121 s, and 1097 and 1096 s without :data:`IN_PROCESS_FILES`."""
CLUSTER_DEFAULT_S = 10
IN_PROCESS_FILES = frozenset(
    {
        "test_control_config.py",
        "test_control_elections.py",
        "test_control_handoff.py",
        "test_control_liveness.py",
        "test_control_ops.py",
        "test_control_placement.py",
        "test_control_takeover.py",
        "test_isr_safety.py",
    }
)
"""Files of tests/cluster that start no server process (pure functions, or a one-member
Raft in the test's own process): their tests go to any worker, not to a lane (54 s of the
lanes' 2243 s in the run of :data:`CLUSTER_SECONDS`)."""
CLUSTER_FILES = tuple(
    sorted(
        p.name for p in (TESTS_ROOT / "cluster").glob("test_*.py") if p.name not in IN_PROCESS_FILES
    )
)


def deal_lanes(files: tuple[str, ...], lanes: int) -> dict[str, int]:
    """``{file: lane}``: longest first (:data:`CLUSTER_SECONDS`), each to the lane with the
    fewest seconds so far (ties: the lower lane; equal times in name order)."""
    load = [0] * lanes
    dealt: dict[str, int] = {}
    for name in sorted(files, key=lambda f: (-CLUSTER_SECONDS.get(f, CLUSTER_DEFAULT_S), f)):
        lane = load.index(min(load))
        dealt[name] = lane
        load[lane] += CLUSTER_SECONDS.get(name, CLUSTER_DEFAULT_S)
    return dealt


CLUSTER_LANE_OF = deal_lanes(CLUSTER_FILES, CLUSTER_LANES)
GROUPS_ENV = "JET_TEST_GROUPS_FILE"
"""Environment variable: the file where workers write ``{node id: group}``."""
DURATIONS_FILE = Path(__file__).with_name("durations.json")
"""``{node id: seconds}`` of the slowest tests of parallel runs (tests/support/durations.py
writes it from their ``--durations`` lists): now the medians over the slowest 100 of the
last three fresh-clone CI runs on the dev VM (8fafda6c 571.75 s, f2c5cf6d 623.64 s, b766
692.47 s; /work/notes/s25, s26), and for the tests none of them lists, the seconds the
table held before (runs of 28cc2762 and 3d62eea); the others count :data:`DEFAULT_TEST_S`."""
DEFAULT_TEST_S = 0.2
"""Seconds of a test the table does not list (most take well under a second)."""
BUSY_S = 5.0
"""A worker whose tests in hand are estimated to take longer than this gets the shortest
unit left (see :class:`Estimates`); otherwise the longest."""


@attrs.frozen
class Estimates:
    """Estimated seconds of tests and units of work, from the table of measured times."""

    seconds: dict[str, float]

    @classmethod
    def load(cls, path: Path = DURATIONS_FILE) -> Estimates:
        """The table at ``path`` (empty if there is none: then the collection order)."""
        try:
            return cls(orjson.loads(path.read_bytes()))
        except FileNotFoundError:
            return cls({})

    def of(self, nodeids: Iterable[str]) -> float:
        """Estimated seconds of running ``nodeids`` one after another."""
        return sum(self.seconds.get(n, DEFAULT_TEST_S) for n in nodeids)

    def longest_first(self, units: dict[str, dict[str, bool]]) -> list[str]:
        """The scopes of ``units`` (scope -> its node ids), longest first (ties: in order)."""
        return sorted(units, key=lambda scope: -self.of(units[scope]))

    def take_last(self, in_hand: Iterable[str]) -> bool:
        """Whether a worker holding the unfinished tests ``in_hand`` should get the
        shortest unit left rather than the longest: it will not be free for a while, and
        whatever it gets waits behind what it holds."""
        return self.of(in_hand) > BUSY_S


def is_distributed(config: pytest.Config) -> bool:
    """True in an xdist worker (``-n``): the workers collect, the controller schedules."""
    return hasattr(config, "workerinput")


def shared_group(item: pytest.Item) -> str | None:
    """The group of ``item``: the conftest directory of a package/session fixture it uses,
    else its module if it uses a module-scoped fixture of tests/, else None."""
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return None
    module_group: str | None = None
    for name in item.fixturenames:  # type: ignore[attr-defined]
        defs = info.name2fixturedefs.get(name)
        if not defs or name in CHEAP_SHARED:
            continue
        fixture = defs[-1]
        source = Path(fixture.func.__code__.co_filename).resolve()
        if not source.is_relative_to(TESTS_ROOT):
            continue
        where = source.parent.relative_to(TESTS_ROOT.parent).as_posix()
        if fixture.scope in ("package", "session"):
            return where
        if fixture.scope == "module":
            module_group = item.nodeid.split("::", 1)[0]
    path = item.nodeid.split("::", 1)[0]
    if path.startswith("tests/cluster/") and Path(path).name in CLUSTER_LANE_OF:
        return f"tests/cluster/lane-{CLUSTER_LANE_OF[Path(path).name]}"
    return module_group


def arrange(config: pytest.Config, items: list[pytest.Item]) -> None:
    """In an xdist worker: write each test's group for the scheduler."""
    if not is_distributed(config):
        return
    target = os.environ.get(GROUPS_ENV)
    if not target:
        return
    groups = {item.nodeid: group for item in items if (group := shared_group(item))}
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(target))
    with os.fdopen(fd, "wb") as out:
        out.write(orjson.dumps(groups))
    os.replace(tmp, target)  # every worker writes the same map: the last one stays


def announce_groups_file(config: pytest.Config) -> None:
    """In the controller of a parallel run: name the file the workers write the groups to
    (in the environment, which the workers inherit)."""
    if is_distributed(config) or not getattr(config.option, "numprocesses", None):
        return
    folder = tempfile.mkdtemp(prefix="jet-test-groups-")
    os.environ[GROUPS_ENV] = os.path.join(folder, "groups.json")
    config.add_cleanup(lambda: shutil.rmtree(folder, ignore_errors=True))


def make_scheduler(config: pytest.Config, log: Any) -> Any:
    """The scheduler of ``--dist loadgroup``: :class:`GroupScheduling` (None otherwise)."""
    if config.getvalue("dist") != "loadgroup" or not os.environ.get(GROUPS_ENV):
        return None
    from xdist.scheduler import LoadScopeScheduling

    class GroupScheduling(LoadScopeScheduling):  # type: ignore[misc]
        """xdist's scope scheduling with the scopes the workers wrote (:func:`arrange`): a
        test's group, else the test alone; the units in :class:`Estimates`' order."""

        _groups: dict[str, str] | None = None
        _estimates: Estimates | None = None

        def _split_scope(self, nodeid: str) -> str:
            if self._groups is None:
                self._groups = orjson.loads(Path(os.environ[GROUPS_ENV]).read_bytes())
            return self._groups.get(nodeid, nodeid)

        def _assign_work_unit(self, node: Any) -> None:
            if self._estimates is None:  # the first call: the queue is complete
                self._estimates = Estimates.load()
                for scope in self._estimates.longest_first(self.workqueue):
                    self.workqueue.move_to_end(scope)
            in_hand = [
                nodeid
                for unit in self.assigned_work.get(node, {}).values()
                for nodeid, done in unit.items()
                if not done
            ]
            if self._estimates.take_last(in_hand):
                self.workqueue.move_to_end(next(reversed(self.workqueue)), last=False)
            super()._assign_work_unit(node)

    return GroupScheduling(config, log)


def machine_cpu() -> tuple[int, int] | None:
    """``(busy, total)`` CPU time of the whole machine, all cores, in clock ticks since boot
    (/proc/stat; None where there is none). Idle and I/O wait are not busy."""
    try:
        with open("/proc/stat", "rb") as stat:
            ticks = [int(v) for v in stat.readline().split()[1:9]]
    except (OSError, ValueError):
        return None
    if len(ticks) < 5:
        return None
    total = sum(ticks)
    return total - ticks[3] - ticks[4], total


@attrs.define
class WorkerLoad:
    """In the controller of a parallel run: each worker's seconds in tests and when it ran
    its last one, and how busy the machine's CPUs were, printed at the end, so that a run
    shows whether its wall time is the total work (the workers end together, the CPUs busy
    throughout) or a tail (one worker runs alone at the end, the CPUs partly idle)."""

    cpu: Callable[[], tuple[int, int] | None] = machine_cpu
    """Where the machine's CPU time is read (:func:`machine_cpu`)."""
    started: float = attrs.field(factory=time.monotonic)
    busy: dict[str, float] = attrs.field(factory=dict)
    count: dict[str, int] = attrs.field(factory=dict)
    last_end: dict[str, float] = attrs.field(factory=dict)
    last_test: dict[str, str] = attrs.field(factory=dict)
    samples: list[tuple[float, int, int]] = attrs.field(factory=list)
    """``(seconds since start, busy, total)`` at the start and at each report."""

    def __attrs_post_init__(self) -> None:
        self._sample(0.0)

    def _sample(self, at: float) -> None:
        if (ticks := self.cpu()) is not None:
            self.samples.append((at, *ticks))

    def record(self, report: pytest.TestReport) -> None:
        """Count one phase (setup, call, teardown) of a test a worker ran."""
        node = getattr(report, "node", None)
        if node is None:
            return
        worker = node.gateway.id
        now = time.monotonic() - self.started
        self.busy[worker] = self.busy.get(worker, 0.0) + report.duration
        self.last_end[worker] = now
        if report.when == "call":
            self.count[worker] = self.count.get(worker, 0) + 1
            self.last_test[worker] = report.nodeid
        self._sample(now)

    def busy_share(self, since: float) -> float | None:
        """The share of the machine's CPU time that was busy from ``since`` (seconds from
        the start) to the last report; None without two samples in that span."""
        span = [s for s in self.samples if s[0] >= since]
        if len(span) < 2 or span[-1][2] == span[0][2]:
            return None
        return (span[-1][1] - span[0][1]) / (span[-1][2] - span[0][2])

    def lines(self) -> list[str]:
        """One line per worker (tests, seconds in tests, when its last test ended), then
        the machine's busy CPU share over the run and after all workers but one ended."""
        out = [
            f"{worker}: {self.count.get(worker, 0)} tests, {self.busy[worker]:.1f} s in"
            f" tests, last ended at {self.last_end[worker]:.1f} s"
            f" ({self.last_test.get(worker, '-')})"
            for worker in sorted(self.busy)
        ]
        whole = self.busy_share(0.0)
        if not out or whole is None:
            return out
        line = f"CPU busy (whole machine, /proc/stat): {whole:.0%} over the run"
        ends = sorted(self.last_end.values())
        if len(ends) > 1 and (tail := self.busy_share(ends[-2])) is not None:
            line += (
                f"; {tail:.0%} in its last {ends[-1] - ends[-2]:.1f} s, after all workers"
                " but one had ended"
            )
        return [*out, line]
