"""The tests' side of driver.py: a driver process and its events
(:class:`DriverProcess`), and the one ``serve`` driver this package's tests share
(:class:`SharedDriver`).

Only processes these tests started are killed: each driver runs in the process group
``start_new_session`` made for it (the driver, its JVM and the JVM's children), killed
whole.
"""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import orjson

DRIVER = Path(__file__).with_name("driver.py")
EVENT_TIMEOUT_S = 240.0
"""Bound on waiting for one driver event (a cold local-cluster start on a loaded 2-core
machine took up to a minute)."""
STOP_TIMEOUT_S = 60.0
"""Bound on a driver's Spark stop at the end of its stdin (then it is killed)."""
LOG_TAIL_CHARS = 4000


class DriverProcess:
    """A driver.py process: scenarios written to its stdin, JSON events read from its
    stdout; its stderr (Spark's log, tracebacks) and its events go to ``log``."""

    def __init__(self, args: list[str], log: Path) -> None:
        self.log_path = log
        self._log = log.open("w")
        self.proc = subprocess.Popen(
            [sys.executable, str(DRIVER), *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._log,
            text=True,
            start_new_session=True,  # its own process group: the driver and its JVMs
        )
        self.events: queue.Queue[dict[str, Any] | None] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.startswith("{"):
                self._log.write(line)  # with the driver's log lines, for a failure's report
                self._log.flush()
                self.events.put(orjson.loads(line))
        self.events.put(None)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def send(self, scenario: str, **fields: Any) -> None:
        """Start ``scenario`` with ``fields`` (driver.py's ``serve``)."""
        assert self.proc.stdin is not None
        self.proc.stdin.write(orjson.dumps({"do": scenario, **fields}).decode() + "\n")
        self.proc.stdin.flush()

    def _next(self, before: str) -> dict[str, Any]:
        """The next event; the driver's exit or an ``error`` event fails (``before``: what
        the caller waits for, for the message)."""
        got = self.events.get(timeout=EVENT_TIMEOUT_S)
        if got is None:
            raise AssertionError(f"driver exited ({self.proc.wait()}) before {before}")
        if got["event"] == "error":
            raise AssertionError(f"driver failed before {before}: {got}\n{self.log_tail()}")
        return got

    def expect(self, event: str, **fields: Any) -> dict[str, Any]:
        """The next event named ``event`` with ``fields`` (others before it are skipped);
        an ``error`` event fails."""
        while True:
            got = self._next(event)
            if got["event"] == event and all(got.get(k) == v for k, v in fields.items()):
                return got

    def until(self, event: str) -> list[dict[str, Any]]:
        """The events up to and including the next ``event`` (an ``error`` fails)."""
        seen = [self._next(event)]
        while seen[-1]["event"] != event:
            seen.append(self._next(event))
        return seen

    def log_tail(self) -> str:
        return self.log_path.read_text()[-LOG_TAIL_CHARS:]

    def kill(self) -> None:
        """SIGKILL the driver's process group (if the driver still runs) and reap it."""
        if self.alive():
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=30)
        self._log.close()

    def stop(self) -> None:
        """End its stdin (the driver stops Spark and exits); killed if it does not within
        :data:`STOP_TIMEOUT_S`."""
        if self.alive():
            assert self.proc.stdin is not None
            try:
                self.proc.stdin.close()
                self.proc.wait(timeout=STOP_TIMEOUT_S)
            except (OSError, subprocess.TimeoutExpired):
                pass
        self.kill()


class SharedDriver:
    """The ``serve`` driver of this package's tests: started at its first use, shared by
    the tests that leave it running (:meth:`get`), handed over to the one that kills it
    (:meth:`hand_over`; the next use starts another)."""

    def __init__(self, folder: Path) -> None:
        self._folder = folder
        self._driver: DriverProcess | None = None
        self.starts = 0

    def get(self) -> DriverProcess:
        """The running driver, started now if there is none (or it died)."""
        if self._driver is not None and not self._driver.alive():
            self._driver.kill()
            self._driver = None
        if self._driver is None:
            self.starts += 1
            self._driver = DriverProcess(["serve"], self._folder / f"serve-{self.starts}.log")
        return self._driver

    def hand_over(self) -> DriverProcess:
        """The running driver (as :meth:`get`), no longer shared: the caller ends it."""
        driver = self.get()
        self._driver = None
        return driver

    def close(self) -> None:
        if self._driver is not None:
            self._driver.stop()
            self._driver = None
