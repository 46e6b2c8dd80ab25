"""Run a jet server in the test's event loop (asyncio backend), or as a `jet server` process.

    async with running_server(nats.url, tmp_path / "data") as server:
        server.address              # "127.0.0.1:PORT"
        server.streams.replica("orders", 0).log   # internals, for assertions

`ServerProcess` runs `python -m jetserver.cli.main server ...` with a ready file, for tests
of the CLI and of signal handling; it is stopped by PID.
"""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import attrs
import orjson

from jetserver.config import ServerConfig
from jetserver.config_load import load_config
from jetserver.server import Server

READY_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 30.0


def make_config(nats_url: str, data_dir: Path, **settings: Any) -> ServerConfig:
    """A test configuration: port 0, the given NATS and data dir, fast reconnects.

    ``settings`` are ``section__key=value`` pairs, e.g. ``limits__max_message_bytes=1000``.
    """
    overrides: dict[tuple[str, str], Any] = {
        ("nats", "servers"): (nats_url,),
        ("server", "data_dir"): str(data_dir),
        ("listen", "port"): 0,
        ("nats", "reconnect_wait_s"): 0.05,
        ("nats", "reconnect_max_wait_s"): 0.5,
        ("nats", "connect_timeout_s"): 2.0,
        ("logging", "level"): "DEBUG",
    }
    for name, value in settings.items():
        section, _, key = name.partition("__")
        overrides[(section, key)] = value
    return load_config(None, {}, overrides)


@asynccontextmanager
async def running_server(nats_url: str, data_dir: Path, **settings: Any) -> AsyncIterator[Server]:
    """Start a server in this event loop; stop it cleanly when the block exits."""
    server = Server(make_config(nats_url, data_dir, **settings))
    async with anyio.create_task_group() as tg:
        await tg.start(server.run)
        try:
            yield server
        finally:
            server.request_stop()


@attrs.define(eq=False)
class ServerProcess:
    """A `jet server` child process."""

    proc: subprocess.Popen[bytes]
    """The process."""
    address: str
    """``host:port`` from its ready file."""
    log_path: Path
    """Its stderr."""

    @classmethod
    def start(
        cls,
        nats_url: str,
        data_dir: Path,
        *extra: str,
        env: dict[str, str] | None = None,
        file_limit: int | None = None,
    ) -> ServerProcess:
        """Start `jet server --port 0 --ready-file ...` and wait for the ready file.

        ``env`` is added to this process's environment for the child (e.g. a fault shim);
        ``file_limit`` sets the child's open-file limit (soft and hard).

        Raises:
            RuntimeError: it exited or was not ready in time.
        """
        data_dir.mkdir(parents=True, exist_ok=True)
        ready = data_dir.parent / f"{data_dir.name}.ready"
        ready.unlink(missing_ok=True)
        log_path = data_dir.parent / f"{data_dir.name}.log"
        with open(log_path, "ab") as log_file:
            proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "jetserver.cli.main",
                    "server",
                    "--nats",
                    nats_url,
                    "--port",
                    "0",
                    "--data-dir",
                    str(data_dir),
                    "--ready-file",
                    str(ready),
                    "--log-level",
                    "DEBUG",
                    *extra,
                ],
                stdin=subprocess.DEVNULL,
                stdout=log_file,
                stderr=log_file,
                env=None if env is None else {**os.environ, **env},
                preexec_fn=None if file_limit is None else _file_limit(file_limit),
            )
        deadline = time.monotonic() + READY_TIMEOUT_S
        while True:
            if proc.poll() is not None:
                raise RuntimeError(
                    f"jet server exited with {proc.returncode}: "
                    f"{log_path.read_text(errors='replace')[-3000:]}"
                )
            try:
                address = orjson.loads(ready.read_bytes())["address"]
                return cls(proc, address, log_path)
            except (FileNotFoundError, orjson.JSONDecodeError, KeyError):
                pass
            if time.monotonic() > deadline:
                proc.kill()
                proc.wait()
                raise RuntimeError("jet server not ready in time")
            time.sleep(0.02)

    def stop(self, sig: signal.Signals = signal.SIGTERM) -> int:
        """Send ``sig`` and wait for the exit code (SIGKILL after a bound)."""
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                return self.proc.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        return self.proc.wait(timeout=STOP_TIMEOUT_S)


def _file_limit(limit: int) -> Callable[[], None]:
    def apply() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (limit, limit))

    return apply
