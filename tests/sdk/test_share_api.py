"""ShareConsumer's outcome API against a real `jet dev`: nack with a delay and with backoff,
in_progress past the ack deadline, reject to the dead-letter stream, and the sync API."""

from __future__ import annotations

import itertools
import time
import uuid

import anyio
import pytest

from jetsdk import Client, Producer, ShareConsumer, sync
from jetsdk.codec.record import iter_records
from support.jet_dev import JetDev

pytestmark = pytest.mark.anyio
_names = itertools.count()


def unique(prefix: str) -> str:
    return f"{prefix}-{next(_names)}-{uuid.uuid4().hex[:6]}"


async def fill(client: Client, stream: str, count: int) -> None:
    await client.create_stream(stream, stream)
    async with Producer(client, stream) as producer:
        for i in range(count):
            await producer.send_soon(b"v%d" % i, headers={"i": str(i)})


async def test_nack_delay_and_backoff(jet_dev: JetDev) -> None:
    stream, group = unique("nk"), unique("g")
    async with Client(jet_dev.servers) as client:
        await fill(client, stream, 1)
        async with ShareConsumer(client, stream, group, ack_deadline=5, batch=1) as consumer:
            seen: list[tuple[int, float]] = []
            with anyio.fail_after(30):
                async for msg in consumer:
                    seen.append((msg.delivery_count, time.monotonic()))
                    if msg.delivery_count == 1:
                        await msg.nack(delay=0.3)
                    elif msg.delivery_count == 2:
                        await msg.nack(delay=0.2, backoff=True)  # 0.2 * 2 ** 1
                    else:
                        await msg.ack()
                        break
            await consumer.flush()
    assert [c for c, _ in seen] == [1, 2, 3]
    assert seen[1][1] - seen[0][1] >= 0.3 - 0.05
    assert seen[2][1] - seen[1][1] >= 0.4 - 0.05


async def test_in_progress_keeps_the_message_past_the_deadline(jet_dev: JetDev) -> None:
    stream, group = unique("ip"), unique("g")
    async with Client(jet_dev.servers) as client:
        await fill(client, stream, 1)
        async with ShareConsumer(client, stream, group, ack_deadline=1.0, batch=1) as first:
            msg = await first.next(timeout=30)
            assert msg is not None
            async with ShareConsumer(client, stream, group, ack_deadline=1.0) as second:
                for _ in range(5):  # 2 s of work, twice the deadline, extended every 0.4 s
                    await msg.in_progress()
                    assert await second.next(timeout=0.4) is None
                await msg.ack()
                await first.flush()
                assert await second.next(timeout=1.5) is None  # acked: never delivered again
        assert msg.delivery_count == 1


async def test_reject_goes_to_the_dead_letter_stream(jet_dev: JetDev) -> None:
    stream, group, dlq = unique("rj"), unique("g"), unique("dlq")
    async with Client(jet_dev.servers) as client:
        await fill(client, stream, 3)
        async with ShareConsumer(client, stream, group, dead_letter_stream=dlq) as consumer:
            for _ in range(3):
                msg = await consumer.next(timeout=30)
                assert msg is not None
                await (msg.reject() if msg.offset == 1 else msg.ack())
            with anyio.fail_after(30):
                while consumer.member.view.partition(stream, 0).dead_total < 1:
                    await consumer.flush()
                    await anyio.sleep(0.05)
        _, raw = await client.fetch(dlq, 0, 0, max_bytes=1 << 20, max_wait=0.0)
    (letter,) = list(iter_records(raw))
    headers = dict(letter.headers)
    assert letter.value == b"v1"
    assert headers["i"] == b"1"
    assert headers["Jet-Share-Offset"] == b"1"
    assert headers["Jet-Share-Reason"] == b"rejected"
    assert headers["Jet-Share-Delivery-Count"] == b"1"


def test_sync_share_consumer(jet_dev: JetDev) -> None:
    stream, group = unique("sy"), unique("g")
    with sync.Client(jet_dev.servers) as client:
        client.create_stream(stream, stream)
        with sync.Producer(client, stream) as producer:
            for i in range(20):
                producer.send_soon(b"%d" % i)
            producer.flush()
        got = []
        with sync.ShareConsumer(client, stream, group) as consumer:
            for msg in consumer:
                got.append(msg.offset)
                msg.ack()
                if len(got) == 20:
                    break
            consumer.flush()
            assert consumer.member.view.partition(stream, 0).acked_total == 20
    assert sorted(got) == list(range(20))
