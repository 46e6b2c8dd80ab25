"""Broker tests that need a running server use the asyncio backend (the NATS link)."""

from __future__ import annotations

import pytest


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"
