"""Raft tests: the bridge and the MetadataRaft API are backend-agnostic (asyncio and trio)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest

THREAD_EXIT_WAIT_S = 5.0


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    """Run each async test once per anyio backend (modules may narrow this)."""
    return str(request.param)


@pytest.fixture(autouse=True)
def no_raft_thread_left() -> Iterator[None]:
    """Every test stops the Raft threads it started."""
    yield
    deadline = time.monotonic() + THREAD_EXIT_WAIT_S
    for thread in threading.enumerate():
        if thread.name.startswith("raft-"):
            thread.join(max(0.0, deadline - time.monotonic()))
            assert not thread.is_alive(), f"{thread.name} still running"
