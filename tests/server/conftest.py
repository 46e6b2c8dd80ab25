"""Server tests run on asyncio only: the server's NATS link (nats-py) is asyncio-only.

Fixtures:
- ``jet``: an in-process server (with a fresh nats-server) for one test.
- ``nc``: a plain nats-py client connected to the same nats-server.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import nats
import pytest
from nats.aio.client import Client as NatsClient

from jetserver.server import Server
from support.jet_server import running_server
from support.nats_server import NatsServer


@pytest.fixture
async def jet(nats_server: NatsServer, tmp_path: Path) -> AsyncIterator[Server]:
    """A running server on a fresh nats-server, data in tmp_path/data."""
    async with running_server(nats_server.url, tmp_path / "data") as server:
        yield server


@pytest.fixture
async def nc(nats_server: NatsServer) -> AsyncIterator[NatsClient]:
    """A plain nats-py connection (the "any NATS client" of cross-talk)."""
    client = await nats.connect(nats_server.url, allow_reconnect=False)
    try:
        yield client
    finally:
        await client.close()
