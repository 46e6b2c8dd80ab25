"""A producer's default ``max_pending`` grows with its stream's partitions.

A partition's batch holds what was queued for it while its previous request was in
flight, so a fixed bound of 10,000 messages left a stream of 500 partitions about 8
messages per batch (keyed produce: 0.4x the throughput of one partition). By default the
bound is 100 messages per partition, at least 10,000 and at most 100,000; a value given
is kept."""

from __future__ import annotations

import pytest

from jetsdk import Client, Producer
from jetsdk.producer.producer import (
    DEFAULT_MAX_PENDING,
    MAX_DEFAULT_PENDING,
    default_max_pending,
)
from support.jet_dev import JetDev
from support.names import unique

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize(
    ("partitions", "pending"),
    [(1, 10_000), (100, 10_000), (101, 10_100), (500, 50_000), (1000, 100_000), (50_000, 100_000)],
)
def test_the_default_grows_with_the_partitions_within_bounds(partitions: int, pending: int) -> None:
    assert default_max_pending(partitions) == pending
    assert DEFAULT_MAX_PENDING <= pending <= MAX_DEFAULT_PENDING


async def test_a_producer_takes_its_streams_default_once_entered(
    jet_dev: JetDev, anyio_backend: str
) -> None:
    wide, one = unique("wide"), unique("one")
    async with Client(jet_dev.servers) as client:
        await client.create_stream(wide, wide, partitions=200)
        await client.create_stream(one, one)
        async with Producer(client, wide) as producer:
            assert producer.max_pending == 20_000
            assert producer._sender.max_pending == 20_000  # what its backpressure waits on
            for i in range(100):
                await producer.send_soon(b"v", key=b"k%d" % i)
            await producer.flush()
            assert producer.pending == 0
        async with Producer(client, one) as producer:
            assert producer.max_pending == DEFAULT_MAX_PENDING
        async with Producer(client, wide, max_pending=500) as producer:
            assert producer.max_pending == 500
