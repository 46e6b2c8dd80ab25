"""A keyed producer sending to many partitions led by one server sends few requests: the
batches of one event-loop turn go as one ProduceMany (Kafka's drain per node), against a
real `jet dev`. Order per partition and every ack are as with a request per partition; a
server whose Hello does not list ProduceMany gets one Produce request per batch."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Sequence

import anyio
import pytest

from jetsdk import Client, Consumer, Producer
from jetsdk.codec.frames import Api
from jetsdk.connection import Connection
from jetsdk.producer.fan_in import serves_produce_many
from jetsdk.transport import SocketByteStream
from support.jet_dev import JetDev
from support.names import unique

pytestmark = pytest.mark.anyio

PARTITIONS = 64
MESSAGES = 2000


def _requests_sent(conn: Connection) -> int:
    """Correlation ids handed out on ``conn`` so far: one per request."""
    return int(conn._next_id)


async def _send_keyed(client: Client, name: str) -> tuple[int, list[tuple[int, int, int]]]:
    """Send MESSAGES keyed messages (keys spread over every partition); the requests the
    leader's connection carried, and each message's (index, partition, offset)."""
    async with Producer(client, name, linger=0) as producer:
        await producer.send(b"warm", key=b"warm")
        conn = await client.leader_connection(name, 0)
        before = _requests_sent(conn)
        handles = [
            await producer.send_soon(b"v%d" % i, key=b"key-%d" % (i % 500)) for i in range(MESSAGES)
        ]
        await producer.flush()
        acks = [(i, (a := h.result()).partition, a.offset) for i, h in enumerate(handles)]
        return _requests_sent(conn) - before, acks


def _check_order(acks: list[tuple[int, int, int]]) -> None:
    """Per partition, offsets grow in send order with no gap or repeat."""
    by_partition: dict[int, list[int]] = {}
    for _i, partition, offset in acks:
        by_partition.setdefault(partition, []).append(offset)
    assert len(by_partition) == PARTITIONS
    for offsets in by_partition.values():
        assert offsets == list(range(offsets[0], offsets[0] + len(offsets)))


@pytest.fixture
async def fan(jet_dev: JetDev) -> AsyncIterator[tuple[Client, str]]:
    """A client and a new stream of PARTITIONS partitions (all led by the one server)."""
    name = unique("fan")
    async with Client(jet_dev.servers) as client:
        await client.create_stream(name, name, partitions=PARTITIONS)
        yield client, name


async def test_a_keyed_send_to_many_partitions_uses_few_requests(
    fan: tuple[Client, str], anyio_backend: str
) -> None:
    client, name = fan
    requests, acks = await _send_keyed(client, name)
    conn = await client.leader_connection(name, 0)
    assert Api.PRODUCE_MANY in conn.server_info["apis"]  # type: ignore[operator]
    _check_order(acks)
    if anyio_backend == "asyncio":
        # Every partition's first batch alone would be PARTITIONS requests.
        assert requests < PARTITIONS // 2, requests
    else:  # ProduceMany is for asyncio: elsewhere a request per batch, as before
        assert requests >= PARTITIONS


async def test_a_server_without_produce_many_gets_a_request_per_batch(
    fan: tuple[Client, str], anyio_backend: str
) -> None:
    client, name = fan
    conn = await client.leader_connection(name, 0)
    del conn.server_info["apis"]  # as an older server's Hello answer
    assert not serves_produce_many(conn)
    requests, acks = await _send_keyed(client, name)
    _check_order(acks)
    assert requests >= PARTITIONS


async def test_large_values_go_to_the_socket_as_they_are(
    jet_dev: JetDev, anyio_backend: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Issue 39: each 1 MiB value was joined into its request body before the send (a
    # fresh buffer and a copy per value); now the value object itself is among the
    # buffers of the gathered send (or, where the socket took part of it, a view of it),
    # alone or in a ProduceMany of several partitions' batches, and is stored as sent.
    if anyio_backend != "asyncio":
        pytest.skip("the gathered send is the asyncio socket stream's")
    seen: set[int] = set()
    real_gathered = SocketByteStream.write_gathered_now
    real_write = SocketByteStream.write

    def _note(data: bytes | memoryview) -> None:
        seen.add(id(data.obj if isinstance(data, memoryview) else data))

    def gathered(self: SocketByteStream, buffers: Sequence[bytes | memoryview]) -> int:
        for data in buffers:
            _note(data)
        return real_gathered(self, buffers)

    async def write(self: SocketByteStream, data: bytes | memoryview) -> None:
        _note(data)
        await real_write(self, data)

    monkeypatch.setattr(SocketByteStream, "write_gathered_now", gathered)
    monkeypatch.setattr(SocketByteStream, "write", write)
    name = unique("big")
    values = [os.urandom((1 << 20) - 64 * i) for i in range(12)]
    async with Client(jet_dev.servers) as client:
        await client.create_stream(name, name, partitions=3, max_message_bytes=1 << 20)
        async with Producer(client, name, linger=0) as producer:
            handles = [
                await producer.send_soon(value, partition=i % 3) for i, value in enumerate(values)
            ]
            await producer.flush()
        acks = [h.result() for h in handles]
        assert all(id(value) in seen for value in values)
        stored: dict[tuple[int, int], bytes] = {}
        async with Consumer(client, name, start="earliest", auto_commit=None) as consumer:
            with anyio.fail_after(30):
                while len(stored) < len(values):
                    for record in await consumer.fetch(timeout=5):
                        stored[(record.partition, record.offset)] = record.value
    assert [stored[(a.partition, a.offset)] for a in acks] == values
