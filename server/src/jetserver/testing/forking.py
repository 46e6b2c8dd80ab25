"""Server processes forked from one pre-imported interpreter (a fork server) instead of
spawned: a spawn pays the interpreter's start and ~0.6 CPU-s of imports every time.

    fork_server.use(True)                 # in the test process (tests/conftest.py)
    server = fork_server.shared()         # the process's ForkServer, or None
    if server is not None and server.can_fork(env):
        proc = server.start(args, env, log_file)   # Popen-like: pid, poll, wait, ...

A :class:`ForkServer` is a ``python -m jetserver.testing.fork_server`` child (see there)
started on first use. A forked server is a child of that process, not of the caller: its
PID, process group, session, signals and exit code are a spawned one's, and
:class:`ForkedProcess` reports its end as ``Popen`` would (``returncode`` negative for a
signal). It differs where an interpreter's start matters, so the caller spawns instead for
an environment that differs from the fork server's in anything but :data:`RUNTIME_ENV`
(``LD_PRELOAD``, ``PYTHON*`` flags, variables read at import), and for a command prefix
(``ip netns exec``).

Off unless :func:`use` turned it on; ``JET_TEST_FORK_SERVER=0`` keeps it off. Linux only.

Thread safety: any thread may start processes; one :class:`ForkedProcess` may be waited on
from several threads.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import IO, Any

import orjson

from jetserver.storage.durability_trace import ENV_VAR as TRACE_ENV_VAR

__all__ = ["ENV_SWITCH", "RUNTIME_ENV", "ForkServer", "ForkedProcess", "shared", "use"]

ENV_SWITCH = "JET_TEST_FORK_SERVER"
"""``0``: never fork (every server is spawned), whatever :func:`use` said."""
RUNTIME_ENV = frozenset({"JET_CLUSTER_PASSWORD", TRACE_ENV_VAR, "PYTEST_CURRENT_TEST"})
"""Variables a forked server may have of its own: read after the imports, or not at all
(pytest's name of the running test); the trace, read at import, the child applies itself."""
START_TIMEOUT_S = 120.0
"""Bound on the fork server's answer to a start (the first waits for its imports)."""
LOST_CODE = -int(signal.SIGKILL)
"""``returncode`` of a forked process whose fork server ended before it did."""


def _readable(sock: socket.socket, timeout_s: float | None) -> bool:
    """Wait up to ``timeout_s`` (None: no bound) for ``sock`` to be readable (poll, not
    select: a test process may hold descriptors past select's 1024)."""
    poller = select.poll()
    poller.register(sock, select.POLLIN)
    return bool(poller.poll(None if timeout_s is None else timeout_s * 1000))


class ForkedProcess:
    """A forked server process, with ``subprocess.Popen``'s interface for a child that
    was given no pipes: ``pid``, ``returncode``, ``poll``, ``wait``, ``send_signal``,
    ``terminate``, ``kill``."""

    def __init__(self, args: list[str], pid: int, channel: socket.socket) -> None:
        self.args = args
        self.pid = pid
        self.returncode: int | None = None
        self.cpu_s: float | None = None
        """User + system CPU seconds, once it ended."""
        self._channel = channel
        self._lock = threading.Lock()

    def _receive(self, timeout_s: float | None) -> bool:
        """Wait up to ``timeout_s`` (None: no bound) for the exit report; True if it ended."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        if not self._lock.acquire(timeout=-1 if timeout_s is None else max(0.0, timeout_s)):
            return False
        try:
            if self.returncode is not None:
                return True
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not _readable(self._channel, left):
                return False
            message = self._channel.recv(4096)
            self._channel.close()
            report = orjson.loads(message) if message else {"code": LOST_CODE}
            self.cpu_s = report.get("cpu_s")
            self.returncode = int(report["code"])
            return True
        finally:
            self._lock.release()

    def poll(self) -> int | None:
        """The exit code if it ended, else None."""
        self._receive(0.0)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        """Wait for it to end; its exit code.

        Raises:
            subprocess.TimeoutExpired: not within ``timeout``.
        """
        if not self._receive(timeout):
            raise subprocess.TimeoutExpired(self.args, timeout or 0.0)
        assert self.returncode is not None
        return self.returncode

    def send_signal(self, sig: int) -> None:
        """Send ``sig`` by PID unless it has ended."""
        if self.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, sig)

    def terminate(self) -> None:
        """SIGTERM."""
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        """SIGKILL."""
        self.send_signal(signal.SIGKILL)


class ForkServer:
    """A ``python -m jetserver.testing.fork_server`` child and the socket to it."""

    def __init__(self) -> None:
        self.env = {k: v for k, v in os.environ.items() if k not in RUNTIME_ENV}
        """The environment it was started with (its children's, but for RUNTIME_ENV)."""
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        with theirs:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "jetserver.testing.fork_server", str(theirs.fileno())],
                pass_fds=[theirs.fileno()],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                env=self.env,
            )
        self._control = ours
        self._lock = threading.Lock()
        self._preloaded = False

    def wait_preloaded(self, timeout_s: float = START_TIMEOUT_S) -> None:
        """Wait until it has done its imports (a start does not need to: it queues).

        Raises:
            OSError: it ended, or did not finish them within ``timeout_s``.
        """
        with self._lock:
            if self._preloaded:
                return
            if not _readable(self._control, timeout_s) or self._control.recv(64) != b"ready":
                raise OSError("fork server: not ready")
            self._preloaded = True

    def can_fork(self, env: Mapping[str, str]) -> bool:
        """True if a server with environment ``env`` may be forked (module docstring)."""
        if self.proc.poll() is not None:
            return False
        keys = (self.env.keys() | env.keys()) - RUNTIME_ENV
        return all(self.env.get(k) == env.get(k) for k in keys)

    def start(
        self,
        args: list[str],
        env: Mapping[str, str],
        log: IO[bytes],
        *,
        new_session: bool = False,
        file_limit: int | None = None,
    ) -> ForkedProcess:
        """Fork ``python -m jetserver.cli.main ARGS`` with output to ``log``.

        Raises:
            OSError: the fork server is gone or refused (the caller may spawn instead).
        """
        request = {
            "args": args,
            "env": dict(env),
            "cwd": os.getcwd(),
            "new_session": new_session,
            "file_limit": file_limit,
        }
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            with theirs, self._lock:
                socket.send_fds(
                    self._control, [orjson.dumps(request)], [theirs.fileno(), log.fileno()]
                )
            readable = _readable(ours, START_TIMEOUT_S)
            answer: dict[str, Any] = orjson.loads(ours.recv(4096) or b"{}") if readable else {}
        except BaseException:
            ours.close()
            raise
        if "pid" not in answer:
            ours.close()
            raise OSError(f"fork server: no start ({answer.get('error', 'no answer')})")
        return ForkedProcess(["jet", *args], int(answer["pid"]), ours)

    def cpu_s(self) -> float:
        """CPU seconds of the fork server and of its ended children (from /proc)."""
        fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rpartition(")")[2].split()
        ticks = sum(int(f) for f in fields[11:15])  # utime stime cutime cstime
        return ticks / os.sysconf("SC_CLK_TCK")

    def close(self) -> None:
        """End the fork server (its running children go on) and wait for it, bounded."""
        self._control.close()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)


_wanted = False
_shared: ForkServer | None = None
_owner = 0
_shared_lock = threading.Lock()


def use(wanted: bool) -> None:
    """Fork servers from a fork server in this process (``True``) or spawn them."""
    global _wanted
    _wanted = wanted


def supported() -> bool:
    """True where the fork server runs (Linux: ``pidfd_open``, descriptor passing)."""
    return sys.platform == "linux" and hasattr(os, "pidfd_open") and hasattr(socket, "send_fds")


def shared() -> ForkServer | None:
    """This process's fork server (started on first use), or None when not in use."""
    global _shared, _owner
    if not _wanted or os.environ.get(ENV_SWITCH) == "0" or not supported():
        return None
    with _shared_lock:
        if _shared is None or _owner != os.getpid():
            _shared = ForkServer()
            _owner = os.getpid()
            atexit.register(_shared.close)
        return _shared
