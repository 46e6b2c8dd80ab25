"""One ``jet server`` child process, restartable on the same data directory and ports.

    server = JetServer("s1", root, server_config("s1", root, nats.url))
    server.start()            # spawn, then wait for its ready file (bounded)
    server.address            # "127.0.0.1:PORT"
    server.kill9()            # SIGKILL by PID; the data directory stays as the kill left it
    server.pause(); server.resume()   # SIGSTOP / SIGCONT
    server.start()            # again: same id, data and ports
    server.stop()             # SIGTERM (SIGCONT first if paused), SIGKILL after a bound

Its TOML configuration is written at every start to ``root/config.toml``; the ready file,
log (appended across restarts) and durability trace live in ``root`` too. Every wait is
bounded; the process is only ever signalled by its PID.

Thread safety: one owner; the blocking calls may run in a worker thread.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import random
import resource
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import IO, Any

import attrs
import orjson

from jetserver.config.load import toml_value
from jetserver.storage.durability_trace import ENV_VAR as TRACE_ENV_VAR
from jetserver.storage.durability_trace import PowerLossReport, simulate_power_loss
from jetserver.testing import forking
from jetserver.testing.forking import ForkedProcess
from jetserver.testing.waiting import WaitTimeout, reap, wait_until

__all__ = [
    "PASSWORD_ENV",
    "READY_TIMEOUT_S",
    "STOP_TIMEOUT_S",
    "JetServer",
    "free_ports",
    "server_config",
    "to_toml",
]

READY_TIMEOUT_S = 90.0
"""Bound on one server becoming ready (ready file written). A bound, not an expectation:
a start takes about a second on a quiet machine, but in the parallel suite on a loaded
2-core machine (load 17-47) starts took over 30 s, the bound before, most before their
first log line."""
STOP_TIMEOUT_S = 15.0
"""Bound on a clean stop before SIGKILL."""
PASSWORD_ENV = "JET_CLUSTER_PASSWORD"
"""Environment variable carrying the cluster password to a server."""

Config = dict[str, dict[str, Any]]
"""A server configuration: section -> key -> value (written as TOML)."""


WORKER_PORT_BASE = 12000
"""First port of the per-worker blocks (:func:`free_ports` under pytest-xdist): below Linux's
ephemeral range (``ip_local_port_range``, 32768-60999 by default), from which the kernel picks
the ports of every outgoing connection and of every ``bind(("", 0))``."""
WORKER_PORT_BLOCK = 1000
"""Ports per block (gw0 first tries 12000-12999, gw1 13000-13999, ...)."""
PORT_LOCK_DIR = Path(tempfile.gettempdir()) / "jet-test-ports"
"""Lock files of the port blocks: a process uses a block while it holds its lock."""
_claimed: list[tuple[range, IO[bytes]]] = []
"""This process's block and its locked file (kept open: the lock goes with the process)."""


def _worker_ports() -> range | None:
    """This process's port block under pytest-xdist, or None outside xdist or when every
    block is taken. Worker ``gwN`` tries block N first, then the next ones: a block is
    claimed with a lock file held while the process lives, so that pytest sessions run at
    the same time on one machine (whose workers have the same names) do not draw the same
    ports and take each other's ports between a choice and a (re)start."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    if not (worker.startswith("gw") and worker[2:].isdigit()):
        return None
    if not _claimed:
        PORT_LOCK_DIR.mkdir(exist_ok=True)
        blocks = (32768 - WORKER_PORT_BASE) // WORKER_PORT_BLOCK
        for i in range(blocks):
            low = WORKER_PORT_BASE + (int(worker[2:]) + i) % blocks * WORKER_PORT_BLOCK
            lock = open(PORT_LOCK_DIR / f"{low}.lock", "ab")  # noqa: SIM115 (held)
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                lock.close()
                continue
            _claimed.append((range(low, low + WORKER_PORT_BLOCK), lock))
            break
        else:
            return None
    return _claimed[0][0]


def free_ports(count: int) -> list[int]:
    """``count`` distinct free TCP ports on 127.0.0.1: every socket stays bound until all
    are chosen, so the OS cannot hand out the same port twice within one call.

    A port is free when chosen, and taken by its user later: anything that binds in between
    takes it first (``Address already in use``). Alone, the ports come from the kernel's
    ephemeral range. Under pytest-xdist, where several workers start servers at once and
    every outgoing connection also takes an ephemeral port, they are drawn at random from the
    process's own block below that range (:data:`WORKER_PORT_BASE`, :func:`_worker_ports`),
    so only the same process's servers could collide.
    """
    block = _worker_ports()
    socks: list[socket.socket] = []
    try:
        candidates = random.sample(block, len(block)) if block is not None else []
        for port in candidates:
            if len(socks) == count:
                break
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                sock.close()
                continue
            socks.append(sock)
        while len(socks) < count:
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            socks.append(sock)
            sock.bind(("127.0.0.1", 0))
        return [int(sock.getsockname()[1]) for sock in socks]
    finally:
        for sock in socks:
            sock.close()


def to_toml(sections: Mapping[str, Mapping[str, Any]]) -> str:
    """A TOML document of flat sections (str, int, float, bool and lists of them)."""
    lines: list[str] = []
    for name, values in sections.items():
        lines.append(f"[{name}]")
        lines.extend(f"{key} = {toml_value(v)}" for key, v in values.items() if v is not None)
        lines.append("")
    return "\n".join(lines)


TEST_RESERVE_BYTES = 256 * 1024
"""``[storage] disk_reserve_bytes`` of test servers (a test's metadata is small)."""


def server_config(
    server_id: str,
    root: Path,
    nats_url: str,
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    data_dir: Path | None = None,
    log_level: str = "INFO",
    settings: Mapping[str, Mapping[str, Any]] | None = None,
) -> Config:
    """A test configuration: the given NATS, fast reconnects, the ready file in ``root``,
    a small space reserve (:data:`TEST_RESERVE_BYTES`).

    ``port`` 0 picks a free port at start (a restart then gets another one); ``settings``
    (section -> key -> value) are merged last.
    """
    config: Config = {
        "server": {"id": server_id, "data_dir": str(data_dir or root / "data")},
        "listen": {"host": host, "port": port, "ready_file": str(root / "ready.json")},
        "nats": {
            "servers": [nats_url],
            "reconnect_wait_s": 0.05,
            "reconnect_max_wait_s": 0.5,
            "connect_timeout_s": 2.0,
        },
        "logging": {"level": log_level},
        # Each server's data directory keeps its space reserve (16 MiB by default) after a
        # stop, and pytest keeps the temporary directories of its last three sessions.
        "storage": {"disk_reserve_bytes": TEST_RESERVE_BYTES},
    }
    for section, values in (settings or {}).items():
        config.setdefault(section, {}).update(values)
    return config


@attrs.define(eq=False)
class JetServer:
    """One ``jet server`` child process, restartable on the same data directory and ports:
    :meth:`start` (waits for its ready file), :meth:`stop` (SIGTERM, SIGKILL after a bound),
    ``kill9``, ``pause``/``resume`` (SIGSTOP/SIGCONT), always by PID."""

    server_id: str
    """Server id (``s1``, ``s2``, ...)."""
    root: Path
    """Directory of its config, ready file, log and trace (and by default its data)."""
    config: Config
    """Its configuration (written at each start): see :func:`server_config`."""
    raft_port: int = 0
    """Metadata Raft port (0: not clustered)."""
    args: tuple[str, ...] = ()
    """More ``jet server`` flags, after ``--config``."""
    password: str = attrs.field(default="", repr=False)
    """Cluster password (passed in :data:`PASSWORD_ENV`), or empty."""
    trace: bool = False
    """Record a durability trace (JET_TEST_DURABLE_LOG) for :meth:`apply_power_loss`."""
    extra_env: dict[str, str] = attrs.field(factory=dict)
    """Added to the environment of every start (e.g. a fault shim)."""
    exec_prefix: tuple[str, ...] = ()
    """Command prefix, e.g. ``ip netns exec NS`` (the process keeps the PID it execs)."""
    log_file: IO[bytes] | None = None
    """Where its output goes (None: ``root/server.log``, appended across restarts)."""
    new_session: bool = False
    """Start it in its own session (a terminal's Ctrl-C then reaches only the owner)."""
    file_limit: int | None = None
    """Its open-file limit (soft and hard), or None to inherit."""
    proc: subprocess.Popen[bytes] | ForkedProcess | None = None
    """The running process (None before the first start): spawned, or forked from the
    fork server (:mod:`jetserver.testing.forking`) where one is in use."""
    paused: bool = False
    """True between :meth:`pause` and :meth:`resume`."""
    starts: int = 0
    """Number of starts (incarnations) so far."""
    _ready_address: str = ""

    @property
    def host(self) -> str:
        """The address it listens on."""
        return str(self.config["listen"].get("host", "127.0.0.1"))

    @property
    def port(self) -> int:
        """Client port: the configured one, else the one its ready file reported."""
        configured = int(self.config["listen"].get("port", 0))
        if configured or not self._ready_address:
            return configured
        return int(self._ready_address.rpartition(":")[2])

    @property
    def address(self) -> str:
        """``HOST:PORT`` (with a configured port, the same across restarts)."""
        return f"{self.host}:{self.port}"

    @property
    def raft_address(self) -> str:
        """``HOST:RAFT_PORT``."""
        return f"{self.host}:{self.raft_port}"

    @property
    def data_dir(self) -> Path:
        """Its data directory."""
        return Path(self.config["server"]["data_dir"])

    @property
    def ready_file(self) -> Path:
        """Where it writes its address once ready."""
        return Path(self.config["listen"]["ready_file"])

    @property
    def trace_path(self) -> Path:
        """Its durability trace file (outside the data directory)."""
        return self.root / "durability-trace.jsonl"

    @property
    def log_path(self) -> Path:
        """Its stdout/stderr: ``root/server.log``, or the file :attr:`log_file` names."""
        name = getattr(self.log_file, "name", None)
        if self.log_file is not None and isinstance(name, str):
            return Path(name)
        return self.root / "server.log"

    @property
    def pid(self) -> int:
        """PID of the running process.

        Raises:
            WaitTimeout: it was never started.
        """
        if self.proc is None:
            raise WaitTimeout(f"{self.server_id} was never started")
        return self.proc.pid

    @property
    def alive(self) -> bool:
        """True while the process runs (paused counts as alive)."""
        return self.proc is not None and self.proc.poll() is None

    def spawn(self) -> None:
        """Start the process without waiting for it to be ready."""
        if self.alive:
            raise WaitTimeout(f"{self.server_id} is already running")
        self.root.mkdir(parents=True, exist_ok=True)
        self.ready_file.unlink(missing_ok=True)
        self._ready_address = ""
        config_path = self.root / "config.toml"
        config_path.write_text(to_toml(self.config))
        env = {**os.environ, **self.extra_env}
        env.pop(PASSWORD_ENV, None)
        if self.password:
            env[PASSWORD_ENV] = self.password
        env.pop(TRACE_ENV_VAR, None)
        if self.trace:
            env[TRACE_ENV_VAR] = str(self.trace_path)
        args = ["server", "--config", str(config_path), *self.args]
        opened = (
            open(self.log_path, "ab")  # noqa: SIM115 - closed by the with
            if self.log_file is None
            else contextlib.nullcontext(self.log_file)
        )
        with opened as log:
            if self.log_file is None:  # a shared log gets no markers
                log.write(f"---- start {self.starts + 1} at {time.time():.3f}\n".encode())
                log.flush()
            self.proc = self._fork(args, env, log) or subprocess.Popen(
                [*self.exec_prefix, sys.executable, "-m", "jetserver.cli.main", *args],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                env=env,
                start_new_session=self.new_session,
                preexec_fn=None if self.file_limit is None else _limit_files(self.file_limit),
            )
        self.paused = False
        self.starts += 1

    def _fork(self, args: list[str], env: dict[str, str], log: IO[bytes]) -> ForkedProcess | None:
        """The process forked from this process's fork server, or None to spawn it: no
        fork server in use, a command prefix, or an environment it cannot give."""
        server = forking.shared()
        if server is None or self.exec_prefix or not server.can_fork(env):
            return None
        try:
            return server.start(
                args, env, log, new_session=self.new_session, file_limit=self.file_limit
            )
        except OSError:
            return None

    def wait_ready(self, timeout_s: float = READY_TIMEOUT_S) -> None:
        """Wait for the ready file of the current incarnation.

        Raises:
            WaitTimeout: it exited or was not ready in time (the log tail is included).
        """

        def is_ready() -> bool:
            if not self.alive:
                code = None if self.proc is None else self.proc.returncode
                raise WaitTimeout(
                    f"{self.server_id} exited at start with code {code}: {self.log_tail()}"
                )
            try:
                address = orjson.loads(self.ready_file.read_bytes()).get("address")
            except (FileNotFoundError, orjson.JSONDecodeError):
                return False
            self._ready_address = str(address or "")
            return bool(address)

        try:
            wait_until(is_ready, timeout_s, f"{self.server_id} ready")
        except WaitTimeout as exc:
            if "exited at start" in str(exc):
                raise
            raise WaitTimeout(f"{exc}; log: {self.log_tail()}") from None

    def start(self, timeout_s: float = READY_TIMEOUT_S) -> None:
        """Start (or restart) on the same data directory and ports; wait until ready."""
        self.spawn()
        self.wait_ready(timeout_s)

    def kill9(self) -> None:
        """SIGKILL by PID and reap (the data directory stays as the kill left it)."""
        self.signal(signal.SIGKILL)

    def signal(self, sig: signal.Signals) -> None:
        """Send ``sig`` by PID; reap it if the signal ends it (SIGKILL, SIGTERM, SIGINT)."""
        proc = self.proc
        if proc is None or proc.poll() is not None:
            return
        if sig is signal.SIGSTOP:
            self.pause()
            return
        try:
            os.kill(proc.pid, sig)
        except ProcessLookupError:
            # Already gone and reaped by a concurrent wait (Popen.poll answers None while
            # another thread holds its waitpid lock): nothing left to signal.
            reap(proc, STOP_TIMEOUT_S)
            self.paused = False
            return
        if sig in (signal.SIGKILL, signal.SIGTERM, signal.SIGINT):
            if self.paused and sig is not signal.SIGKILL:
                os.kill(proc.pid, signal.SIGCONT)
            reap(proc, STOP_TIMEOUT_S)
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
            reap(proc, timeout_s)
        return proc.returncode

    def reap(self, timeout_s: float = STOP_TIMEOUT_S) -> int | None:
        """Wait for the process to exit (signalled already), SIGKILL after ``timeout_s``;
        the exit code."""
        proc = self.proc
        if proc is None:
            return None
        reap(proc, timeout_s)
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
            WaitTimeout: it is still running, or it was not started with ``trace``.
        """
        if self.alive:
            raise WaitTimeout(f"{self.server_id} is running; kill it first")
        if not self.trace:
            raise WaitTimeout(f"{self.server_id} was started without a durability trace")
        return simulate_power_loss(self.trace_path)


def _limit_files(limit: int) -> Callable[[], None]:
    def apply() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (limit, limit))

    return apply
