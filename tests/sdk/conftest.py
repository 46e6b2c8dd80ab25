"""SDK tests run under both anyio backends."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    """Every async SDK test runs once per backend."""
    return str(request.param)


@pytest.fixture
def workers() -> Iterator[list[Any]]:
    """The worker processes a test starts (objects with a ``proc``: a ``subprocess.Popen``);
    those still running at the end are killed, and each is waited for (bounded)."""
    started: list[Any] = []
    yield started
    for w in started:
        if w.proc.poll() is None:
            w.proc.kill()
        w.proc.wait(timeout=30)
