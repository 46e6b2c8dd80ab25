"""A producer keeps each partition's leader connection between sends
(jetsdk.client_metadata.PartitionLeaders): looked up in the client's metadata cache once,
again after the cache's epoch changed (marked stale, as after a NotLeader; metadata
refreshed) or the connection closed. Against a real `jet dev`."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from jetsdk import Client, Producer
from jetsdk.client_metadata import MetadataCache
from support.jet_dev import JetDev
from support.names import unique


@pytest.mark.anyio
async def test_a_leader_is_looked_up_once_then_again_after_a_change(
    jet_dev: JetDev, monkeypatch: pytest.MonkeyPatch
) -> None:
    looked_up: list[int] = []
    real = MetadataCache.leader_connection_now

    def counting(self: MetadataCache, stream: str, partition: int) -> Any:
        looked_up.append(partition)
        return real(self, stream, partition)

    monkeypatch.setattr(MetadataCache, "leader_connection_now", counting)
    name = unique("leaders")
    with anyio.fail_after(60):
        async with Client(jet_dev.servers) as client:
            await client.create_stream(name, name, partitions=2)
            async with Producer(client, name, linger=0) as producer:
                offsets = [(await producer.send(b"v", partition=i % 2)).offset for i in range(10)]
                assert offsets == [i // 2 for i in range(10)]
                first = len(looked_up)
                assert 1 <= first <= 4  # once per partition (again while not connected yet)
                for i in range(6):
                    await producer.send(b"w", partition=i % 2)
                assert len(looked_up) == first  # kept
                client.metadata_cache.mark_stale()  # as after a NotLeader
                for i in range(4):
                    await producer.send(b"x", partition=i % 2)
                again = len(looked_up)
                assert again > first  # looked up again, then kept
                await client.refresh_metadata()
                await producer.send(b"y", partition=0)
                assert len(looked_up) == again + 1
                conn = client.leader_connection_now(name, 0)
                assert conn is not None
                await conn.aclose()  # a connection lost: looked up (and dialed) again
                assert (await producer.send(b"z", partition=0)).offset == 11
                assert len(looked_up) > again + 1
