"""Run `jet console --port 0` as a subprocess and learn its URL.

    with JetConsole.start(dev, "--allow-writes") as console:
        console.url     # "http://127.0.0.1:PORT/"
        console.get("/api/cluster")

Stopped by PID (SIGTERM, then SIGKILL after a bound).
"""

from __future__ import annotations

import http.client
from typing import Any
from urllib.parse import urlsplit

import attrs
import orjson

from support.cli_child import CliChild, RunsChild
from support.jet_cli import jet_env
from support.jet_dev import JetDev

READY_TIMEOUT_S = 30.0
HTTP_TIMEOUT_S = 30.0


@attrs.define(eq=False)
class JetConsole(RunsChild):
    """A running `jet console`."""

    url: str
    child: CliChild

    @classmethod
    def start(cls, dev: JetDev | list[str], *args: str) -> JetConsole:
        """Start it against ``dev`` (or these server addresses) and wait for its
        ``console: URL`` line."""
        env = (
            jet_env(dev)
            if isinstance(dev, JetDev)
            else jet_env(None) | {"JET_SERVERS": ",".join(dev)}
        )
        child = CliChild.spawn(["console", "--port", "0", *args], env=env)
        found = child.wait_for("console: ", timeout_s=READY_TIMEOUT_S)
        return cls(found["console: "], child)

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
