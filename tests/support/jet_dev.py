"""Run `jet dev` as a subprocess and learn its addresses (the `jet_dev` fixture uses this).

    with JetDev.start(tmp_path) as dev:
        dev.nats_url        # "nats://127.0.0.1:PORT"
        dev.servers         # ["127.0.0.1:PORT"]

Stopped by PID (SIGTERM, then SIGKILL after a bound); `jet dev` stops its children. (Tests
that need servers rather than the `jet dev` command use :mod:`jetserver.testing`.)
"""

from __future__ import annotations

from pathlib import Path

import attrs

from support.cli_child import CliChild, RunsChild

READY_TIMEOUT_S = 60.0


@attrs.define(eq=False)
class JetDev(RunsChild):
    """A running `jet dev`."""

    nats_url: str
    """NATS URL printed by `jet dev`."""
    servers: list[str]
    """Server addresses printed by `jet dev`."""
    child: CliChild
    """The `jet dev` process and its stdout lines."""
    log_path: Path
    """Where the servers' logs and `jet dev`'s stderr go."""

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
        args = ["dev", "--servers", str(servers), "--data-dir", str(data_dir)]
        with open(log_path, "ab") as log_file:
            child = CliChild.spawn(
                [*args, "--log-file", str(log_path), *extra_args], stderr=log_file
            )
        try:
            found = child.wait_for("nats: ", "servers: ", timeout_s=READY_TIMEOUT_S)
        except RuntimeError as exc:
            log = log_path.read_text(errors="replace")[-3000:]
            raise RuntimeError(f"jet dev: {exc}; log: {log}") from None
        addresses = [a for a in found["servers: "].split(",") if a]
        return cls(found["nats: "], addresses, child, log_path)
