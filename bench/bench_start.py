"""What starting and stopping a server costs in CPU (issue 37): every test that starts one
pays it, and on a 2-core machine the suite's CPU is its wall time.

Per round, in CPU-s of the child processes (user + system, ``RUSAGE_CHILDREN`` around each):

- ``interpreter``: ``python -c pass``;
- ``imports``: a fresh interpreter importing what ``jet server`` imports before it runs
  (the CLI's ``server`` command and ``jetserver.server``);
- ``single``: one ``jet server`` (the test kit's ``JetServer``) spawned, ready, stopped
  (SIGTERM), with the seconds from spawn to ready and of the stop;
- ``cluster3``: a test ``Cluster`` of 3 (nats-server included) started (every server ready
  and registered) and stopped.

``single fork`` and ``cluster3 fork``: the same, the servers forked from the test kit's fork
server (``jetserver.testing.forking``, as the test suite does; its one start of ~0.7 CPU-s
per worker not counted), in turns with the spawned ones; CPU-s of the children and of the
fork server with its ended children (/proc).

With ``JET_BENCH_AGAINST=<another jet work tree>`` the rounds alternate between this tree
(``A``) and that one (``B``), in turns (A B, B A, ...). ``JET_START_ROUNDS`` (default 5;
quick 2). Run: ``python -m bench start [--quick]``.
"""

from __future__ import annotations

import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

from bench.trees import compared_trees, running_tree
from jetserver.testing import Cluster, JetServer, NatsServer, forking, server_config

IMPORTS = "import jetserver.cli.main as m; m.build_parser('server'); import jetserver.server"
"""What ``jet server`` imports before it runs."""


def _children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    fork_server = forking.shared()
    fork_cpu_s = 0.0 if fork_server is None else fork_server.cpu_s()
    return usage.ru_utime + usage.ru_stime + fork_cpu_s


def _load() -> str:
    return Path("/proc/loadavg").read_text().split()[0]


def _python(code: str) -> float:
    before = _children_cpu_s()
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)
    return _children_cpu_s() - before


def _single(nats: NatsServer, root: Path) -> dict[str, float]:
    server = JetServer("s1", root, server_config("s1", root, nats.url))
    before = _children_cpu_s()
    started = time.monotonic()
    server.start()
    ready = time.monotonic()
    server.stop()
    return {
        "single": _children_cpu_s() - before,
        "single ready s": ready - started,
        "single stop s": time.monotonic() - ready,
    }


def _cluster3(root: Path) -> dict[str, float]:
    before = _children_cpu_s()
    started = time.monotonic()
    with Cluster(size=3, root=root):
        ready = time.monotonic()
    return {"cluster3": _children_cpu_s() - before, "cluster3 ready s": ready - started}


def _forked(nats: NatsServer, root: Path) -> dict[str, float]:
    """``_single`` and ``_cluster3`` with the servers forked from the fork server."""
    forking.use(True)
    try:
        fork_server = forking.shared()
        assert fork_server is not None
        fork_server.wait_preloaded()  # its one start per test process is not counted
        single = _single(nats, root / "single")
        cluster = _cluster3(root / "cluster")
    finally:
        forking.use(False)
    return {
        f"{k.split()[0]} fork{k[len(k.split()[0]) :]}": v for k, v in {**single, **cluster}.items()
    }


def run(quick: bool) -> None:
    rounds = int(os.environ.get("JET_START_ROUNDS", "2" if quick else "5"))
    trees = compared_trees()
    figures: dict[str, dict[str, list[float]]] = {t: defaultdict(list) for t in trees}
    with tempfile.TemporaryDirectory(prefix="jet-bench-start-") as tmp:
        nats = NatsServer(work_dir=Path(tmp) / "nats")
        nats.start()
        try:
            for n in range(rounds):
                order = list(trees) if n % 2 == 0 else list(reversed(trees))
                for name in order:
                    root = Path(tmp) / f"{name}{n}"
                    with running_tree(trees[name]):
                        got = {
                            "interpreter": _python("pass"),
                            "imports": _python(IMPORTS),
                            **_single(nats, root / "single"),
                            **_cluster3(root / "cluster"),
                            **_forked(nats, root / "forked"),
                        }
                    for key, value in got.items():
                        figures[name][key].append(value)
                    shown = ", ".join(f"{k} {v:.3f}" for k, v in got.items())
                    print(f"round {n + 1} {name}: {shown} (load {_load()})", flush=True)
        finally:
            nats.stop()
    print("medians (CPU-s, or s where named):")
    for key in figures["A"]:
        row = "  ".join(f"{t} {statistics.median(figures[t][key]):.3f}" for t in trees)
        print(f"  {key:18s} {row}")
