"""A jet cluster of real processes for fault tests: nats-server + N ``jet server``\\ s.

    with Cluster(tmp_path, servers=3) as cluster:        # starts everything, bounded
        s = cluster.servers[0]
        s.kill9()            # SIGKILL by PID; the data directory stays
        s.pause(); s.resume()    # SIGSTOP / SIGCONT
        s.start()            # restart on the same data directory, ports and id
        cluster.power_loss()     # kill -9 every server, then cut every file back to its
                                 # last fsync (storage durability trace); start() them again

Every server gets its own TOML config file (fixed client and Raft ports chosen at creation,
so a restarted server keeps its addresses), its own log file, and with ``power_loss=True``
the environment variable ``JET_TEST_DURABLE_LOG`` naming its durability trace. Every wait
is bounded; every process is stopped by PID (SIGCONT first if paused, SIGTERM, SIGKILL
after a bound).

Thread safety: one owner (the test); the blocking calls may run in a worker thread
(``anyio.to_thread.run_sync``) while async drivers use the cluster's addresses.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from types import TracebackType
from typing import Any

import anyio
import attrs
import orjson
import pytest

from jetserver.devcluster import MAX_DEV_SERVERS
from jetserver.nats_process import NatsServerProcess
from jetserver.storage.durability_trace import ENV_VAR as TRACE_ENV_VAR
from jetserver.storage.durability_trace import PowerLossReport, simulate_power_loss
from support.netns import NetLab

READY_TIMEOUT_S = 30.0
"""Bound on one server becoming ready (ready file written)."""
STOP_TIMEOUT_S = 15.0
"""Bound on a clean stop before SIGKILL."""
POLL_S = 0.02
"""Polling interval of the synchronous waits."""
CLUSTER_PASSWORD = "fault-tests-password-0123456789"
"""The cluster secret of test clusters (>= 16 characters)."""
PASSWORD_ENV = "JET_CLUSTER_PASSWORD"

CLUSTERING_AVAILABLE = MAX_DEV_SERVERS > 1
"""False until the server runs as a cluster (``jet dev --servers 3``)."""
needs_cluster = pytest.mark.xfail(
    not CLUSTERING_AVAILABLE,
    reason="clustering not in the server yet (jetserver.devcluster.MAX_DEV_SERVERS == 1)",
    strict=False,
)
"""Marks a test that needs a multi-server cluster."""

Settings = Mapping[str, Mapping[str, Any]]
"""Extra config: section -> key -> value (merged into every server's TOML)."""


class HarnessError(AssertionError):
    """A process did not start or stop within its bound."""


def free_port() -> int:
    """A currently free TCP port on 127.0.0.1 (the OS picks it; tiny race before bind)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def free_ports(count: int) -> list[int]:
    """``count`` distinct free TCP ports on 127.0.0.1: every socket stays bound until all
    are chosen, so the OS cannot hand out the same port twice within one call."""
    socks: list[socket.socket] = []
    try:
        for _ in range(count):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            socks.append(sock)
            sock.bind(("127.0.0.1", 0))
        return [int(sock.getsockname()[1]) for sock in socks]
    finally:
        for sock in socks:
            sock.close()


def wait_until(predicate: Callable[[], bool], timeout_s: float, what: str) -> float:
    """Poll ``predicate`` until true; return the seconds it took.

    Raises:
        HarnessError: not true within ``timeout_s`` (the message names ``what``).
    """
    start = time.monotonic()
    deadline = start + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise HarnessError(f"{what}: not within {timeout_s} s")
        time.sleep(POLL_S)
    return time.monotonic() - start


async def wait_until_async(
    predicate: Callable[[], Any], timeout_s: float, what: str, *, interval_s: float = 0.05
) -> float:
    """Await ``predicate()`` (a sync or async callable) until truthy; return seconds taken.

    Raises:
        HarnessError: not truthy within ``timeout_s``.
    """
    start = time.monotonic()
    deadline = start + timeout_s
    while True:
        value = predicate()
        if hasattr(value, "__await__"):
            value = await value
        if value:
            return time.monotonic() - start
        if time.monotonic() > deadline:
            raise HarnessError(f"{what}: not within {timeout_s} s")
        await anyio.sleep(interval_s)


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return orjson.dumps(value).decode()
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    raise TypeError(f"cannot write {value!r} as TOML")


def to_toml(sections: Mapping[str, Mapping[str, Any]]) -> str:
    """A TOML document of flat sections (str, int, float, bool and lists of them)."""
    lines: list[str] = []
    for name, values in sections.items():
        lines.append(f"[{name}]")
        lines.extend(f"{key} = {_toml_value(v)}" for key, v in values.items() if v is not None)
        lines.append("")
    return "\n".join(lines)


@attrs.define(eq=False)
class JetProcess:
    """One ``jet server`` process, restartable on the same data directory and ports."""

    server_id: str
    """Server id (``s1``, ``s2``, ...)."""
    root: Path
    """Directory of its data dir, config, ready file, log and trace."""
    port: int
    """Client protocol port."""
    raft_port: int
    """Metadata Raft port (unused with one server)."""
    config: dict[str, dict[str, Any]]
    """Its TOML configuration (written at each start)."""
    trace: bool = False
    """Record a durability trace (JET_TEST_DURABLE_LOG) for :meth:`power_loss`."""
    proc: subprocess.Popen[bytes] | None = None
    """The running process (None before the first start)."""
    paused: bool = False
    """True between :meth:`pause` and :meth:`resume`."""
    starts: int = 0
    """Number of starts (incarnations) so far."""
    extra_env: dict[str, str] = attrs.field(factory=dict)
    """Added to the environment of every start (e.g. the fsync fault shim)."""
    host: str = "127.0.0.1"
    """Its address (another one for a server in its own network namespace)."""
    exec_prefix: tuple[str, ...] = ()
    """Command prefix, e.g. ``ip netns exec NS`` (the process keeps the PID it execs)."""

    @property
    def data_dir(self) -> Path:
        """Its data directory."""
        return self.root / "data"

    @property
    def address(self) -> str:
        """``HOST:PORT`` (the same across restarts)."""
        return f"{self.host}:{self.port}"

    @property
    def raft_address(self) -> str:
        """``HOST:RAFT_PORT``."""
        return f"{self.host}:{self.raft_port}"

    @property
    def trace_path(self) -> Path:
        """Its durability trace file (outside the data directory)."""
        return self.root / "durability-trace.jsonl"

    @property
    def log_path(self) -> Path:
        """Its stdout/stderr (appended across restarts)."""
        return self.root / "server.log"

    @property
    def pid(self) -> int:
        """PID of the running process."""
        if self.proc is None:
            raise HarnessError(f"{self.server_id} was never started")
        return self.proc.pid

    @property
    def alive(self) -> bool:
        """True while the process runs (paused counts as alive)."""
        return self.proc is not None and self.proc.poll() is None

    def spawn(self) -> None:
        """Start the process without waiting for it to be ready."""
        if self.alive:
            raise HarnessError(f"{self.server_id} is already running")
        self.root.mkdir(parents=True, exist_ok=True)
        ready = self.root / "ready.json"
        ready.unlink(missing_ok=True)
        config_path = self.root / "config.toml"
        config_path.write_text(to_toml(self.config))
        env = {**os.environ, **self.extra_env, PASSWORD_ENV: CLUSTER_PASSWORD}
        env.pop(TRACE_ENV_VAR, None)
        if self.trace:
            env[TRACE_ENV_VAR] = str(self.trace_path)
        with open(self.log_path, "ab") as log_file:
            log_file.write(f"---- start {self.starts + 1} at {time.time():.3f}\n".encode())
            log_file.flush()
            self.proc = subprocess.Popen(
                [
                    *self.exec_prefix,
                    sys.executable,
                    "-m",
                    "jetserver.cli.main",
                    "server",
                    "--config",
                    str(config_path),
                ],
                stdin=subprocess.DEVNULL,
                stdout=log_file,
                stderr=log_file,
                env=env,
            )
        self.paused = False
        self.starts += 1

    def wait_ready(self, timeout_s: float = READY_TIMEOUT_S) -> None:
        """Wait for the ready file of the current incarnation.

        Raises:
            HarnessError: it exited or was not ready in time (the log tail is included).
        """
        ready = self.root / "ready.json"

        def is_ready() -> bool:
            if not self.alive:
                raise HarnessError(f"{self.server_id} exited at start: {self.log_tail()}")
            try:
                return bool(orjson.loads(ready.read_bytes()).get("address"))
            except (FileNotFoundError, orjson.JSONDecodeError):
                return False

        try:
            wait_until(is_ready, timeout_s, f"{self.server_id} ready")
        except HarnessError as exc:
            raise HarnessError(f"{exc}; log: {self.log_tail()}") from None

    def start(self, timeout_s: float = READY_TIMEOUT_S) -> None:
        """Start (or restart) on the same data directory and ports; wait until ready."""
        self.spawn()
        self.wait_ready(timeout_s)

    def kill9(self) -> None:
        """SIGKILL by PID and reap (the data directory stays as the kill left it)."""
        proc = self.proc
        if proc is None or proc.poll() is not None:
            return
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(STOP_TIMEOUT_S)
        self.paused = False

    def pause(self) -> None:
        """SIGSTOP by PID."""
        os.kill(self.pid, signal.SIGSTOP)
        self.paused = True

    def resume(self) -> None:
        """SIGCONT by PID."""
        if self.paused and self.alive:
            os.kill(self.pid, signal.SIGCONT)
        self.paused = False

    def stop(self, timeout_s: float = STOP_TIMEOUT_S) -> int | None:
        """SIGTERM (after SIGCONT if paused), SIGKILL after ``timeout_s``; the exit code."""
        proc = self.proc
        if proc is None:
            return None
        if proc.poll() is None:
            if self.paused:
                os.kill(proc.pid, signal.SIGCONT)
                self.paused = False
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout_s)
        return proc.returncode

    def log_tail(self, chars: int = 3000) -> str:
        """The end of its log file."""
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except FileNotFoundError:
            return "(no log)"

    def incarnation_log(self) -> str:
        """Its log since the current incarnation started."""
        try:
            text = self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""
        marker = f"---- start {self.starts} at "
        at = text.rfind(marker)
        return text[at:] if at >= 0 else text

    def apply_power_loss(self) -> PowerLossReport:
        """Cut its files back to their last fsync (the process must be dead).

        Raises:
            HarnessError: it is still running, or it was not started with ``trace``.
        """
        if self.alive:
            raise HarnessError(f"{self.server_id} is running; kill it first")
        if not self.trace:
            raise HarnessError(f"{self.server_id} was started without a durability trace")
        return simulate_power_loss(self.trace_path)


@attrs.define(eq=False)
class Cluster:
    """nats-server + ``servers`` jet servers on 127.0.0.1. Use as a context manager."""

    root: Path
    """Where every process keeps its files."""
    servers_count: int = 3
    """Number of jet servers."""
    power_loss: bool = False
    """Start the servers with a durability trace (for :meth:`simulate_power_loss`)."""
    settings: Settings = attrs.field(factory=dict)
    """Extra config sections merged into every server's TOML."""
    log_level: str = "INFO"
    """Server log level."""
    server_env: Mapping[str, Mapping[str, str]] = attrs.field(factory=dict)
    """Extra environment per server id (``s1``...), for every start of that server."""
    netlab: NetLab | None = None
    """If set, every server runs in its own namespace of this lab (host = server id), and
    so does nats-server (host ``nats``); the test reaches them from its own namespace."""
    nats: NatsServerProcess | None = None
    """The nats-server (after :meth:`start`)."""
    servers: list[JetProcess] = attrs.field(factory=list)
    """The jet servers (after :meth:`start`)."""

    @property
    def nats_url(self) -> str:
        """``nats://127.0.0.1:PORT``."""
        if self.nats is None:
            raise HarnessError("cluster not started")
        return self.nats.url

    @property
    def addresses(self) -> list[str]:
        """Client addresses of every server (alive or not)."""
        return [s.address for s in self.servers]

    def server(self, server_id: str) -> JetProcess:
        """The server with this id."""
        for s in self.servers:
            if s.server_id == server_id:
                return s
        raise KeyError(server_id)

    def live(self) -> list[JetProcess]:
        """Servers whose process runs and is not paused."""
        return [s for s in self.servers if s.alive and not s.paused]

    def _configs(self) -> list[JetProcess]:
        ids = [f"s{i}" for i in range(1, self.servers_count + 1)]
        chosen = iter(free_ports(2 * len(ids)))
        ports = {i: (next(chosen), next(chosen)) for i in ids}
        lab = self.netlab
        hosts = {i: lab.ip(i) if lab is not None else "127.0.0.1" for i in ids}
        out = []
        for sid in ids:
            root = self.root / sid
            port, raft_port = ports[sid]
            config: dict[str, dict[str, Any]] = {
                "server": {"id": sid, "data_dir": str(root / "data")},
                "listen": {
                    "host": hosts[sid],
                    "port": port,
                    "ready_file": str(root / "ready.json"),
                },
                "nats": {
                    "servers": [self.nats_url],
                    "reconnect_wait_s": 0.05,
                    "reconnect_max_wait_s": 0.5,
                    "connect_timeout_s": 2.0,
                },
                "logging": {"level": self.log_level},
            }
            if self.servers_count > 1:
                config["cluster"] = {
                    "raft_address": f"{hosts[sid]}:{raft_port}",
                    "peers": [
                        f"{other}@{hosts[other]}:{ports[other][1]}" for other in ids if other != sid
                    ],
                }
            for section, values in self.settings.items():
                config.setdefault(section, {}).update(values)
            out.append(
                JetProcess(
                    sid,
                    root,
                    port,
                    raft_port,
                    config,
                    trace=self.power_loss,
                    extra_env=dict(self.server_env.get(sid, {})),
                    host=hosts[sid],
                    exec_prefix=tuple(lab.exec_prefix(sid)) if lab is not None else (),
                )
            )
        return out

    def start(self, timeout_s: float = READY_TIMEOUT_S) -> None:
        """Start nats-server, then every server (all spawned before any is waited for, so
        a Raft group can form); return once all are ready. Everything started is stopped
        again if one fails."""
        self.root.mkdir(parents=True, exist_ok=True)
        try:
            lab = self.netlab
            self.nats = NatsServerProcess(
                work_dir=self.root / "nats",
                host=lab.ip("nats") if lab is not None else "127.0.0.1",
                exec_prefix=tuple(lab.exec_prefix("nats")) if lab is not None else (),
            )
            self.nats.start()
            self.servers = self._configs()
            for s in self.servers:
                s.spawn()
            for s in self.servers:
                s.wait_ready(timeout_s)
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        """Stop every server (SIGTERM, SIGKILL after a bound), then nats-server."""
        for s in self.servers:
            if s.alive and s.paused:
                s.resume()
        for s in self.servers:
            if s.alive and s.proc is not None:
                s.proc.send_signal(signal.SIGTERM)
        for s in self.servers:
            s.stop()
        if self.nats is not None:
            self.nats.stop()

    def restart_nats(self) -> None:
        """Stop nats-server and start it again on the same port."""
        assert self.nats is not None
        self.nats.restart()

    def simulate_power_loss(self) -> dict[str, PowerLossReport]:
        """kill -9 every server at once, then cut each one's files back to their last fsync.

        The servers stay down; start them with :meth:`start_all`.
        """
        if not self.power_loss:
            raise HarnessError("the cluster was started without power_loss=True")
        for s in self.servers:
            if s.alive:
                os.kill(s.pid, signal.SIGKILL)
        for s in self.servers:
            s.kill9()
        return {s.server_id: s.apply_power_loss() for s in self.servers}

    def start_all(self, timeout_s: float = READY_TIMEOUT_S) -> None:
        """Start every server that is not running (spawned together, then waited for)."""
        down = [s for s in self.servers if not s.alive]
        for s in down:
            s.spawn()
        for s in down:
            s.wait_ready(timeout_s)

    def all_logs(self) -> dict[str, str]:
        """Server id -> its whole log file (every incarnation)."""
        out = {}
        for s in self.servers:
            try:
                out[s.server_id] = s.log_path.read_text(errors="replace")
            except FileNotFoundError:
                out[s.server_id] = ""
        return out

    def logs(self, chars: int = 2000) -> str:
        """The tail of every server's log (for failure messages)."""
        return "\n".join(f"==== {s.server_id}\n{s.log_tail(chars)}" for s in self.servers)

    def __enter__(self) -> Cluster:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
        if exc is not None:
            print(f"\nserver logs (tails) under {self.root}:\n{self.logs()}")
