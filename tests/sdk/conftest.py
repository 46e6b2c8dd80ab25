"""SDK tests run under both anyio backends."""

from __future__ import annotations

import pytest


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    """Every async SDK test runs once per backend."""
    return str(request.param)
