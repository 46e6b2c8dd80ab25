"""Shared helpers for SDK tests against the in-memory fake cluster."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio

from jetsdk import Client, RetryPolicy
from jetsdk.memory import MemoryNetwork

from .fake_jet import FakeCluster

FAST_RETRY = RetryPolicy(attempts=5, backoff=0.001, backoff_max=0.01)


@asynccontextmanager
async def cluster_and_client(servers: int = 1) -> AsyncIterator[tuple[FakeCluster, Client]]:
    """A fake cluster of ``servers`` servers and an entered client connected to it."""
    async with anyio.create_task_group() as tg:
        net = MemoryNetwork(tg)
        cluster = FakeCluster.start(net, servers)
        async with Client(cluster.addresses, dialer=net.dial, retry=FAST_RETRY) as client:
            yield cluster, client
        tg.cancel_scope.cancel()
