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
