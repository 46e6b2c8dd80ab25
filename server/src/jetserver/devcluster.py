"""A local development cluster: one nats-server plus N ``jet server`` processes.

Used by ``jet dev``, the demo and tests. Every process is a child started here and stopped
here by PID (SIGTERM, then SIGKILL after a bound). Data goes to ``data_dir`` (a temporary
directory, removed at stop, unless one is given).

With ``servers > 1`` the servers form a cluster (spec/cluster.md): each gets a fixed client
port and a metadata Raft port on 127.0.0.1, every other server as a peer, and a generated
cluster password (passed in the environment variable ``JET_CLUSTER_PASSWORD``). Ports and
password are kept in ``<data_dir>/devcluster.json`` so that a dev cluster started again on
the same data directory finds its members at the same addresses. A single server runs
without a cluster, on a port chosen at start.

:meth:`DevCluster.kill` (SIGKILL), :meth:`DevCluster.stop_server` (SIGTERM) and
:meth:`DevCluster.start_server` (again, same ports and data) serve fault tests.

Thread safety: one owner per instance.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import TracebackType
from typing import IO, Any

import attrs
import orjson

from jetsdk.codec.errors import CodecError
from jetsdk.codec.frames import Api, FrameDecoder, encode_frame
from jetsdk.codec.messages import decode_json, encode_json
from jetserver.errors import JetServerError
from jetserver.nats_process import NatsServerProcess

MAX_DEV_SERVERS = 9
"""Most servers a dev cluster runs."""
PASSWORD_ENV = "JET_CLUSTER_PASSWORD"
"""Environment variable carrying the cluster password to the servers."""
LAYOUT_FILE = "devcluster.json"
"""Ports and password of a dev cluster, in its data directory."""
DEFAULT_READY_TIMEOUT_S = 30.0
DEFAULT_STOP_TIMEOUT_S = 20.0
_POLL_INTERVAL_S = 0.02


def _free_ports(count: int) -> list[int]:
    """``count`` distinct ports free on 127.0.0.1 now (all bound at once, so the kernel
    cannot hand out one twice)."""
    socks = [socket.socket() for _ in range(count)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [int(s.getsockname()[1]) for s in socks]
    finally:
        for s in socks:
            s.close()


def _metadata(address: str, timeout_s: float) -> dict[str, Any]:
    """One blocking Metadata request to the server at ``address``."""
    host, _, port = address.rpartition(":")
    with socket.create_connection((host, int(port)), timeout=timeout_s) as sock:
        sock.sendall(encode_frame(Api.METADATA, 1, encode_json({"streams": []})))
        decoder = FrameDecoder()
        while True:
            frame = decoder.next_frame()
            if frame is not None:
                if frame.is_error:
                    raise ValueError(f"Metadata refused by {address}")
                return decode_json(frame.body)
            data = sock.recv(65536)
            if not data:
                raise ValueError(f"{address} closed the connection")
            decoder.feed(data)


def _resume(proc: subprocess.Popen[bytes]) -> None:
    """SIGCONT (a stopped process would not act on SIGTERM)."""
    with contextlib.suppress(ProcessLookupError):
        proc.send_signal(signal.SIGCONT)


def _reap(p: ServerProcess, timeout_s: float) -> None:
    if p.proc is None:
        return
    try:
        p.proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        p.proc.kill()
        p.proc.wait(timeout=timeout_s)


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
    proc: subprocess.Popen[bytes] | None
    """The process (None while stopped)."""
    address: str = ""
    """``host:port`` once ready."""
    port: int = 0
    """Client port (0: chosen at start; fixed in a cluster)."""
    raft_port: int = 0
    """Metadata Raft port (cluster only)."""

    @property
    def pid(self) -> int:
        """PID of the running process.

        Raises:
            DevClusterError: it is not running.
        """
        if self.proc is None:
            raise DevClusterError(f"jet server {self.server_id} is not running")
        return self.proc.pid

    @property
    def alive(self) -> bool:
        """True while its process runs."""
        return self.proc is not None and self.proc.poll() is None


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
    password: str = attrs.field(default="", repr=False)
    """The cluster password (with ``servers > 1``, after start)."""
    _own_dir: bool = False
    _layout: dict[str, Any] = attrs.field(factory=dict)

    @property
    def clustered(self) -> bool:
        """True if the servers form a cluster (more than one)."""
        return self.servers > 1

    def server(self, server_id: str) -> ServerProcess:
        """The server with this id.

        Raises:
            KeyError: no such server.
        """
        for p in self.processes:
            if p.server_id == server_id:
                return p
        raise KeyError(server_id)

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
                f"--servers {self.servers}: a dev cluster runs 1 to {MAX_DEV_SERVERS} servers"
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
            self._load_layout()
            for i in range(1, self.servers + 1):
                server_id = f"s{i}"
                ports = self._layout.get("servers", {}).get(server_id, {})
                p = ServerProcess(
                    server_id,
                    self.data_dir / server_id,
                    self.data_dir / f"{server_id}.ready",
                    None,
                    port=int(ports.get("port", 0)),
                    raft_port=int(ports.get("raft_port", 0)),
                )
                self.processes.append(p)
            for p in self.processes:  # every member known before any starts (peers)
                self._spawn(p)
            deadline = time.monotonic() + timeout_s
            for p in self.processes:
                self._wait_ready(p, deadline)
            if self.clustered:
                self._wait_all_registered(deadline)
        except BaseException:
            self.stop()
            raise

    def _wait_all_registered(self, deadline: float) -> None:
        """Wait until every server's metadata lists every server (a ready server has
        registered itself, but may not have applied the others' registrations yet)."""
        for p in self.processes:
            while True:
                error: Exception | None = None
                try:
                    listed = _metadata(p.address, max(0.1, deadline - time.monotonic()))
                except (OSError, CodecError, ValueError) as exc:
                    listed, error = {}, exc
                if len(listed.get("servers", [])) == len(self.processes):
                    break
                if time.monotonic() > deadline:
                    raise DevClusterError(
                        f"jet server {p.server_id} does not list every server in time "
                        f"({error or listed.get('servers')})"
                    )
                time.sleep(_POLL_INTERVAL_S)

    def _load_layout(self) -> None:
        """Read (or create) the ports and password of a cluster."""
        if not self.clustered:
            return
        assert self.data_dir is not None
        path = self.data_dir / LAYOUT_FILE
        try:
            layout = orjson.loads(path.read_bytes())
        except (FileNotFoundError, orjson.JSONDecodeError):
            layout = None
        ids = [f"s{i}" for i in range(1, self.servers + 1)]
        if not isinstance(layout, dict) or sorted(layout.get("servers", {})) != sorted(ids):
            ports = iter(_free_ports(2 * len(ids)))
            layout = {
                "password": secrets.token_urlsafe(24),
                "servers": {i: {"port": next(ports), "raft_port": next(ports)} for i in ids},
            }
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "wb") as f:
                f.write(orjson.dumps(layout, option=orjson.OPT_INDENT_2))
        self._layout = layout
        self.password = str(layout["password"])

    def _spawn(self, p: ServerProcess) -> None:
        server_id = p.server_id
        data = p.data_dir
        ready = p.ready_file
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
            str(p.port),
            "--data-dir",
            str(data),
            "--ready-file",
            str(ready),
        ]
        env = dict(os.environ)
        env.pop(PASSWORD_ENV, None)
        if self.clustered:
            peers = [
                f"{o.server_id}@127.0.0.1:{o.raft_port}"
                for o in self.processes
                if o.server_id != server_id
            ]
            args += ["--raft-address", f"127.0.0.1:{p.raft_port}", "--peers", ",".join(peers)]
            env[PASSWORD_ENV] = self.password
        args += self.server_args
        p.proc = subprocess.Popen(
            args,
            stdin=subprocess.DEVNULL,
            stdout=self.log_file if self.log_file is not None else None,
            stderr=self.log_file if self.log_file is not None else None,
            start_new_session=self.new_session,
            env=env,
        )

    def _wait_ready(self, p: ServerProcess, deadline: float) -> None:
        while True:
            assert p.proc is not None
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
            code = None if p.proc is None else p.proc.poll()
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
            if p.proc is not None and p.proc.poll() is None:
                _resume(p.proc)
                p.proc.send_signal(signal.SIGTERM)
        for p in self.processes:
            _reap(p, timeout_s)
        self.processes.clear()
        if self.nats is not None:
            self.nats.stop()
            self.nats = None
        if self._own_dir and self.data_dir is not None:
            shutil.rmtree(self.data_dir, ignore_errors=True)
            self.data_dir = None
            self._own_dir = False

    # ---------------------------------------------------------------- one server

    def kill(self, server_id: str, sig: signal.Signals = signal.SIGKILL) -> None:
        """Send ``sig`` (default SIGKILL) to one server by PID and reap it (unless the
        signal does not end it, e.g. SIGSTOP)."""
        p = self.server(server_id)
        if p.proc is None or p.proc.poll() is not None:
            return
        p.proc.send_signal(sig)
        if sig in (signal.SIGKILL, signal.SIGTERM, signal.SIGINT):
            _reap(p, DEFAULT_STOP_TIMEOUT_S)

    def stop_server(self, server_id: str, timeout_s: float = DEFAULT_STOP_TIMEOUT_S) -> None:
        """Stop one server cleanly (SIGTERM, SIGKILL after ``timeout_s``)."""
        p = self.server(server_id)
        if p.proc is not None and p.proc.poll() is None:
            _resume(p.proc)
            p.proc.send_signal(signal.SIGTERM)
        _reap(p, timeout_s)

    def start_server(self, server_id: str, timeout_s: float = DEFAULT_READY_TIMEOUT_S) -> None:
        """Start a stopped or killed server again (same ports, id and data); wait until
        ready.

        Raises:
            DevClusterError: it is running, exited at start, or was not ready in time.
        """
        p = self.server(server_id)
        if p.alive:
            raise DevClusterError(f"jet server {server_id} is already running")
        self._spawn(p)
        self._wait_ready(p, time.monotonic() + timeout_s)

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
