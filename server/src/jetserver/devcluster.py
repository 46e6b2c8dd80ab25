"""A local development cluster: one nats-server plus N ``jet server`` processes.

Used by ``jet dev``, the demo and tests. Every process is a child started here and stopped
here by PID (SIGTERM, then SIGKILL after a bound). Data goes to ``data_dir`` (a temporary
directory, removed at stop, unless one is given).

Thread safety: one owner per instance.
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import TracebackType
from typing import IO

import attrs
import orjson

from jetserver.errors import JetServerError
from jetserver.nats_process import NatsServerProcess

MAX_DEV_SERVERS = 1
"""Servers a dev cluster may run until clustering (issue 4) lands."""
DEFAULT_READY_TIMEOUT_S = 30.0
DEFAULT_STOP_TIMEOUT_S = 20.0
_POLL_INTERVAL_S = 0.02


class DevClusterError(JetServerError):
    """The dev cluster could not start (bad arguments, a process failed)."""


@attrs.define(eq=False)
class ServerProcess:
    """One ``jet server`` child."""

    server_id: str
    """Its server id."""
    data_dir: Path
    """Its data directory."""
    ready_file: Path
    """Where it writes its address."""
    proc: subprocess.Popen[bytes]
    """The process."""
    address: str = ""
    """``host:port`` once ready."""


@attrs.define(eq=False)
class DevCluster:
    """nats-server + ``servers`` jet servers on 127.0.0.1 with free ports."""

    servers: int = 1
    """Number of jet servers."""
    data_dir: Path | None = None
    """Data root (None: a temporary directory removed at :meth:`stop`)."""
    server_args: tuple[str, ...] = ()
    """Extra ``jet server`` flags for every server."""
    log_file: IO[bytes] | None = None
    """Where the servers' logs go (None: inherit stderr)."""
    new_session: bool = False
    """Start children in their own sessions (a terminal's Ctrl-C then reaches only us, and
    we stop them in order: servers first, NATS last)."""
    nats: NatsServerProcess | None = None
    """The nats-server (after start)."""
    processes: list[ServerProcess] = attrs.field(factory=list)
    """The jet servers (after start)."""
    _own_dir: bool = False

    @property
    def nats_url(self) -> str:
        """``nats://127.0.0.1:PORT``."""
        if self.nats is None:
            raise DevClusterError("dev cluster not started")
        return self.nats.url

    @property
    def addresses(self) -> list[str]:
        """``host:port`` of every jet server."""
        return [p.address for p in self.processes]

    def start(self, timeout_s: float = DEFAULT_READY_TIMEOUT_S) -> None:
        """Start nats-server, then the jet servers; return once all are ready.

        Raises:
            DevClusterError: ``servers`` out of range, or a process failed or was not ready
                in time (everything started is stopped again).
        """
        if not 1 <= self.servers <= MAX_DEV_SERVERS:
            raise DevClusterError(
                f"--servers {self.servers}: this version runs {MAX_DEV_SERVERS} server; "
                "clustering (replication, metadata via Raft) is not implemented yet"
            )
        if self.data_dir is None:
            self.data_dir = Path(tempfile.mkdtemp(prefix="jet-dev-"))
            self._own_dir = True
        self.data_dir.mkdir(parents=True, exist_ok=True)
        try:
            self.nats = NatsServerProcess(
                work_dir=self.data_dir / "nats", new_session=self.new_session
            )
            self.nats.start()
            for i in range(1, self.servers + 1):
                self.processes.append(self._spawn(f"s{i}"))
            deadline = time.monotonic() + timeout_s
            for p in self.processes:
                self._wait_ready(p, deadline)
        except BaseException:
            self.stop()
            raise

    def _spawn(self, server_id: str) -> ServerProcess:
        assert self.data_dir is not None
        data = self.data_dir / server_id
        ready = self.data_dir / f"{server_id}.ready"
        ready.unlink(missing_ok=True)
        args = [
            sys.executable,
            "-m",
            "jetserver.cli.main",
            "server",
            "--server-id",
            server_id,
            "--nats",
            self.nats_url,
            "--host",
            "127.0.0.1",
            "--port",
            "0",
            "--data-dir",
            str(data),
            "--ready-file",
            str(ready),
            *self.server_args,
        ]
        proc = subprocess.Popen(
            args,
            stdin=subprocess.DEVNULL,
            stdout=self.log_file if self.log_file is not None else None,
            stderr=self.log_file if self.log_file is not None else None,
            start_new_session=self.new_session,
        )
        return ServerProcess(server_id, data, ready, proc)

    def _wait_ready(self, p: ServerProcess, deadline: float) -> None:
        while True:
            code = p.proc.poll()
            if code is not None:
                raise DevClusterError(f"jet server {p.server_id} exited with code {code}")
            try:
                info = orjson.loads(p.ready_file.read_bytes())
            except (FileNotFoundError, orjson.JSONDecodeError):
                info = None
            if isinstance(info, dict) and info.get("address"):
                p.address = str(info["address"])
                return
            if time.monotonic() > deadline:
                raise DevClusterError(f"jet server {p.server_id} not ready in time")
            time.sleep(_POLL_INTERVAL_S)

    def check(self) -> str | None:
        """A description of the first process that died, or None if all run."""
        for p in self.processes:
            code = p.proc.poll()
            if code is not None:
                return f"jet server {p.server_id} exited with code {code}"
        if self.nats is not None and self.nats.proc is not None:
            code = self.nats.proc.poll()
            if code is not None:
                return f"nats-server exited with code {code}"
        return None

    def stop(self, timeout_s: float = DEFAULT_STOP_TIMEOUT_S) -> None:
        """Stop the jet servers (SIGTERM, SIGKILL after ``timeout_s``), then nats-server;
        remove a temporary data directory."""
        for p in self.processes:
            if p.proc.poll() is None:
                p.proc.send_signal(signal.SIGTERM)
        for p in self.processes:
            try:
                p.proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                p.proc.kill()
                p.proc.wait(timeout=timeout_s)
        self.processes.clear()
        if self.nats is not None:
            self.nats.stop()
            self.nats = None
        if self._own_dir and self.data_dir is not None:
            shutil.rmtree(self.data_dir, ignore_errors=True)
            self.data_dir = None
            self._own_dir = False

    def __enter__(self) -> DevCluster:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
