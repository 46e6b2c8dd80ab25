"""Fixtures shared by the broker tests."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest


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
