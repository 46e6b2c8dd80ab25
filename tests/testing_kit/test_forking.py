"""Servers forked from the test kit's fork server (jetserver.testing.forking) behave as
spawned ones: their own PID, session and open-file limit when asked, the signals and exit
codes of a ``python -m jetserver.cli.main`` process, output to the log; an environment the
fork server cannot give (a preloaded library, a variable read at import) is spawned."""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from jetserver.testing import JetServer, NatsServer, forking, server_config, to_toml, wait_until

pytestmark = pytest.mark.skipif(not forking.supported(), reason="the fork server is Linux-only")


@pytest.fixture
def fork_server() -> Iterator[forking.ForkServer]:
    """A fork server of this test's own (the worker's shared one is left alone)."""
    server = forking.ForkServer()
    try:
        server.wait_preloaded()
        yield server
    finally:
        server.close()


def field(pid: int, index: int) -> str:
    """Field ``index`` (0: state) of /proc/PID/stat after the command name."""
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[index]


def test_a_forked_server_runs_stops_and_dies_as_a_spawned_one(
    nats_server: NatsServer, tmp_path: Path
) -> None:
    if forking.shared() is None:
        pytest.skip(f"the fork server is off ({forking.ENV_SWITCH}=0)")
    server = JetServer("s1", tmp_path, server_config("s1", tmp_path, nats_server.url))
    server.start()
    try:
        assert isinstance(server.proc, forking.ForkedProcess)
        assert server.proc.pid != os.getpid()
        assert field(server.pid, 2) == field(os.getpid(), 2)  # the caller's process group
        server.pause()
        wait_until(lambda: field(server.pid, 0) == "T", 10, "stopped")
        server.resume()
        server.kill9()
        assert server.proc.returncode == -signal.SIGKILL
        server.start()  # again, on the same data
        assert server.stop() == 0
        assert (server.proc.cpu_s or 0) > 0
        log = server.log_path.read_text()
        assert log.count("server ready") == 2
        assert "RuntimeWarning" not in log
    finally:
        server.stop()


def test_a_refused_start_exits_with_the_cli_s_code(
    fork_server: forking.ForkServer, tmp_path: Path
) -> None:
    log = tmp_path / "out.log"
    with open(log, "ab") as out:
        proc = fork_server.start(["server", "--no-such-flag"], dict(fork_server.env), out)
    assert proc.wait(timeout=30) == 2  # argparse's usage error
    assert "unrecognized arguments: --no-such-flag" in log.read_text()
    assert proc.poll() == 2


def test_session_file_limit_environment_and_directory_are_the_request_s(
    fork_server: forking.ForkServer,
    nats_server: NatsServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    config = tmp_path / "config.toml"
    config.write_text(to_toml(server_config("s1", tmp_path, nats_server.url)))
    (tmp_path / "data").mkdir()
    env = {**fork_server.env, "JET_LOGGING_LEVEL": "DEBUG"}  # over the file's INFO
    monkeypatch.chdir(tmp_path / "data")
    with open(tmp_path / "out.log", "ab") as out:
        proc = fork_server.start(
            ["server", "--config", str(config)], env, out, new_session=True, file_limit=512
        )
    try:
        wait_until((tmp_path / "ready.json").exists, 60, "ready file")
        limits = Path(f"/proc/{proc.pid}/limits").read_text()
        (line,) = [ln for ln in limits.splitlines() if ln.startswith("Max open files")]
        assert line.split()[3:5] == ["512", "512"]
        assert field(proc.pid, 3) == str(proc.pid)  # its own session
        assert Path(f"/proc/{proc.pid}/cwd").resolve() == (tmp_path / "data").resolve()
    finally:
        proc.terminate()
        assert proc.wait(timeout=30) == 0
    assert " DEBUG " in (tmp_path / "out.log").read_text()


def test_an_environment_read_at_start_is_spawned(fork_server: forking.ForkServer) -> None:
    base = dict(fork_server.env)
    assert fork_server.can_fork(base)
    assert fork_server.can_fork({**base, "JET_CLUSTER_PASSWORD": "x", "PYTEST_CURRENT_TEST": "t"})
    assert not fork_server.can_fork({**base, "LD_PRELOAD": "/tmp/shim.so"})
    assert not fork_server.can_fork({**base, "PYTHONPROFILEIMPORTTIME": "1"})
    assert not fork_server.can_fork({k: v for k, v in base.items() if k != "PATH"})


def test_a_wait_is_bounded(fork_server: forking.ForkServer, tmp_path: Path) -> None:
    config = tmp_path / "c.toml"
    config.write_text('[nats]\nservers = ["nats://127.0.0.1:1"]\nstartup_wait_s = 60\n')
    with open(tmp_path / "out.log", "ab") as out:
        proc = fork_server.start(
            ["server", "--config", str(config), "--data-dir", str(tmp_path / "d")],
            dict(fork_server.env),
            out,
        )
    with pytest.raises(subprocess.TimeoutExpired):
        proc.wait(timeout=0.2)
    proc.kill()
    assert proc.wait(timeout=30) == -signal.SIGKILL
