"""The SDK end to end against a real `jet dev` (nats-server + one jet server)."""

from __future__ import annotations

import time
from datetime import UTC, datetime

import anyio
import pytest

from jetsdk import (
    AckPolicy,
    Client,
    Consumer,
    InvalidArgument,
    MessageTooLarge,
    PartitionNotFound,
    Producer,
    StartAt,
    StreamNotFound,
    sync,
)
from jetsdk.codec.error_codes import ErrorCode
from jetsdk.codec.messages import ProduceMessage, ProduceRequest
from jetsdk.partitioner import partition_for_key
from jetserver.testing import wait_until_async
from support.jet_dev import JetDev
from support.names import unique

pytestmark = pytest.mark.anyio


async def test_round_trip_with_keys_and_headers(jet_dev: JetDev) -> None:
    name = unique("rt")
    async with Client(jet_dev.servers) as client:
        await client.create_stream(name, name, partitions=3)
        sent = {}
        async with Producer(client, name, linger=0.002) as producer:
            handles = []
            for i in range(60):
                key = b"key-%d" % (i % 7)
                handle = await producer.send_soon(
                    b"value-%d" % i, key, {"i": str(i), "bin": b"\x00\xff"}
                )
                handles.append((i, key, handle))
            for i, key, handle in handles:
                ack = await handle
                sent[(ack.partition, ack.offset)] = (i, key)
        assert len(sent) == 60
        got = {}
        async with Consumer(client, name) as consumer:
            with anyio.fail_after(20):
                async for msg in consumer:
                    got[(msg.partition, msg.offset)] = msg
                    if len(got) == 60:
                        break
        for where, (i, key) in sent.items():
            msg = got[where]
            assert msg.key == key
            assert msg.value == b"value-%d" % i
            assert msg.headers == (("i", str(i).encode()), ("bin", b"\x00\xff"))
            assert msg.subject == (name if msg.partition == 0 else f"{name}.{msg.partition}")
            assert msg.timestamp > 0
        # per partition, offsets follow send order
        for p in range(3):
            order = [sent[w][0] for w in sorted(w for w in sent if w[0] == p)]
            assert order == sorted(order)


async def test_keyed_messages_land_on_stable_partitions(jet_dev: JetDev) -> None:
    name = unique("keys")
    async with Client(jet_dev.servers) as client:
        await client.create_stream(name, name, partitions=4)
        async with Producer(client, name, linger=0) as producer:
            for key in (b"alice", b"bob", b"carol", b"dave"):
                partitions = {(await producer.send(b"x", key)).partition for _ in range(3)}
                assert partitions == {partition_for_key(key, 4)}


@pytest.mark.parametrize("policy", [AckPolicy.NONE, AckPolicy.LEADER, AckPolicy.ALL])
async def test_each_ack_policy(jet_dev: JetDev, policy: AckPolicy) -> None:
    name = unique("ack")
    async with Client(jet_dev.servers) as client:
        await client.create_stream(name, name)
        async with Producer(client, name, ack=policy, linger=0) as producer:
            acks = [await producer.send(b"m%d" % i) for i in range(3)]
        if policy == AckPolicy.NONE:
            assert [a.offset for a in acks] == [-1, -1, -1]
        else:
            assert [a.offset for a in acks] == [0, 1, 2]
            assert all(a.timestamp > 0 for a in acks)
        async with Consumer(client, name) as consumer:
            got: list[bytes] = []
            with anyio.fail_after(10):
                while len(got) < 3:
                    got += [m.value for m in await consumer.fetch(timeout=5)]
        assert got == [b"m0", b"m1", b"m2"]


async def test_start_positions(jet_dev: JetDev) -> None:
    name = unique("pos")
    async with Client(jet_dev.servers) as client:
        await client.create_stream(name, name)
        # ack ALL: each ack comes after the record is committed (HW past it), so "latest"
        # and "new-only" below see all six records without racing the HW.
        async with Producer(client, name, linger=0, ack=AckPolicy.ALL) as producer:
            for i in range(3):
                await producer.send(b"early-%d" % i)
            await anyio.sleep(0.01)
            middle = datetime.now(UTC)
            await anyio.sleep(0.01)
            for i in range(3):
                await producer.send(b"late-%d" % i)

        async def first(start: object) -> tuple[int, bytes] | None:
            async with Consumer(client, name, start=start) as c:  # type: ignore[arg-type]
                batch = await c.fetch(max_records=1, timeout=0.5)
                return (batch[0].offset, batch[0].value) if batch else None

        assert await first("earliest") == (0, b"early-0")
        assert await first("latest") == (5, b"late-2")
        assert await first(4) == (4, b"late-1")
        assert await first(middle) == (3, b"late-0")
        assert await first(StartAt.timestamp(time.time_ns() + 10**12)) is None
        async with Consumer(client, name, start="new-only") as c:
            assert c.position(0) == 6
            assert await c.fetch(timeout=0.2) == []
            async with Producer(client, name, linger=0) as producer:
                await producer.send(b"new")
            (msg,) = await c.fetch(timeout=10)
            assert (msg.offset, msg.value) == (6, b"new")


async def test_long_poll_wakes_on_produce(jet_dev: JetDev) -> None:
    name = unique("poll")
    async with Client(jet_dev.servers) as client:
        await client.create_stream(name, name)
        async with Consumer(client, name, start="new-only", max_wait=30.0) as consumer:
            received = anyio.Event()
            took: list[float] = []

            async def consume() -> None:
                start = anyio.current_time()
                await consumer.__anext__()
                took.append(anyio.current_time() - start)
                received.set()

            async with anyio.create_task_group() as tg:
                tg.start_soon(consume)

                def started() -> bool:  # the new-only start (the HW) is resolved
                    try:
                        consumer.position(0)
                    except PartitionNotFound:
                        return False
                    return True

                # Sent after the start was resolved, the message is delivered: by waking the
                # parked long poll, or at once if it reaches the server first.
                await wait_until_async(started, 10, "the consumer started", interval_s=0.005)
                async with Producer(client, name, linger=0) as producer:
                    await producer.send(b"wake up")
                with anyio.fail_after(10):
                    await received.wait()
        # answered by the produce, not by the 30 s max_wait
        assert took[0] < 10


async def test_unknown_stream(jet_dev: JetDev) -> None:
    async with Client(jet_dev.servers) as client:
        with pytest.raises(StreamNotFound):
            await client.describe_stream("no-such-stream")
        with pytest.raises(StreamNotFound):
            async with Producer(client, "no-such-stream"):
                pass
        with pytest.raises(StreamNotFound):
            async with Consumer(client, "no-such-stream"):
                pass
        with pytest.raises(StreamNotFound):
            await client.delete_stream("no-such-stream")


async def test_message_too_large(jet_dev: JetDev) -> None:
    name = unique("big")
    async with Client(jet_dev.servers) as client:
        await client.create_stream(name, name)
        limit = client.max_message_bytes
        async with Producer(client, name, linger=0) as producer:
            with pytest.raises(MessageTooLarge) as info:
                await producer.send(b"x" * (limit + 1))
            assert info.value.max_message_bytes == limit
            assert (await producer.send(b"small")).offset == 0
        # the server enforces it too (a client that skipped the check)
        request = ProduceRequest(
            stream=name,
            partition=0,
            ack_policy=AckPolicy.LEADER,
            timeout_ms=5000,
            messages=(ProduceMessage(b"x" * (limit + 1)),),
        )
        try:
            results = await client.produce(request)
        except MessageTooLarge:
            pass  # refused for the whole request: fine too
        else:
            assert results[0].error_code == ErrorCode.MESSAGE_TOO_LARGE


def test_sync_api_end_to_end(jet_dev: JetDev) -> None:
    name = unique("sync")
    with sync.Client(jet_dev.servers) as client:
        info = client.create_stream(name, name, partitions=2)
        assert info.partition_count == 2
        assert name in [s.name for s in client.list_streams()]
        with sync.Producer(client, name, linger=0.001) as producer:
            ack = producer.send(b"first", key=b"k")
            handles = [producer.send_soon(b"n%d" % i) for i in range(20)]
            acks = [h.result(timeout=10) for h in handles]
        assert ack.partition == partition_for_key(b"k", 2)
        assert len({(a.partition, a.offset) for a in acks}) == 20
        with sync.Consumer(client, name, start="earliest") as consumer:
            got = []
            for msg in consumer:
                got.append(msg)
                if len(got) == 21:
                    break
            assert consumer.position(ack.partition) >= 1
            assert consumer.fetch(timeout=0.1) == []
        assert sorted(m.value for m in got) == sorted([b"first"] + [b"n%d" % i for i in range(20)])
        client.delete_stream(name)
        with pytest.raises(StreamNotFound):
            client.describe_stream(name)


async def test_update_stream_max_message_bytes(jet_dev: JetDev) -> None:
    """UpdateStream changes a stream's message limit (issue 39): a producer opened after
    it refuses by the new limit before sending; one opened before a lowering gets the
    server's refusal, typed; None goes back to the server's limit."""
    name = unique("limit")
    async with Client(jet_dev.servers) as client:
        await client.create_stream(name, name, max_message_bytes=1000)
        async with Producer(client, name, linger=0) as before:
            info = await client.update_stream(name, max_message_bytes=2000)
            assert info.config["max_message_bytes"] == 2000
            async with Producer(client, name, linger=0) as after:
                assert (await after.send(b"x" * 1500)).offset == 0
                with pytest.raises(MessageTooLarge) as local:
                    await after.send(b"x" * 2001)
                assert local.value.max_message_bytes == 2000
            await client.update_stream(name, max_message_bytes=500)
            with pytest.raises(MessageTooLarge):  # under its 1000, over the stream's 500
                await before.send(b"x" * 800)
            assert (await before.send(b"x" * 500)).offset == 1
        info = await client.update_stream(name, max_message_bytes=None)
        assert info.config["max_message_bytes"] is None
        async with Producer(client, name, linger=0) as producer:
            assert (await producer.send(b"x" * 100_000)).offset == 2
        with pytest.raises(InvalidArgument) as refused:
            await client.update_stream(name, max_message_bytes=client.max_message_bytes + 1)
        assert refused.value.details == {"field": "max_message_bytes"}
