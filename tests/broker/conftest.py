"""Fixtures shared by the broker tests: a NATS link of this server, the collector's state."""

from __future__ import annotations

import gc
from collections.abc import AsyncIterator, Iterator
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


@pytest.fixture
def collector() -> Iterator[None]:
    """The collector on, nothing frozen, before and after (a burst freezes what exists)."""
    was = gc.isenabled()
    gc.enable()
    gc.unfreeze()
    yield
    gc.unfreeze()
    if not was:
        gc.disable()
