"""The public test kit's processes and waits (jetserver.testing): kill, pause, resume and
restart by PID, the failure report of a dead server, bounded waits."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import anyio
import pytest

from jetserver.config.load import load_config
from jetserver.testing import (
    Cluster,
    NatsServer,
    WaitTimeout,
    reap,
    wait_until,
    wait_until_async,
)
from jetserver.testing import cluster as cluster_module


def state(pid: int) -> str:
    """The process state letter from /proc (T: stopped)."""
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


def accepts(url: str) -> bool:
    host, port = url.removeprefix("nats://").rsplit(":", 1)
    try:
        with socket.create_connection((host, int(port)), timeout=1) as sock:
            return sock.recv(5) == b"INFO "
    except OSError:
        return False


def test_wait_until_returns_the_time_taken_or_names_what_did_not_happen() -> None:
    deadline = time.monotonic() + 0.05
    took = wait_until(lambda: time.monotonic() > deadline, 5, "a moment")
    assert 0.03 < took < 5
    with pytest.raises(WaitTimeout, match=r"never: not within 0\.05 s"):
        wait_until(lambda: False, 0.05, "never")


def test_reap_returns_the_exit_code_or_kills_a_process_that_does_not_end() -> None:
    done = subprocess.Popen([sys.executable, "-c", "raise SystemExit(3)"])
    assert reap(done, 30.0) == 3
    stuck = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        assert reap(stuck, 0.2) == -signal.SIGKILL  # not asked to end: killed by PID
    finally:
        if stuck.poll() is None:
            stuck.kill()
            stuck.wait(10)


def test_wait_until_async_takes_plain_and_async_predicates() -> None:
    calls: list[int] = []

    async def third_call() -> bool:
        calls.append(1)
        return len(calls) >= 3

    async def main() -> None:
        await wait_until_async(third_call, 5, "three calls", interval_s=0.001)
        with pytest.raises(WaitTimeout, match="nothing"):
            await wait_until_async(lambda: 0, 0.05, "nothing")

    anyio.run(main)
    assert len(calls) == 3


def test_nats_server_pause_resume_kill_and_start_on_the_same_port() -> None:
    with NatsServer() as nats:
        url, pid = nats.url, nats.pid
        assert accepts(url)
        nats.pause()
        wait_until(lambda: state(pid) == "T", 5, "stopped")  # signals arrive asynchronously
        nats.resume()
        wait_until(lambda: state(pid) != "T", 5, "resumed")
        assert accepts(url)
        nats.kill()
        assert not accepts(url)
        nats.start()
        assert nats.url == url
        assert nats.pid != pid
        assert accepts(url)


def test_a_single_server_cluster_reports_a_dead_server_and_restarts_it(tmp_path: Path) -> None:
    with Cluster(size=1) as cluster:
        root = cluster.root
        assert root is not None
        assert root.is_dir()
        server = cluster.server("s1")
        address, pid = server.address, server.pid
        assert cluster.check() is None
        cluster.kill("s1", signal.SIGSTOP)
        assert server.paused
        wait_until(lambda: state(pid) == "T", 5, "stopped")
        server.resume()
        cluster.kill("s1")
        assert cluster.check() == f"jet server s1 exited with code {-signal.SIGKILL}"
        cluster.start_server("s1")
        assert cluster.check() is None
        assert server.address == address
        assert server.pid != pid
        assert server.starts == 2
        assert "---- start 2 at" in server.incarnation_log()
    assert not root.exists(), "a temporary root is removed at stop"


def test_a_cluster_starts_its_servers_behind_the_command_prefix_it_is_given() -> None:
    # `python -m bench cost`'s instructions kind runs the server under valgrind this way.
    with Cluster(size=1, server_prefix=("nice", "-n", "7")) as cluster:
        niceness = Path(f"/proc/{cluster.server('s1').pid}/stat").read_text()
        assert int(niceness.rsplit(")", 1)[1].split()[16]) == min(os.nice(0) + 7, 19)


BLOCK_OF = (
    "import sys, json; from jetserver.testing.jet_process import _worker_ports, free_ports; "
    "print(json.dumps([_worker_ports().start, free_ports(4)]), flush=True); sys.stdin.read()"
)
"""A process printing the first port of its xdist port block and four ports drawn from it,
then holding its block until its stdin closes."""


def test_two_sessions_workers_of_the_same_name_draw_ports_from_different_blocks() -> None:
    """Two pytest sessions on one machine both have a worker gw0: while the first one's
    process lives, the second's gets another block (found with two sessions' clusters at
    once: a server of one could not bind a Raft port the other had just chosen)."""
    env = {**os.environ, "PYTEST_XDIST_WORKER": "gw0"}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", BLOCK_OF],
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    try:
        seen = []
        for proc in procs:
            assert proc.stdout is not None
            start, ports = json.loads(proc.stdout.readline())
            seen.append(start)
            assert all(start <= p < start + 1000 for p in ports)
        assert seen[0] != seen[1]
    finally:
        for proc in procs:
            assert proc.stdin is not None
            proc.stdin.close()
            reap(proc, 10)
            assert proc.stdout is not None
            proc.stdout.close()


def test_a_cluster_that_fails_to_start_prints_its_servers_logs(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A cluster that never becomes ready says why before it stops (a fault campaign run
    timed out at start-up with only the test's traceback kept)."""
    failing = ("sh", "-c", "echo boom at start; exit 3", "sh")
    cluster = Cluster(size=1, server_prefix=failing)
    with pytest.raises(WaitTimeout, match="exited"):
        cluster.start(timeout_s=30)
    out = capsys.readouterr().out
    assert "start failed" in out
    assert "==== s1" in out
    assert "boom at start" in out
    assert cluster.nats is None or not accepts(cluster.nats.url)


def test_suite_settings_go_under_every_cluster_s_own() -> None:
    """tests/conftest.py gives every test cluster a Raft tick of its own this way; a
    cluster's own settings still win, key by key."""
    before = cluster_module.merged_settings({})
    try:
        cluster_module.use_settings({"cluster": {"raft_tick_s": 0.05, "probe_interval_s": 0.5}})
        own = {"cluster": {"probe_interval_s": 0.2}, "auth": {"enabled": True}}
        assert cluster_module.merged_settings(own) == {
            "cluster": {"raft_tick_s": 0.05, "probe_interval_s": 0.2},
            "auth": {"enabled": True},
        }
        assert own == {"cluster": {"probe_interval_s": 0.2}, "auth": {"enabled": True}}
        cluster_module.use_settings({})
        assert cluster_module.merged_settings(own) == own
    finally:
        cluster_module.use_settings(before)


def test_a_one_server_cluster_takes_the_suite_s_cluster_section(tmp_path: Path) -> None:
    """A [cluster] section with only the suite's timer in it leaves a lone server alone."""
    conf = tmp_path / "jet.toml"
    conf.write_text('[server]\nid = "s1"\n[cluster]\nraft_tick_s = 0.05\n')
    cfg = load_config(conf, {})
    assert not cfg.cluster.enabled
    assert cfg.cluster.raft_tick_s == 0.05
