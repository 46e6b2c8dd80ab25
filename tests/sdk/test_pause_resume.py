"""``Consumer.pause()``/``resume()`` of partitions (as aiokafka's), against a real `jet dev`."""

from __future__ import annotations

import uuid

import anyio
import pytest

from jetsdk import Client, Consumer, PartitionNotFound, Producer, sync
from jetsdk.group.stream_partition import StreamPartition
from support.jet_dev import JetDev

pytestmark = pytest.mark.anyio


async def _stream_with_two_partitions(client: Client, count: int) -> str:
    name = f"pause-{uuid.uuid4().hex[:8]}"
    await client.create_stream(name, name, partitions=2)
    async with Producer(client, name) as producer:
        for p in (0, 1):
            for i in range(count):
                await producer.send(b"%d-%d" % (p, i), partition=p)
    return name


async def test_a_paused_partition_is_held_until_resumed(jet_dev: JetDev) -> None:
    async with Client(jet_dev.servers) as client:
        name = await _stream_with_two_partitions(client, 10)
        async with Consumer(client, name, start="earliest") as consumer:
            consumer.pause(0)
            assert consumer.paused() == {StreamPartition(name, 0)}
            got: list[tuple[int, int]] = []
            with anyio.fail_after(20):
                while len(got) < 10:
                    got += [(m.partition, m.offset) for m in await consumer.fetch(100, timeout=5)]
            assert got == [(1, i) for i in range(10)]
            # Partition 0's records are fetched and held: none comes while it is paused.
            assert await consumer.fetch(100, timeout=1.0) == []
            assert consumer.position(0) == 0

            consumer.resume(0)
            assert consumer.paused() == set()
            with anyio.fail_after(20):
                again = await consumer.fetch(100, timeout=5)
            assert [(m.partition, m.offset) for m in again] == [(0, i) for i in range(10)]

            with pytest.raises(PartitionNotFound):
                consumer.pause(7)


async def test_pause_in_the_sync_api_holds_its_buffer_too(jet_dev: JetDev) -> None:
    async with Client(jet_dev.servers) as client:
        name = await _stream_with_two_partitions(client, 3)

    def read_sync() -> tuple[tuple[int, int], list[tuple[int, int]], list[tuple[int, int]]]:
        with (
            sync.Client(jet_dev.servers) as sc,
            sync.Consumer(sc, name, start="earliest") as consumer,
        ):
            # Iteration buffers a batch on the calling side: what the pause must hold too.
            first = next(iter(consumer))
            consumer.pause(1)
            seen: list[tuple[int, int]] = [(first.partition, first.offset)]
            for _ in range(10):  # bounded: each waits up to 2 s
                if sum(p == 0 for p, _ in seen) >= 3:
                    break
                seen += [(m.partition, m.offset) for m in consumer.fetch(100, timeout=2)]
            seen += [(m.partition, m.offset) for m in consumer.fetch(100, timeout=0.5)]
            consumer.resume(1)
            after: list[tuple[int, int]] = []
            for _ in range(10):
                if len(seen) + len(after) >= 6:
                    break
                after += [(m.partition, m.offset) for m in consumer.fetch(100, timeout=2)]
            return (first.partition, first.offset), seen, after

    first, seen, after = await anyio.to_thread.run_sync(read_sync)
    while_paused = seen[1:]
    assert [m for m in while_paused if m[0] == 1] == []
    assert sorted(seen + after) == [(0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (1, 2)]
    assert [m for m in after if m[0] == 1] == [m for m in [(1, 0), (1, 1), (1, 2)] if m != first]
