"""``Client.stream_info(refresh=True)`` is complete: each partition's hw, leo, log start,
size and segments as its leader reports them (issue 36: ``hw`` was None)."""

from __future__ import annotations

import uuid
from pathlib import Path

import anyio
import pytest

from jetsdk import AckPolicy, Client, Producer, StreamInfo
from jetserver.testing import Cluster
from support.jet_dev import JetDev


@pytest.mark.anyio
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


def test_in_a_cluster_each_leader_is_asked(tmp_path: Path) -> None:
    # Three one-replica partitions, one per server: any one server describes one of them.
    with Cluster(size=3, root=tmp_path) as cluster:

        async def setup() -> StreamInfo:
            async with Client(cluster.addresses) as client:
                await client.create_stream("spread", partitions=3, replication_factor=1)
                async with Producer(client, "spread", ack=AckPolicy.ALL) as producer:
                    for p in range(3):
                        for i in range(p + 1):
                            await producer.send(b"%d" % i, partition=p)
                return await client.stream_info("spread", refresh=True)

        info = anyio.run(setup)
        assert len({p.leader for p in info.partitions}) == 3
        assert [(p.hw, p.leo) for p in info.partitions] == [(1, 1), (2, 2), (3, 3)]

        dead = info.partitions[0].leader
        assert dead is not None
        cluster.kill(dead)

        async def after_kill() -> StreamInfo:
            live = [s.address for s in cluster.live()]
            async with Client(live) as client:
                with anyio.fail_after(30):
                    return await client.stream_info("spread", refresh=True)

        after = anyio.run(after_kill)
    # The killed leader's partition has no offsets; the others still do.
    assert [p.hw for p in after.partitions] == [None, 2, 3]
