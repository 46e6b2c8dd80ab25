"""Run `jet dev` as a subprocess and learn its addresses (the `jet_dev` fixture uses this).

    with JetDev.start(tmp_path) as dev:
        dev.nats_url        # "nats://127.0.0.1:PORT"
        dev.servers         # ["127.0.0.1:PORT"]
        dev.proc            # the `jet dev` process

Stopped by PID (SIGTERM, then SIGKILL after a bound); `jet dev` stops its children.
"""

from __future__ import annotations

import queue
import signal
import subprocess
import sys
import threading
from pathlib import Path
from types import TracebackType

import attrs

READY_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 30.0


@attrs.define(eq=False)
class JetDev:
    """A running `jet dev`."""

    nats_url: str
    """NATS URL printed by `jet dev`."""
    servers: list[str]
    """Server addresses printed by `jet dev`."""
    proc: subprocess.Popen[str]
    """The `jet dev` process."""
    log_path: Path
    """Where the servers' logs and `jet dev`'s stderr go."""
    output: list[str] = attrs.field(factory=list)
    """Every stdout line so far (filled by a background reader)."""

    @property
    def server(self) -> str:
        """The first server's ``host:port``."""
        return self.servers[0]

    @classmethod
    def start(cls, data_dir: Path, *, servers: int = 1, extra_args: tuple[str, ...] = ()) -> JetDev:
        """Start `jet dev --servers N --data-dir DIR` and wait for its two address lines.

        Raises:
            RuntimeError: it exited or did not print both lines within READY_TIMEOUT_S.
        """
        data_dir.mkdir(parents=True, exist_ok=True)
        log_path = data_dir.parent / f"{data_dir.name}-jet-dev.log"
        log_file = open(log_path, "ab")  # noqa: SIM115 - closed by the child's exit
        args = [
            sys.executable,
            "-m",
            "jetserver.cli.main",
            "dev",
            "--servers",
            str(servers),
            "--data-dir",
            str(data_dir),
            "--log-file",
            str(log_path),
            *extra_args,
        ]
        proc = subprocess.Popen(
            args,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=log_file,
            text=True,
        )
        log_file.close()
        lines: queue.Queue[str | None] = queue.Queue()
        output: list[str] = []

        def reader() -> None:
            assert proc.stdout is not None
            for line in proc.stdout:
                output.append(line.rstrip("\n"))
                lines.put(line.rstrip("\n"))
            lines.put(None)

        threading.Thread(target=reader, name="jet-dev-stdout", daemon=True).start()
        nats_url = ""
        addresses: list[str] = []
        try:
            while not (nats_url and addresses):
                try:
                    line = lines.get(timeout=READY_TIMEOUT_S)
                except queue.Empty:
                    raise RuntimeError("jet dev printed no addresses in time") from None
                if line is None:
                    raise RuntimeError(
                        f"jet dev exited early (code {proc.wait()}); log: "
                        f"{log_path.read_text(errors='replace')[-3000:]}"
                    )
                if line.startswith("nats: "):
                    nats_url = line[len("nats: ") :].strip()
                elif line.startswith("servers: "):
                    addresses = [a for a in line[len("servers: ") :].strip().split(",") if a]
        except BaseException:
            _stop(proc)
            raise
        return cls(nats_url, addresses, proc, log_path, output)

    def stop(self) -> int:
        """Stop `jet dev` (SIGTERM, SIGKILL after a bound); return its exit code."""
        return _stop(self.proc)

    def __enter__(self) -> JetDev:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def _stop(proc: subprocess.Popen[str]) -> int:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            return proc.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
    return proc.wait(timeout=STOP_TIMEOUT_S)
