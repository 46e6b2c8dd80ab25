"""Client routing, metadata and retries against the in-memory fake cluster."""

from __future__ import annotations

import anyio
import pytest

from jetsdk import Client, JetConnectionError, StreamNotFound
from jetsdk.codec.frames import Api
from jetsdk.errors import ClientClosed
from jetsdk.memory import MemoryNetwork
from jetsdk.transport import parse_address

from .fake_jet import FakeCluster
from .helpers import FAST_RETRY, cluster_and_client

pytestmark = pytest.mark.anyio


async def test_admin_round_trip() -> None:
    async with cluster_and_client() as (_cluster, client):
        info = await client.create_stream("orders", "orders", partitions=3)
        assert info.partition_count == 3
        assert [s.name for s in await client.list_streams()] == ["orders"]
        described = await client.describe_stream("orders")
        assert described.partitions[2].hw == 0
        offsets = await client.list_offsets("orders", 1, "latest")
        assert (offsets.offset, offsets.hw, offsets.log_start) == (0, 0, 0)
        await client.delete_stream("orders")
        with pytest.raises(StreamNotFound):
            await client.describe_stream("orders")
        with pytest.raises(StreamNotFound):
            await client.stream_info("orders")


async def test_first_reachable_server_is_used() -> None:
    async with anyio.create_task_group() as tg:
        net = MemoryNetwork(tg)
        cluster = FakeCluster.start(net, 2)
        async with Client(["dead:1", *cluster.addresses], dialer=net.dial) as client:
            assert client.server_info["server_id"] == "s1"
        tg.cancel_scope.cancel()


async def test_no_reachable_server() -> None:
    async with anyio.create_task_group() as tg:
        net = MemoryNetwork(tg)
        with pytest.raises(JetConnectionError) as info:
            async with Client(["a:1", "b:2"], dialer=net.dial):
                pass
        assert "a:1" in str(info.value)
        assert "b:2" in str(info.value)


async def test_partition_requests_go_to_the_leader_and_follow_moves() -> None:
    async with cluster_and_client(servers=2) as (cluster, client):
        cluster.add_stream("s", partitions=2, leader="s2")
        await client.list_offsets("s", 0)
        assert cluster.requests[-1] == ("s2", Api.LIST_OFFSETS)
        cluster.streams["s"].partitions[0].leader = "s1"  # leader moves; cache is stale
        await client.list_offsets("s", 0)
        # s2 answered NOT_LEADER, the client refreshed metadata and retried on s1
        tail = [r for r in cluster.requests if r[1] == Api.LIST_OFFSETS][-2:]
        assert tail == [("s2", Api.LIST_OFFSETS), ("s1", Api.LIST_OFFSETS)]


async def test_reconnects_after_connection_loss() -> None:
    async with anyio.create_task_group() as tg:
        net = MemoryNetwork(tg)
        cluster = FakeCluster.start(net, 1)
        async with Client(cluster.addresses, dialer=net.dial, retry=FAST_RETRY) as client:
            await client.list_streams()
            conn = await client._any_connection()
            await conn.aclose()
            assert [s.name for s in await client.list_streams()] == []
            assert net.dial_count[parse_address("s1:9292")] == 2
        tg.cancel_scope.cancel()


async def test_use_outside_context_is_client_closed() -> None:
    client = Client(["x:1"])
    with pytest.raises(ClientClosed):
        await client.list_streams()
