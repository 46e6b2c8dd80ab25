"""A fixed send rate for the latency benchmarks."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator

import anyio


async def paced(total: int, rate: float) -> AsyncIterator[int]:
    """Yield ``0 .. total - 1``, each at its time on a ``rate``-per-second schedule (late
    ones at once: the schedule does not slip)."""
    start = time.perf_counter()
    for i in range(total):
        delay = start + i / rate - time.perf_counter()
        if delay > 0:
            await anyio.sleep(delay)
        yield i
