"""``send(msg_id=..., expected_offset=..., timestamp=...)`` (issue 36 item 6), against a
real `jet dev`, async and sync.

Before, the SDK had none of these arguments, and the headers they write were stored as
plain headers: ``headers={"Jet-Expected-Offset": "999"}`` was stored at the next offset
anyway, and two sends with ``Nats-Msg-Id: abc`` were both stored.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import anyio
import pytest

from jetsdk import Client, Consumer, Producer, sync
from jetsdk.errors import InvalidArgument, WrongExpectedOffset
from jetsdk.message import Message
from support.jet_dev import JetDev
from support.names import unique

pytestmark = pytest.mark.anyio


async def _stored(client: Client, stream: str, count: int) -> list[Message]:
    got: list[Message] = []
    async with Consumer(client, stream, start="earliest") as consumer:
        with anyio.fail_after(10):
            async for msg in consumer:
                got.append(msg)
                if len(got) == count:
                    break
    return got


async def test_expected_offset_header_and_argument(jet_dev: JetDev) -> None:
    name = unique("eo")
    async with Client(jet_dev.servers) as client:
        await client.create_stream(name, name)
        async with Producer(client, name) as producer:
            assert (await producer.send(b"a")).offset == 0
            with pytest.raises(WrongExpectedOffset):
                await producer.send(b"no", headers={"Jet-Expected-Offset": "999"})
            with pytest.raises(WrongExpectedOffset) as info:
                await producer.send(b"no", expected_offset=0)
            assert info.value.details["partition"] == 0
            assert (await producer.send(b"b", expected_offset=1)).offset == 1
            assert (await producer.send(b"c", headers={"jet-expected-offset": "2"})).offset == 2
            # Pipelined: the expected offsets of one batch count the messages before.
            handles = [
                await producer.send_soon(b"p%d" % i, expected_offset=3 + i) for i in range(5)
            ]
            assert [(await h).offset for h in handles] == [3, 4, 5, 6, 7]
            assert producer.retries == 0
        stored = await _stored(client, name, 8)
    assert [m.value for m in stored] == [b"a", b"b", b"c", b"p0", b"p1", b"p2", b"p3", b"p4"]
    assert all(m.header("Jet-Expected-Offset") is None for m in stored)


async def test_msg_id_deduplicates(jet_dev: JetDev) -> None:
    name = unique("id")
    async with Client(jet_dev.servers) as client:
        await client.create_stream(name, name)
        async with Producer(client, name) as producer:
            first = await producer.send(b"one", msg_id="abc")
            again = await producer.send(b"one again", msg_id="abc")
            by_header = await producer.send(b"header", headers={"Nats-Msg-Id": "abc"})
            other = await producer.send(b"two", msg_id=b"def")
        assert (first.offset, first.timestamp) == (0, again.timestamp)
        assert again.offset == by_header.offset == 0
        assert other.offset == 1
        stored = await _stored(client, name, 2)
    assert [(m.value, m.header("Nats-Msg-Id")) for m in stored] == [
        (b"one", b"abc"),
        (b"two", b"def"),
    ]


async def test_producer_timestamp(jet_dev: JetDev) -> None:
    name = unique("ts")
    when = datetime(2020, 5, 17, 12, 0, 0, 123456, tzinfo=timezone(timedelta(hours=2)))
    when_ns = 1589709600123456000
    async with Client(jet_dev.servers) as client:
        await client.create_stream(name, name)
        async with Producer(client, name) as producer:
            a = await producer.send(b"dt", timestamp=when)
            await producer.send(b"ns", timestamp=-5)
            await producer.send(b"none")
        stored = await _stored(client, name, 3)
    assert [m.producer_timestamp for m in stored] == [when_ns, -5, None]
    assert stored[0].timestamp == a.timestamp > when_ns  # the record's time is the server's
    assert datetime.fromtimestamp(when_ns / 1e9, tz=UTC) == when


BAD: list[tuple[dict[str, Any], type[Exception]]] = [
    ({"msg_id": ""}, InvalidArgument),
    ({"msg_id": b"x" * 1025}, InvalidArgument),
    ({"msg_id": 5}, TypeError),
    ({"expected_offset": -1}, InvalidArgument),
    ({"expected_offset": 2**63}, InvalidArgument),
    ({"expected_offset": "3"}, TypeError),
    ({"expected_offset": True}, TypeError),
    ({"timestamp": datetime(2020, 1, 1)}, InvalidArgument),  # naive: which zone?
    ({"timestamp": 2**63}, InvalidArgument),
    ({"timestamp": 1.5}, TypeError),
    ({"msg_id": "a", "headers": {"nats-msg-id": "b"}}, InvalidArgument),
    ({"expected_offset": 1, "headers": {"Jet-Expected-Offset": "1"}}, InvalidArgument),
    ({"timestamp": 1, "headers": {"Jet-Timestamp": "1"}}, InvalidArgument),
]


async def test_bad_arguments_fail_at_the_call(jet_dev: JetDev) -> None:
    name = unique("bad")
    async with Client(jet_dev.servers) as client:
        await client.create_stream(name, name)
        async with Producer(client, name) as producer:
            for kwargs, error in BAD:
                with pytest.raises(error):
                    await producer.send_soon(b"v", **kwargs)
            assert (await producer.send(b"ok")).offset == 0


def test_sync_send_with_controls(jet_dev: JetDev) -> None:
    name = unique("sync")
    with sync.Client(jet_dev.servers) as client:
        client.create_stream(name, name)
        with sync.Producer(client, name) as producer:
            assert producer.send(b"a", msg_id="k1", timestamp=7).offset == 0
            assert producer.send(b"a again", msg_id="k1").offset == 0
            with pytest.raises(WrongExpectedOffset):
                producer.send(b"b", expected_offset=0)
            handle = producer.send_soon(b"b", expected_offset=1)
            producer.flush()
            assert handle.result().offset == 1
        with sync.Consumer(client, name, start="earliest") as consumer:
            got: list[Message] = []
            deadline = time.monotonic() + 10
            while len(got) < 2 and time.monotonic() < deadline:
                got += consumer.fetch(2 - len(got), timeout=1)
    assert [(m.value, m.producer_timestamp) for m in got] == [(b"a", 7), (b"b", None)]
