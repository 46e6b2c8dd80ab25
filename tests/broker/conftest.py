"""Fixtures of the broker tests that run a partition replica over a real NATS link."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from jetserver.natslink.link import NatsLink
from jetserver.testing import in_process_config
from support.nats_server import NatsServer


@pytest.fixture
async def link(nats_server: NatsServer) -> AsyncIterator[NatsLink]:
    """A NATS link of this server, connected to ``nats_server``; closed after the test."""
    link = NatsLink(in_process_config(nats_server.url, Path("/nonexistent")).nats)
    await link.connect()
    try:
        yield link
    finally:
        await link.close()
