"""`jet console --allow-writes` on a server with auth: the console's own credentials need
the admin grant for writes (the servers refuse otherwise: 403), reads work with a fetch
grant, and the token comes from the same options as every client command."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

from jetsdk import Client
from security.auth_kit import auth_settings, tokens_for, wait_bootstrap
from support.jet_console import JetConsole
from support.jet_server import running_server
from support.nats_server import NatsServer

pytestmark = pytest.mark.anyio

TOKENS = tokens_for("ops", "viewer")
SETTINGS = auth_settings(TOKENS, ("ops:admin:*", "viewer:fetch:*"))
WRITE = {"X-Jet-Console": "1"}


async def _call(console: JetConsole, *args: Any) -> tuple[int, Any, dict[str, str]]:
    return await anyio.to_thread.run_sync(console.request, *args)


async def test_writes_need_the_admin_grant(nats_server: NatsServer, tmp_path: Path) -> None:
    async with running_server(nats_server.url, tmp_path / "data", **SETTINGS) as jet:
        async with Client(jet.address, token=TOKENS["ops"]) as ops:
            await wait_bootstrap(ops, "viewer")
            await ops.create_stream("seen", "seen")
        viewer = await anyio.to_thread.run_sync(
            JetConsole.start, [jet.address], "--token", TOKENS["viewer"], "--allow-writes"
        )
        try:
            status, body, _ = await _call(viewer, "POST", "/api/streams", {"name": "x"}, WRITE)
            assert status == 403, body
            assert "refused" in body["error"]
            status, body, _ = await _call(viewer, "DELETE", "/api/streams/seen", None, WRITE)
            assert status == 403, body
        finally:
            await anyio.to_thread.run_sync(viewer.stop)
        admin = await anyio.to_thread.run_sync(
            JetConsole.start, [jet.address], "--token", TOKENS["ops"], "--allow-writes"
        )
        try:
            status, body, _ = await _call(admin, "POST", "/api/streams", {"name": "x"}, WRITE)
            assert status == 201, body
            status, body, _ = await _call(admin, "GET", "/api/cluster")
            assert status == 200, body
            assert body["servers"][0]["up"] is True
        finally:
            await anyio.to_thread.run_sync(admin.stop)
