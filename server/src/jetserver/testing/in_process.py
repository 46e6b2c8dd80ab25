"""A jet server in the caller's event loop (asyncio), for tests that look at its internals.

    async with running_server(nats.url, tmp_path / "data") as server:
        server.address                              # "127.0.0.1:PORT"
        server.streams.replica("orders", 0).log     # internals, for assertions

The server stops cleanly when the block exits.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio

from jetserver.config.load import load_config
from jetserver.config.server import ServerConfig
from jetserver.server import Server
from jetserver.testing.jet_process import TEST_RESERVE_BYTES

__all__ = ["in_process_config", "running_server"]


def in_process_config(nats_url: str, data_dir: Path, **settings: Any) -> ServerConfig:
    """A test configuration: port 0, the given NATS and data dir, fast reconnects, a small
    space reserve (``TEST_RESERVE_BYTES``).

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
        ("storage", "disk_reserve_bytes"): TEST_RESERVE_BYTES,
    }
    for name, value in settings.items():
        section, _, key = name.partition("__")
        overrides[(section, key)] = value
    return load_config(None, {}, overrides)


@asynccontextmanager
async def running_server(nats_url: str, data_dir: Path, **settings: Any) -> AsyncIterator[Server]:
    """Start a server in this event loop (asyncio backend); stop it cleanly when the block
    exits. ``settings`` as in :func:`in_process_config`."""
    server = Server(in_process_config(nats_url, data_dir, **settings))
    async with anyio.create_task_group() as tg:
        await tg.start(server.run)
        try:
            yield server
        finally:
            server.request_stop()
