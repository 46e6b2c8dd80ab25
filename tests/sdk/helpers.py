"""Shared helpers for SDK tests: the in-memory fake cluster, racing table writers."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import anyio

from jetsdk import Client, RetryPolicy, Table
from jetsdk.memory import MemoryNetwork

from .fake_jet import FakeCluster

FAST_RETRY = RetryPolicy(attempts=5, backoff=0.001, backoff_max=0.01)
RACE_BOUND_S = 120.0
"""Bound on the racing writers of :func:`lost_increments`."""


@asynccontextmanager
async def cluster_and_client(
    servers: int = 1, *, produce_many: bool = False
) -> AsyncIterator[tuple[FakeCluster, Client]]:
    """A fake cluster of ``servers`` servers and an entered client connected to it
    (``produce_many``: the servers serve ProduceMany and say so in Hello)."""
    async with anyio.create_task_group() as tg:
        net = MemoryNetwork(tg)
        cluster = FakeCluster.start(net, servers)
        cluster.produce_many = produce_many
        async with Client(cluster.addresses, dialer=net.dial, retry=FAST_RETRY) as client:
            yield cluster, client
        tg.cancel_scope.cancel()


async def lost_increments(
    admin: Client,
    stream: str,
    writer: Callable[[], Awaitable[None]],
    writers: int,
    increments: int,
) -> int:
    """Run ``writers`` ``writer`` tasks at once, each adding ``increments`` to key ``n`` of
    table ``stream``; the increments the counter lacks after them (read through ``admin``)."""
    with anyio.fail_after(RACE_BOUND_S):
        async with anyio.create_task_group() as tg:
            for _ in range(writers):
                tg.start_soon(writer)
    async with Table(admin, stream) as table:
        return writers * increments - int(table.get(b"n") or b"0")
