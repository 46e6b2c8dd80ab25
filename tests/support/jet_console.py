"""Run `jet console --port 0` as a subprocess and learn its URL.

    with JetConsole.start(dev, "--allow-writes") as console:
        console.url     # "http://127.0.0.1:PORT/"
        console.get("/api/cluster")

Stopped by PID (SIGTERM, then SIGKILL after a bound).
"""

from __future__ import annotations

import http.client
import queue
import signal
import subprocess
import sys
import threading
from types import TracebackType
from typing import Any
from urllib.parse import urlsplit

import attrs
import orjson

from support.jet_cli import jet_env
from support.jet_dev import JetDev

READY_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 10.0
HTTP_TIMEOUT_S = 30.0


@attrs.define(eq=False)
class JetConsole:
    """A running `jet console`."""

    url: str
    proc: subprocess.Popen[str]

    @classmethod
    def start(cls, dev: JetDev | list[str], *args: str) -> JetConsole:
        """Start it against ``dev`` (or these server addresses) and wait for its
        ``console: URL`` line."""
        env = (
            jet_env(dev)
            if isinstance(dev, JetDev)
            else jet_env(None) | {"JET_SERVERS": ",".join(dev)}
        )
        proc = subprocess.Popen(
            [sys.executable, "-m", "jetserver.cli.main", "console", "--port", "0", *args],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=env,
        )
        lines: queue.Queue[str | None] = queue.Queue()

        def reader() -> None:
            assert proc.stdout is not None
            for line in proc.stdout:
                lines.put(line.rstrip("\n"))
            lines.put(None)

        threading.Thread(target=reader, name="jet-console-stdout", daemon=True).start()
        seen = []
        while True:
            try:
                line = lines.get(timeout=READY_TIMEOUT_S)
            except queue.Empty:
                _stop(proc)
                raise RuntimeError(f"jet console printed no URL in time: {seen}") from None
            if line is None:
                raise RuntimeError(f"jet console exited ({proc.wait()}): {seen}")
            seen.append(line)
            if line.startswith("console: "):
                return cls(line[len("console: ") :].strip(), proc)

    def request(
        self, method: str, path: str, body: Any = None, headers: dict[str, str] | None = None
    ) -> tuple[int, Any, dict[str, str]]:
        """(status, parsed JSON or text, headers)."""
        parts = urlsplit(self.url)
        conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=HTTP_TIMEOUT_S)
        try:
            data = body if body is None or isinstance(body, bytes) else orjson.dumps(body)
            conn.request(method, path, body=data, headers=headers or {})
            res = conn.getresponse()
            raw = res.read()
            hdrs = {k.lower(): v for k, v in res.getheaders()}
        finally:
            conn.close()
        if hdrs.get("content-type", "").startswith("application/json"):
            return res.status, orjson.loads(raw), hdrs
        return res.status, raw.decode("utf-8", "replace"), hdrs

    def get(self, path: str) -> Any:
        """GET a JSON endpoint that must answer 200."""
        status, body, _ = self.request("GET", path)
        assert status == 200, (path, status, body)
        return body

    def stop(self) -> int:
        """Stop it by PID."""
        return _stop(self.proc)

    def __enter__(self) -> JetConsole:
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
