"""Shared fixtures: see tests/support/ for the nats-server, `jet dev` and server helpers.

- ``anyio_backend``: asyncio for every async test (the server's NATS link, nats-py, is
  asyncio-only); tests/sdk and tests/raft run on trio too, test_socket_io on uvloop too.
- ``nats_server`` (function scope): a fresh nats-server on a free 127.0.0.1 port.
- ``jet_dev`` (session scope: one per xdist worker): ``jet dev --servers 1`` as a subprocess;
  ``.nats_url``, ``.servers`` (list of "host:port"), ``.proc``; stopped by PID at teardown.
  The tests of a worker share it: each names its streams and groups so that no other test
  uses them (support.names.unique, or a name only its module uses) and asserts nothing of
  the server as a whole.
- Test clusters (``jetserver.testing.Cluster``) run with :data:`CLUSTER_SETTINGS` under
  their own settings: idle timers for tests (a longer Raft tick and heartbeat).
- Server processes of the test kit (``jetserver.testing.JetServer``, ``Cluster``) are forked
  from one pre-imported interpreter per worker (``jetserver.testing.forking``), not spawned;
  ``JET_TEST_FORK_SERVER=0`` spawns them all.
- ``chromium`` (session scope: one per xdist worker that runs a browser test): a headless
  Chromium the browser tests share, each through ``chromium.page()``
  (support.browser.SharedChromium).
- ``module_jet_dev`` (module scope): a ``jet dev --servers 1`` of the module's own, for tests
  that share state in order (the doc examples, run as a reader would) or need a server no
  other test touched.
"""

from __future__ import annotations

import gc
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings

sys.path.insert(0, str(Path(__file__).parent))

from jetserver.testing import forking
from jetserver.testing.cluster import use_settings
from support.browser import SharedChromium
from support.fsync_fault import ShimUnavailable, shim_path
from support.jet_dev import JetDev
from support.nats_server import NatsServer
from support.parallel import WorkerLoad, announce_groups_file, arrange, make_scheduler
from support.timeout_guard import held_alarm

settings.register_profile("jet", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("jet")
"""Property tests on a loaded machine: no deadline, and no health check on how long drawing
the examples took (the tests' properties still hold; a slow draw is the machine, not the test)."""


@pytest.fixture
def anyio_backend() -> str:
    """Async tests run on asyncio (directories or modules may widen or narrow this)."""
    return "asyncio"


@pytest.fixture
def nats_server() -> Iterator[NatsServer]:
    """A nats-server for one test (stopped by PID afterwards)."""
    with NatsServer() as server:
        yield server


@pytest.fixture(scope="session")
def jet_dev(tmp_path_factory: pytest.TempPathFactory) -> Iterator[JetDev]:
    """`jet dev --servers 1` shared by the tests of one worker (a start and stop costs ~1.4
    CPU-s: once per worker, not once per module)."""
    data_dir = tmp_path_factory.mktemp("jet-dev") / "data"
    with JetDev.start(data_dir) as dev:
        yield dev


@pytest.fixture(scope="module")
def module_jet_dev(tmp_path_factory: pytest.TempPathFactory) -> Iterator[JetDev]:
    """`jet dev --servers 1` for one test module (its tests then share a worker)."""
    data_dir = tmp_path_factory.mktemp("jet-dev-module") / "data"
    with JetDev.start(data_dir) as dev:
        yield dev


@pytest.fixture(scope="session")
def fsync_shim() -> Path:
    """The fsync fault shim (tests/support/fsync_fault.py), built once; skip without cc."""
    try:
        return shim_path()
    except ShimUnavailable as exc:
        pytest.skip(str(exc))


@pytest.fixture(scope="session")
def chromium() -> Iterator[SharedChromium]:
    """The worker's headless Chromium, started at the first test that takes a page."""
    shared = SharedChromium()
    try:
        yield shared
    finally:
        shared.close()


CLUSTER_SETTINGS = {"cluster": {"raft_tick_s": 0.1, "heartbeat_s": 0.3}}
"""Under every test ``Cluster``'s own settings (jetserver.testing.cluster.use_settings): the
Raft thread wakes for its timers every 0.1 s, not 20 ms (messages and proposals wake it at
once), and an idle metadata leader sends its heartbeat every 0.3 s, not 0.1 s (a commit is
still sent at once: PySyncObj sends append-entries whenever the leader applied an entry;
elections stay 3-4.5 s, > 3 heartbeats). Idle 3-server clusters, 20 s windows, interleaved,
medians of 3 (/proc CPU of the 3 servers, load 28-37, 2026-12-01): 4.65 % of a core at
tick 0.05 / heartbeat 0.1 (until then), 4.20 % at 0.05 / 0.3, 3.80 % at 0.1 / 0.3 (-18 %).
Earlier (load 56-60, 2026-11-30): 6.1 % at a 0.02 s tick, 4.9 % at 0.05 s."""

WORKER_LOAD = WorkerLoad()
"""Per-worker seconds of a parallel run (the controller's), printed at its end."""


def pytest_configure(config: pytest.Config) -> None:
    """In parallel runs: where the workers tell the scheduler the groups. Servers are forked
    from a fork server (module docstring)."""
    announce_groups_file(config)
    forking.use(True)
    use_settings(CLUSTER_SETTINGS)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport() -> Iterator[None]:
    """pytest-timeout's alarm held while pytest makes the report (support.timeout_guard):
    a failure formatted on a loaded machine must not abort the run."""
    with held_alarm():
        yield


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """In the controller of a parallel run: count each worker's seconds."""
    WORKER_LOAD.record(report)


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """In the controller of a parallel run: each worker's load and when it finished."""
    if lines := WORKER_LOAD.lines():
        terminalreporter.section("seconds per worker")
        for line in lines:
            terminalreporter.write_line(line)


def pytest_collection_finish(session: pytest.Session) -> None:
    """Freeze what the process holds after collection (pytest, the imported packages, the
    collected items): the collector's full collections, which a test's own garbage sets
    off, then walk only the objects made since, as a forked server's do
    (jetserver.testing.fork_server). The group simulation's 200 default seeds, one pytest
    process each, alternating (load 43-48, 2026-12-01): 37.5 CPU-s as before, 32.1 frozen
    (-15 %). ``gc.collect()`` in a test still collects what the test made."""
    gc.collect()
    gc.freeze()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """In parallel runs, tests sharing an expensive fixture share a worker and the longest
    start first (tests/support/parallel.py)."""
    arrange(config, items)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """``--dist loadgroup`` with the groups the workers wrote (tests/support/parallel.py)."""
    return make_scheduler(config, log)
