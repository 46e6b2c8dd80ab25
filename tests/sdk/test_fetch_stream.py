"""The SDK's streaming fetch (FetchStream, api 18): the connection's multi-response queue
and the consumer's fetch loop over it, against a real `jet dev`; the fallback to Fetch
against a server without it (the fake cluster)."""

from __future__ import annotations

from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import pytest

from jetsdk import Client, Consumer, Producer
from jetsdk.codec.fetch_messages import decode_fetch_response
from jetsdk.codec.fetch_stream import (
    FetchStreamRequest,
    decode_cancel_fetch_stream_answer,
    encode_fetch_stream_request,
)
from jetsdk.codec.frames import FLAG_MORE, FLAG_RESPONSE, Api, Frame
from jetsdk.codec.messages import ProduceMessage, ProduceRequest
from jetsdk.codec.record import iter_records
from jetsdk.connection import Connection
from jetsdk.consumer import fetch_source
from jetsdk.pending_stream import PendingStream
from jetsdk.transport import running_asyncio_loop
from support.jet_dev import JetDev
from support.names import unique

from .helpers import cluster_and_client

pytestmark = pytest.mark.anyio

BOUND_S = 30.0


@pytest.fixture
def sent_apis(monkeypatch: pytest.MonkeyPatch) -> Counter[int]:
    """Counts the requests the SDK's connections send, by API (the sends still happen)."""
    counts: Counter[int] = Counter()
    send, send_stream = Connection.send, Connection.send_stream

    async def counted_send(self: Connection, api: int, body: Any) -> Any:
        counts[api] += 1
        return await send(self, api, body)

    async def counted_stream(self: Connection, api: int, body: Any, **kw: Any) -> Any:
        counts[api] += 1
        return await send_stream(self, api, body, **kw)

    monkeypatch.setattr(Connection, "send", counted_send)
    monkeypatch.setattr(Connection, "send_stream", counted_stream)
    return counts


async def _produce(client: Client, name: str, values: list[bytes], *, partition: int = 0) -> None:
    messages = tuple(ProduceMessage(v) for v in values)
    await client.produce(ProduceRequest(name, partition, 1, 5000, messages))


async def _fetch_stream(
    client: Client,
    name: str,
    *,
    max_bytes: int = 1 << 20,
    max_wait_ms: int = 10_000,
    max_responses: int = 5,
    max_buffered_bytes: int | None = None,
) -> tuple[Connection, PendingStream]:
    """A FetchStream of partition 0 from offset 0, sent on its leader's connection."""
    conn = await client.leader_connection(name, 0)
    request = FetchStreamRequest(name, 0, 0, max_bytes, max_wait_ms, max_responses)
    pending = await conn.send_stream(
        Api.FETCH_STREAM,
        encode_fetch_stream_request(request),
        max_buffered_bytes=max_buffered_bytes,
    )
    return conn, pending


async def test_a_stream_answers_each_commit_and_drops_the_rest_once_closed(
    jet_dev: JetDev,
) -> None:
    name = unique("fs")
    async with Client(jet_dev.servers) as client:
        await client.create_stream(name, name)
        conn, pending = await _fetch_stream(client, name)
        assert conn.serves(Api.FETCH_STREAM)
        got = []
        for i in range(2):
            await _produce(client, name, [b"v%d" % i])
            answer, more = await pending.next(BOUND_S)
            _header, raw = decode_fetch_response(answer)
            got.append(([r.value for r in iter_records(raw)], more))
        assert got == [([b"v0"], True), ([b"v1"], True)]
        pending.close()  # a seek: the 3 answers left are not wanted
        assert conn.pending_count == 0
        await _produce(client, name, [b"v2"])
        # The connection goes on: the dropped answer is not taken for another request's.
        header, raw = await client.fetch(name, 0, 2, max_bytes=1 << 20, max_wait=BOUND_S)
        assert [r.value for r in iter_records(raw)] == [b"v2"]
        assert header.hw == 3


async def test_a_closed_stream_is_cancelled_on_the_server(
    jet_dev: JetDev, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Closed while parked, the stream is ended by a CancelFetchStream: its empty last
    response comes at once (not after its 60 s idle wait) and no answer with records
    follows for it."""
    frames: list[Frame] = []
    dispatch = Connection._dispatch

    def tapped(self: Connection, api: int, flags: int, cid: int, body: bytes) -> None:
        frames.append(Frame(api=api, flags=flags, correlation_id=cid, body=body))
        dispatch(self, api, flags, cid, body)

    monkeypatch.setattr(Connection, "_dispatch", tapped)
    name = unique("fs")
    async with Client(jet_dev.servers) as client:
        await client.create_stream(name, name)
        conn, pending = await _fetch_stream(client, name, max_wait_ms=60_000)
        assert conn.serves(Api.CANCEL_FETCH_STREAM)
        await _produce(client, name, [b"v0"])
        _answer, more = await pending.next(BOUND_S)
        assert more
        pending.close()  # parked for its next answer
        with anyio.fail_after(BOUND_S):
            while not any(  # noqa: ASYNC110 - the reader appends them; no event to wait on
                f.api == Api.FETCH_STREAM and not f.has_more for f in frames
            ):
                await anyio.sleep(0.01)
        await _produce(client, name, [b"v1"])
        _header, raw = await client.fetch(name, 0, 1, max_bytes=1 << 20, max_wait=BOUND_S)
        assert [r.value for r in iter_records(raw)] == [b"v1"]
        assert conn.stream_controls[Api.CANCEL_FETCH_STREAM] == 1
    streamed = [f for f in frames if f.correlation_id == pending.correlation_id]
    assert [
        (f.flags, len(list(iter_records(decode_fetch_response(f.body)[1])))) for f in streamed
    ] == [(FLAG_RESPONSE | FLAG_MORE, 1), (FLAG_RESPONSE, 0)]
    answers = [f for f in frames if f.api == Api.CANCEL_FETCH_STREAM]
    assert [decode_cancel_fetch_stream_answer(f.body) for f in answers] == [True]


async def test_a_stream_past_its_buffer_bound_stops_after_what_it_holds(jet_dev: JetDev) -> None:
    name = unique("fs")
    async with Client(jet_dev.servers) as client:
        await client.create_stream(name, name)
        for i in range(6):
            await _produce(client, name, [b"x" * 1000 + b"%d" % i])
        _conn, pending = await _fetch_stream(
            client, name, max_bytes=1500, max_responses=100, max_buffered_bytes=2500
        )
        with anyio.fail_after(BOUND_S):
            while not pending.cut:  # noqa: ASYNC110 - the reader fills it; no event to wait on
                await anyio.sleep(0.01)
        offsets = []
        more = True
        while more:
            answer, more = await pending.next(BOUND_S)
            offsets += [r.offset for r in iter_records(decode_fetch_response(answer)[1])]
        assert offsets == [0, 1, 2]  # one answer (a record of 1 KB) each, the third crossed
        assert pending.finished


async def test_a_consumer_streams_every_record_once_in_order(
    jet_dev: JetDev, sent_apis: Counter[int]
) -> None:
    name = unique("fs")
    count = 300
    backlog = 100  # stored before the consumer starts: its first answers are full ones
    async with Client(jet_dev.servers) as client:
        await client.create_stream(name, name, partitions=2)
        for p in (0, 1):
            await _produce(client, name, [b"%d" % i for i in range(p, backlog, 2)], partition=p)
        got: dict[int, list[bytes]] = {0: [], 1: []}
        async with (
            Consumer(client, name, max_wait=2.0, max_bytes=200) as consumer,
            Producer(client, name, linger=0) as producer,
        ):

            async def produce() -> None:
                for i in range(backlog, count):
                    await producer.send(b"%d" % i, partition=i % 2)

            async with anyio.create_task_group() as tg:
                tg.start_soon(produce)
                with anyio.fail_after(BOUND_S):
                    async for msg in consumer:
                        got[msg.partition].append(msg.value)
                        if sum(map(len, got.values())) == count:
                            break
        assert got[0] == [b"%d" % i for i in range(0, count, 2)]
        assert got[1] == [b"%d" % i for i in range(1, count, 2)]
        # Streams, not one Fetch per answer: at most one request per TAILING_RESPONSES
        # answers once tailing (and the first of each partition).
        assert sent_apis[Api.FETCH] == 0
        assert 2 <= sent_apis[Api.FETCH_STREAM] <= 2 + count // 4


async def test_a_seek_mid_stream_restarts_from_the_new_position(jet_dev: JetDev) -> None:
    name = unique("fs")
    async with Client(jet_dev.servers) as client:
        await client.create_stream(name, name)
        await _produce(client, name, [b"%d" % i for i in range(10)])
        async with Consumer(client, name, max_wait=5.0) as consumer:
            with anyio.fail_after(BOUND_S):
                first = await consumer.fetch(max_records=4, timeout=BOUND_S)
                assert [m.offset for m in first] == [0, 1, 2, 3]
                consumer.seek(0, 7)
                await _produce(client, name, [b"10"])
                values = []
                while len(values) < 4:
                    values += [m.value for m in await consumer.fetch(timeout=BOUND_S)]
        assert values == [b"7", b"8", b"9", b"10"]


async def test_the_consumer_fetches_from_a_server_without_streams() -> None:
    """The fake cluster's Hello lists no ``apis`` (an older server): plain Fetch."""
    async with cluster_and_client() as (cluster, client):
        cluster.add_stream("s")
        offsets = [cluster.append("s", 0, b"%d" % i) for i in range(5)]
        async with Consumer(client, "s") as consumer:
            got = [m.offset for m in await consumer.fetch(max_records=5, timeout=BOUND_S)]
        assert got == offsets
        apis = {api for _sid, api in cluster.requests}
        assert Api.FETCH in apis
        assert Api.FETCH_STREAM not in apis


def test_a_stream_asks_for_at_most_its_buffer_in_answers() -> None:
    assert fetch_source.stream_shape(1 << 20, tailing=True) == (64, 128 * 1024)
    assert fetch_source.stream_shape(1000, tailing=True) == (64, 1000)
    assert fetch_source.stream_shape(1 << 20, tailing=False) == (8, 1 << 20)
    assert fetch_source.stream_shape(64 << 20, tailing=False) == (2, 64 << 20)


@asynccontextmanager
async def _tailing(jet_dev: JetDev) -> AsyncIterator[tuple[Consumer, Producer]]:
    """A new stream's consumer at its tail (its stream open: the first answer opened it)
    and a producer of it (linger 0)."""
    name = unique("fs")
    async with Client(jet_dev.servers) as client:
        await client.create_stream(name, name)
        async with (
            Consumer(client, name, start="new-only", max_wait=5.0) as consumer,
            Producer(client, name, linger=0) as producer,
        ):
            with anyio.fail_after(BOUND_S):
                while not await consumer.fetch(timeout=0.5):
                    await producer.send(b"warm")
                while await consumer.fetch(timeout=0.2):
                    pass
            yield consumer, producer


async def test_a_tailing_consumer_gets_each_answer_without_its_fetch_loop_waking(
    jet_dev: JetDev, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An open stream's answer is decoded and handed to the waiting application in the
    connection reader's turn (FetchSource.take): the fetch loop's ``source.next`` returns
    only for what it cannot take there (here: a stream's last answer, or the first)."""
    returned = 0
    next_answer = fetch_source.FetchSource.next

    async def counted(self: fetch_source.FetchSource, offset: int, max_bytes: int) -> Any:
        nonlocal returned
        answer = await next_answer(self, offset, max_bytes)
        returned += 1
        return answer

    monkeypatch.setattr(fetch_source.FetchSource, "next", counted)
    count = 40
    async with _tailing(jet_dev) as (consumer, producer):
        with anyio.fail_after(BOUND_S):
            before = returned
            offsets = []
            for i in range(count):
                sent = await producer.send(b"%d" % i)
                got = await consumer.fetch(timeout=BOUND_S)
                assert [m.value for m in got] == [b"%d" % i]
                offsets.append(got[0].offset)
                assert offsets[-1] == sent.offset
        assert offsets == list(range(offsets[0], offsets[0] + count))
        # Before: one return per message (40). Now: a stream's last answer of its 64 ends
        # in the loop's task, and opens the next stream.
        assert returned - before <= 2


async def test_answers_left_untaken_keep_their_order_behind_a_full_credit(
    jet_dev: JetDev,
) -> None:
    """While the application does not take what was handed over, the run's credit is
    used up: later answers queue in the stream and come out in order, none lost."""
    count = 30
    async with _tailing(jet_dev) as (consumer, producer):
        with anyio.fail_after(BOUND_S):
            first = (await producer.send(b"0")).offset
            for i in range(1, count):  # one request each, nobody fetching meanwhile
                await producer.send(b"%d" % i)
            values: list[bytes] = []
            offsets: list[int] = []
            while len(values) < count:
                for msg in await consumer.fetch(max_records=7, timeout=BOUND_S):
                    values.append(msg.value)
                    offsets.append(msg.offset)
        assert values == [b"%d" % i for i in range(count)]
        assert offsets == list(range(first, first + count))


async def test_a_streams_wait_starts_again_after_answers_taken_in_the_readers_turn() -> None:
    """``PendingStream.next``'s timeout bounds the time without any answer: answers its
    ``on_answer`` took meanwhile start the wait again (a tailing consumer's stream is
    not timed out while its answers flow to the application)."""
    forgotten: list[int] = []
    loop = running_asyncio_loop()  # asyncio: a future; trio: an event
    pending = PendingStream(Api.FETCH_STREAM, 7, "peer", forgotten.append, loop)
    taken: list[bytes] = []

    def take(body: bytes | bytearray) -> bool:
        taken.append(bytes(body))
        return body != b"queue me"

    pending.on_answer = take
    async with anyio.create_task_group() as tg:

        async def feed() -> None:
            for body in (b"a", b"b", b"c"):
                await anyio.sleep(0.15)
                pending._push(body, None, more=True)
            await anyio.sleep(0.15)
            pending._push(b"queue me", None, more=True)

        tg.start_soon(feed)
        with anyio.fail_after(BOUND_S):
            body, more = await pending.next(0.3)  # 0.6 s in all, 0.15 s between answers
    assert (body, more) == (b"queue me", True)
    assert taken == [b"a", b"b", b"c", b"queue me"]
    assert pending.taken == 3
    assert forgotten == []
    pending._push(b"last", None, more=False)  # a last answer is never taken
    assert taken[-1] == b"queue me"
    assert await pending.next(BOUND_S) == (b"last", False)


@pytest.mark.parametrize("server_takes_grants", [True, False])
async def test_a_tailing_consumer_tops_its_stream_up_or_against_an_older_server_renews_it(
    jet_dev: JetDev, sent_apis: Counter[int], server_takes_grants: bool
) -> None:
    """At the tail, the consumer's stream is granted more answers as they are taken
    (FetchStreamCredit, api 20): one stream for every message, none sent again after its
    64th answer. Against a server whose Hello does not list api 20 (an older one), the
    stream ends at its 64th answer and the next is sent: every message still comes once,
    in order."""
    count = 200
    async with _tailing(jet_dev) as (consumer, producer):
        conn = await consumer.client.leader_connection(consumer.streams[0], 0)
        assert conn.serves(Api.FETCH_STREAM_CREDIT)
        if not server_takes_grants:
            apis = conn.server_info["apis"]
            assert isinstance(apis, list)
            conn.server_info["apis"] = [a for a in apis if a != Api.FETCH_STREAM_CREDIT]
        opened = sent_apis[Api.FETCH_STREAM]
        granted = conn.stream_controls[Api.FETCH_STREAM_CREDIT]
        with anyio.fail_after(BOUND_S):
            offsets = []
            for i in range(count):
                sent = await producer.send(b"%d" % i)
                got = await consumer.fetch(timeout=BOUND_S)
                assert [(m.value, m.offset) for m in got] == [(b"%d" % i, sent.offset)]
                offsets.append(sent.offset)
        assert offsets == list(range(offsets[0], offsets[0] + count))
        opened = sent_apis[Api.FETCH_STREAM] - opened
        granted = conn.stream_controls[Api.FETCH_STREAM_CREDIT] - granted
        if server_takes_grants:
            # At most the warm-up's stream (8 answers of 1 MiB) ends, and its tailing
            # successor is topped up by 32 answers at a time.
            assert opened <= 1
            assert granted >= count // 32 - 1
        else:
            assert opened >= count // 64
            assert granted == 0


async def test_streams_granted_an_answer_at_a_time_still_give_every_record_once_in_order(
    jet_dev: JetDev, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Streams of 2 tailing answers, granted one more per answer taken, while messages
    come in bursts: grants race with the stream's last answers (some come after it was
    decided: void, and the next stream is sent). Whichever way each stream ends, every
    record comes once, in order."""
    monkeypatch.setattr(fetch_source, "TAILING_RESPONSES", 2)
    count = 300
    async with _tailing(jet_dev) as (consumer, producer):
        conn = await consumer.client.leader_connection(consumer.streams[0], 0)
        granted = conn.stream_controls[Api.FETCH_STREAM_CREDIT]
        with anyio.fail_after(BOUND_S):
            first = -1
            values: list[bytes] = []
            offsets: list[int] = []

            async def produce() -> None:
                nonlocal first
                for i in range(count):
                    sent = await producer.send_soon(b"%d" % i)
                    if i == 0:
                        first = (await sent).offset
                    elif i % 7 == 6:  # a burst of 7, then the next after its acks
                        await sent
                await producer.flush()

            async with anyio.create_task_group() as tg:
                tg.start_soon(produce)
                while len(values) < count:
                    for msg in await consumer.fetch(timeout=BOUND_S):
                        values.append(msg.value)
                        offsets.append(msg.offset)
        assert values == [b"%d" % i for i in range(count)]
        assert offsets == list(range(first, first + count))
        assert conn.stream_controls[Api.FETCH_STREAM_CREDIT] - granted > 10
