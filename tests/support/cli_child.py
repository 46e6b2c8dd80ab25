"""A `jet` command run as a child process whose stdout lines are read as they come
(`jet dev`, `jet console`): wait for the lines that announce it is ready, stop it by PID.

    child = CliChild.spawn(["dev", "--servers", "1"], stderr=log_file)
    found = child.wait_for("nats: ", "servers: ", timeout_s=60)   # {"nats: ": "nats://..."}
    child.stop()                                                  # SIGTERM, SIGKILL after 30 s
"""

from __future__ import annotations

import queue
import signal
import subprocess
import sys
import threading
from typing import IO, Self

import attrs

from jetserver.testing import reap

STOP_TIMEOUT_S = 30.0


@attrs.define(eq=False)
class CliChild:
    """A running ``python -m jetserver.cli.main ARGS``."""

    proc: subprocess.Popen[str]
    """The process."""
    output: list[str] = attrs.field(factory=list)
    """Every stdout line so far (filled by a background reader)."""
    _lines: queue.Queue[str | None] = attrs.field(factory=queue.Queue)

    @classmethod
    def spawn(
        cls,
        args: list[str],
        *,
        env: dict[str, str] | None = None,
        stderr: IO[bytes] | int = subprocess.STDOUT,
    ) -> CliChild:
        """Start it and a daemon thread reading its stdout line by line."""
        proc = subprocess.Popen(
            [sys.executable, "-m", "jetserver.cli.main", *args],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
            env=env,
        )
        child = cls(proc)
        threading.Thread(target=child._read, name=f"jet-{args[0]}-stdout", daemon=True).start()
        return child

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.output.append(line.rstrip("\n"))
            self._lines.put(line.rstrip("\n"))
        self._lines.put(None)

    def wait_for(self, *prefixes: str, timeout_s: float) -> dict[str, str]:
        """Read lines until one starting with each prefix has come; prefix -> the rest of
        that line (stripped). Stops the child if it fails.

        Raises:
            RuntimeError: it exited first, or a line did not come within ``timeout_s`` each.
        """
        found: dict[str, str] = {}
        try:
            while len(found) < len(prefixes):
                try:
                    line = self._lines.get(timeout=timeout_s)
                except queue.Empty:
                    raise RuntimeError(f"no {prefixes} lines in time: {self.output}") from None
                if line is None:
                    raise RuntimeError(f"exited early (code {self.proc.wait()}): {self.output}")
                for prefix in prefixes:
                    if line.startswith(prefix):
                        found[prefix] = line[len(prefix) :].strip()
        except BaseException:
            self.stop()
            raise
        return found

    def stop(self) -> int:
        """SIGTERM by PID, SIGKILL after a bound; the exit code."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        return reap(self.proc, STOP_TIMEOUT_S)


class RunsChild:
    """For the owners of one :class:`CliChild` (field ``child``): ``stop()`` and a ``with``
    block that stops it."""

    child: CliChild

    def stop(self) -> int:
        """Stop it by PID (SIGTERM, SIGKILL after a bound); its exit code."""
        return self.child.stop()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()
