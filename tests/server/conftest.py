"""Server tests run on asyncio only: the server's NATS link (nats-py) is asyncio-only."""

from __future__ import annotations

import pytest


@pytest.fixture
def anyio_backend() -> str:
    """The server needs the asyncio backend."""
    return "asyncio"
