"""The direct send (jetsdk.producer.direct): ``await producer.send(...)`` to an idle
partition with linger 0 is written and awaited in the caller's task, past the
accumulator and the sender task, against a real `jet dev` over a real socket, on asyncio
and trio (``send_soon``'s direct write is asyncio's only: under trio it takes the batching
path, and every test checks the same outcome there).

Order and idempotent sequences must be the batching path's when direct and batched sends
mix, and what is not a clean ack (an error, a cancelled caller) goes on as a queued
message would.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
import pytest

from jetsdk import Client, Consumer, Producer
from jetsdk.codec.error_codes import AckPolicy
from jetsdk.codec.messages import (
    ProduceMessage,
    ProduceRequest,
    encode_produce_request,
    encode_produce_result_tuples,
)
from jetsdk.codec.produce_one import decode_produce_one, encode_produce_one
from jetsdk.errors import JetError, WrongExpectedOffset
from jetsdk.message import Message
from support.jet_dev import JetDev
from support.names import unique


@asynccontextmanager
async def _producer(
    jet_dev: JetDev, prefix: str, **options: object
) -> AsyncIterator[tuple[Client, str, Producer]]:
    """A client, a new one-partition stream, and a producer (linger 0) of it whose first
    message is acked (its connection open, its partition's sender idle)."""
    name = unique(prefix)
    async with Client(jet_dev.servers) as client:
        await client.create_stream(name, name)
        async with Producer(client, name, linger=0, **options) as producer:  # type: ignore[arg-type]
            assert (await producer.send(b"warm")).offset == 0
            yield client, name, producer


async def _stored(client: Client, name: str, count: int) -> list[Message]:
    async with Consumer(client, name, start="earliest") as consumer:
        seen: list[Message] = []
        with anyio.fail_after(30):
            while len(seen) < count:
                seen.extend(await consumer.fetch(max_records=1000))
    return seen


@pytest.mark.anyio
async def test_direct_and_batched_sends_keep_order_and_sequences(
    jet_dev: JetDev, anyio_backend: str
) -> None:
    """One task mixes awaited sends (direct when the partition is idle) with bursts of
    send_soon (queued behind them, batched), idempotent: stored in call order, with the
    producer's sequences 0, 1, 2, ... (a gap or a repeat is refused by the server)."""
    values: list[bytes] = []
    async with _producer(jet_dev, "mix", idempotent=True) as (client, name, producer):
        with anyio.fail_after(60):
            handles = []
            for i in range(60):
                if i % 7 < 4:
                    values.append(b"s%d" % i)
                    ack = await producer.send(values[-1])
                    assert ack.offset == len(values)
                else:
                    values.append(b"q%d" % i)
                    handles.append(await producer.send_soon(values[-1]))
            acks = [await h for h in handles]
            await producer.flush()
        direct = producer._direct.sent
        producer_id = producer.producer_id
        stored = await _stored(client, name, 61)
    assert [a.offset for a in acks] == sorted(a.offset for a in acks)
    assert [m.value for m in stored] == [b"warm", *values]
    assert [m.record.producer_seq for m in stored] == list(range(61))
    assert {m.record.producer_id for m in stored} == {producer_id}
    # Direct: each message after an awaited send (or after "warm"): an awaited send, or
    # (asyncio only) the first send_soon of a burst; not the rest of a burst nor the send
    # after it (queued behind it).
    after_send = [v for p, v in zip([b"s", *values], values) if p[:1] == b"s"]
    awaited = [v for v in after_send if v[:1] == b"s"]
    assert direct == len(awaited if anyio_backend == "trio" else after_send)


@pytest.mark.anyio
async def test_concurrent_direct_and_queued_callers_keep_each_callers_order(
    jet_dev: JetDev, anyio_backend: str
) -> None:
    """A task sending and awaiting each message, beside a task pipelining with send_soon,
    to the same partition: each task's messages are stored in its order, each once."""
    async with _producer(jet_dev, "conc", idempotent=True) as (client, name, producer):

        async def awaited() -> None:
            for i in range(100):
                await producer.send(b"a%d" % i)

        async def pipelined() -> None:
            handles = [await producer.send_soon(b"p%d" % i) for i in range(100)]
            for h in handles:
                await h

        with anyio.fail_after(60):
            async with anyio.create_task_group() as tg:
                tg.start_soon(awaited)
                tg.start_soon(pipelined)
        stored = [m.value for m in await _stored(client, name, 201)]
    assert len(stored) == 201
    assert [v for v in stored if v[:1] == b"a"] == [b"a%d" % i for i in range(100)]
    assert [v for v in stored if v[:1] == b"p"] == [b"p%d" % i for i in range(100)]


@pytest.mark.anyio
async def test_a_cancelled_direct_send_is_still_delivered_once(
    jet_dev: JetDev, anyio_backend: str
) -> None:
    """Cancelled while it waits for its answer, the message goes on (the sender task sees
    it through), and the next send is stored after it."""
    async with _producer(jet_dev, "cancel", idempotent=True) as (client, name, producer):
        sent_before = producer._direct.sent
        with anyio.CancelScope() as scope:
            scope.cancel()  # the send writes, then its first wait is cancelled
            await producer.send(b"cancelled")
        with anyio.fail_after(30):
            await producer.flush()
            assert producer.pending == 0
            assert (await producer.send(b"next")).offset == 2
        direct = producer._direct.sent - sent_before
        stored = [m.value for m in await _stored(client, name, 3)]
    assert stored == [b"warm", b"cancelled", b"next"]
    assert direct == 2


@pytest.mark.anyio
async def test_a_direct_send_answered_with_an_error_fails_as_a_queued_one(
    jet_dev: JetDev, anyio_backend: str
) -> None:
    """The stream is deleted (by another client: the producer's metadata still names it)
    under an idle producer: the direct send's error answer goes to the sender task, which
    fails the message with the server's error, and the producer still closes cleanly."""
    async with _producer(jet_dev, "err") as (_client, name, producer):
        async with Client(jet_dev.servers) as other:
            await other.delete_stream(name)
        sent_before = producer._direct.sent
        with anyio.fail_after(60), pytest.raises(JetError):
            await producer.send(b"gone")
        assert producer.pending == 0
        # send_soon's handle, settled from the answer's callback, fails the same way.
        handle = await producer.send_soon(b"gone too")
        with anyio.fail_after(60), pytest.raises(JetError):
            await handle
        assert producer.pending == 0
        direct = producer._direct.sent - sent_before
    assert direct == (1 if anyio_backend == "trio" else 2)  # (send_soon: asyncio's)


@pytest.mark.anyio
async def test_keyed_and_refused_messages_go_direct_and_settle_as_queued_ones(
    jet_dev: JetDev, anyio_backend: str
) -> None:
    """A message with a key and headers is sent directly too (its request encoded whole);
    one the server refuses (a wrong expected offset) fails with that error through the
    sender task, and the partition goes on in order."""
    async with _producer(jet_dev, "keyed", idempotent=True) as (client, name, producer):
        sent_before = producer._direct.sent
        with anyio.fail_after(60):
            ack = await producer.send(b"k1", key=b"k", headers={"h": "1"})
            assert ack.offset == 1
            with pytest.raises(WrongExpectedOffset):
                await producer.send(b"no", expected_offset=7)
            assert (await producer.send(b"k2", key=b"k")).offset == 2
        direct = producer._direct.sent - sent_before
        stored = await _stored(client, name, 3)
    assert [(m.value, m.key) for m in stored] == [(b"warm", None), (b"k1", b"k"), (b"k2", b"k")]
    assert stored[1].header("h") == b"1"
    assert direct == 3


@pytest.mark.parametrize("producer_id", [None, 7])
@pytest.mark.parametrize("value", [b"", b"x" * 100])
def test_encode_produce_one_is_the_one_message_request(
    producer_id: int | None, value: bytes
) -> None:
    message = ProduceMessage(value)
    request = ProduceRequest("s", 3, AckPolicy.ALL, 30000, (message,), producer_id, 9)
    body = encode_produce_one("s", 3, AckPolicy.ALL, 30000, message, producer_id, 9)
    assert body == encode_produce_request(request)


def test_encode_produce_one_leaves_other_messages_to_the_request() -> None:
    for message in (
        ProduceMessage(b"v", key=b"k"),
        ProduceMessage(b"v", headers=(("h", b"1"),)),
        ProduceMessage(b"v", subject="a.b"),
        ProduceMessage(b"v" * (64 * 1024)),
    ):
        assert encode_produce_one("s", 0, AckPolicy.LEADER, 1, message, None, 0) is None


def test_decode_produce_one_reads_one_result_only() -> None:
    assert decode_produce_one(encode_produce_result_tuples([(0, 5, 6)])) == (0, 5, 6)
    assert decode_produce_one(encode_produce_result_tuples([(3, -1, -1)])) == (3, -1, -1)
    assert decode_produce_one(encode_produce_result_tuples([(0, 1, 1), (0, 2, 2)])) is None
    assert decode_produce_one(encode_produce_result_tuples([])) is None
