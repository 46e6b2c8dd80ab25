"""``Client.stream_info(refresh=True)`` is complete: each partition's hw, leo, log start,
size and segments as its leader reports them (issue 36: ``hw`` was None)."""

from __future__ import annotations

import uuid

import pytest

from jetsdk import AckPolicy, Client, Producer
from support.jet_dev import JetDev

pytestmark = pytest.mark.anyio


async def test_refresh_fills_every_partition(jet_dev: JetDev) -> None:
    name = f"info-{uuid.uuid4().hex[:8]}"
    async with Client(jet_dev.servers) as client:
        await client.create_stream(name, name, partitions=2)
        async with Producer(client, name) as producer:
            for i in range(5):
                await producer.send(b"v%d" % i, partition=0, ack=AckPolicy.ALL)
            await producer.send(b"one", partition=1, ack=AckPolicy.ALL)
        cached = await client.stream_info(name)
        info = await client.stream_info(name, refresh=True)
    assert [p.partition for p in info.partitions] == [0, 1]
    assert [(p.hw, p.leo, p.log_start) for p in info.partitions] == [(5, 5, 0), (1, 1, 0)]
    assert all(p.size_bytes and p.segments == 1 for p in info.partitions)
    assert [p.leader for p in info.partitions] == [p.leader for p in cached.partitions]
    assert cached.partitions[0].hw is None  # the cached metadata alone has no offsets
