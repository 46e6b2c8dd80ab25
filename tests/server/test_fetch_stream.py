"""FetchStream (api 18): one Fetch request answered by several responses as records are
committed (spec/protocol.md, "18 FetchStream"), against a real server on a real
nats-server."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import pytest

from jetsdk.codec.error_codes import ErrorCode
from jetsdk.codec.fetch_messages import FetchResponseHeader, decode_fetch_response
from jetsdk.codec.fetch_stream import (
    MAX_FETCH_STREAM_RESPONSES,
    FetchStreamRequest,
    encode_fetch_stream_request,
)
from jetsdk.codec.frames import FLAG_MORE, FLAG_RESPONSE, Api, Frame, encode_frame
from jetsdk.codec.messages import ProduceMessage, decode_error
from jetsdk.codec.record import Record, iter_records
from jetserver.server import Server
from support.jet_server import running_server
from support.nats_server import NatsServer
from support.raw_client import RawClient, ServerError

pytestmark = pytest.mark.anyio

MORE = FLAG_RESPONSE | FLAG_MORE
BOUND_S = 20.0


async def _open(
    c: RawClient,
    stream: str,
    offset: int,
    *,
    responses: int,
    wait_ms: int = 10_000,
    max_bytes: int = 1 << 20,
    cid: int = 900,
) -> int:
    req = FetchStreamRequest(stream, 0, offset, max_bytes, wait_ms, responses)
    await c.send_raw(encode_frame(Api.FETCH_STREAM, cid, encode_fetch_stream_request(req)))
    return cid


def _answer(frame: Frame) -> tuple[FetchResponseHeader, list[Record]]:
    assert frame.api == Api.FETCH_STREAM
    assert not frame.is_error, decode_error(frame.body)
    header, raw = decode_fetch_response(frame.body)
    return header, list(iter_records(raw, verify=True))


async def test_n_responses_as_records_are_committed_then_the_last(jet: Server) -> None:
    assert jet.address is not None
    async with (
        await RawClient.connect(jet.address) as c,
        await RawClient.connect(jet.address) as producer,
    ):
        assert Api.FETCH_STREAM in (await c.hello())["apis"]
        await c.create_stream(name="s", subject="s")
        cid = await _open(c, "s", 0, responses=3)
        got: list[tuple[int, list[int]]] = []
        for i in range(3):
            results = await producer.produce("s", 0, [ProduceMessage(b"v%d" % i)])
            assert results[0].offset == i
            frame = await c.recv_frame()
            assert frame.correlation_id == cid
            _header, records = _answer(frame)
            got.append((frame.flags, [r.offset for r in records]))
            assert [r.value for r in records] == [b"v%d" % i]
        # One answer per committed record, each from where the previous one ended.
        assert got == [(MORE, [0]), (MORE, [1]), (FLAG_RESPONSE, [2])]
        # The stream ended: the connection serves the next request.
        records = await c.collect("s", 0, 3)
        assert [r.offset for r in records] == [0, 1, 2]


async def test_records_already_there_come_in_the_first_answer(jet: Server) -> None:
    assert jet.address is not None
    async with await RawClient.connect(jet.address) as c:
        await c.create_stream(name="s", subject="s")
        await c.produce("s", 0, [ProduceMessage(b"a"), ProduceMessage(b"b")])
        await _open(c, "s", 1, responses=1)
        frame = await c.recv_frame()
        assert frame.flags == FLAG_RESPONSE  # N = 1: the first answer is the last
        assert [r.value for r in _answer(frame)[1]] == [b"b"]


async def test_idle_expiry_ends_the_stream_with_an_empty_answer(jet: Server) -> None:
    assert jet.address is not None
    async with await RawClient.connect(jet.address) as c:
        await c.create_stream(name="s", subject="s")
        await c.produce("s", 0, [ProduceMessage(b"a")])
        started = time.monotonic()
        await _open(c, "s", 0, responses=100, wait_ms=300)
        first = await c.recv_frame()
        assert first.flags == MORE
        assert [r.offset for r in _answer(first)[1]] == [0]
        last = await c.recv_frame()
        took = time.monotonic() - started
        assert last.flags == FLAG_RESPONSE
        header, records = _answer(last)
        assert (records, header.error_code, header.hw) == ([], 0, 1)
        assert took >= 0.3
        # Nothing at all: one empty last answer after the wait.
        await _open(c, "s", 1, responses=100, wait_ms=100, cid=901)
        only = await c.recv_frame()
        assert (only.correlation_id, only.flags, _answer(only)[1]) == (901, FLAG_RESPONSE, [])


async def test_an_offset_past_the_end_is_a_last_out_of_range_answer(jet: Server) -> None:
    assert jet.address is not None
    async with await RawClient.connect(jet.address) as c:
        await c.create_stream(name="s", subject="s")
        await _open(c, "s", 5, responses=10)
        frame = await c.recv_frame()
        assert frame.flags == FLAG_RESPONSE
        header, records = _answer(frame)
        assert (header.error_code, records) == (ErrorCode.OFFSET_OUT_OF_RANGE, [])


async def test_a_stream_deleted_mid_stream_ends_with_an_error_frame(jet: Server) -> None:
    assert jet.address is not None
    async with (
        await RawClient.connect(jet.address) as c,
        await RawClient.connect(jet.address) as admin,
    ):
        await c.create_stream(name="s", subject="s")
        await admin.produce("s", 0, [ProduceMessage(b"a")])
        await _open(c, "s", 0, responses=10)
        assert (await c.recv_frame()).flags == MORE
        await admin.delete_stream("s")
        frame = await c.recv_frame()
        assert frame.flags == FLAG_RESPONSE | 0x02
        assert decode_error(frame.body).code == ErrorCode.STREAM_NOT_FOUND
        assert (await c.hello())["protocol"] == 1  # the connection stays open


@pytest.mark.parametrize("count", [0, MAX_FETCH_STREAM_RESPONSES + 1])
async def test_a_bad_response_count_is_invalid_argument(jet: Server, count: int) -> None:
    assert jet.address is not None
    async with await RawClient.connect(jet.address) as c:
        await c.create_stream(name="s", subject="s")
        req = FetchStreamRequest("s", 0, 0, 1 << 20, 0, count)
        with pytest.raises(ServerError) as info:
            await c.request(Api.FETCH_STREAM, encode_fetch_stream_request(req))
        assert info.value.code == ErrorCode.INVALID_ARGUMENT
        assert info.value.error.details == {"field": "max_responses"}
        assert (await c.hello())["protocol"] == 1


async def test_a_truncated_request_is_malformed_and_closes(jet: Server) -> None:
    assert jet.address is not None
    async with await RawClient.connect(jet.address) as c:
        body = encode_fetch_stream_request(FetchStreamRequest("s", 0, 0, 1, 0, 1))
        await c.send_raw(encode_frame(Api.FETCH_STREAM, 5, body[:-1]))
        frames = await c.wait_closed()
        assert [(f.correlation_id, decode_error(f.body).code) for f in frames] == [
            (5, ErrorCode.MALFORMED_FRAME)
        ]


async def test_a_request_with_the_more_flag_is_malformed_and_closes(jet: Server) -> None:
    assert jet.address is not None
    async with await RawClient.connect(jet.address) as c:
        body = encode_fetch_stream_request(FetchStreamRequest("s", 0, 0, 1, 0, 1))
        # encode_frame refuses the flag: build the header by hand.
        head = (len(body) + 6).to_bytes(4, "big") + bytes([Api.FETCH_STREAM, FLAG_MORE])
        await c.send_raw(head + (5).to_bytes(4, "big") + body)
        frames = await c.wait_closed()
        assert [(f.correlation_id, decode_error(f.body).code) for f in frames] == [
            (0, ErrorCode.MALFORMED_FRAME)
        ]


MAX_INFLIGHT = 4


@pytest.fixture
async def limited(nats_server: NatsServer, tmp_path: Path) -> AsyncIterator[Server]:
    async with running_server(
        nats_server.url, tmp_path / "data", limits__max_inflight_per_connection=MAX_INFLIGHT
    ) as server:
        yield server


async def test_a_stream_is_one_request_in_flight_until_its_last_answer(limited: Server) -> None:
    """MAX_INFLIGHT open streams fill the connection's slots: the next request is read
    only when one of them has ended."""
    assert limited.address is not None
    async with (
        await RawClient.connect(limited.address) as c,
        await RawClient.connect(limited.address) as producer,
    ):
        await c.create_stream(name="s", subject="s")
        for i in range(MAX_INFLIGHT):
            await _open(c, "s", 0, responses=2, cid=100 + i)
        await c.send_raw(encode_frame(Api.HELLO, 7, b'{"protocol": 1}'))
        with pytest.raises(TimeoutError):
            await c.recv_frame(timeout_s=0.5)  # every stream waits, Hello is not read
        await producer.produce("s", 0, [ProduceMessage(b"a")])
        firsts = [await c.recv_frame() for _ in range(MAX_INFLIGHT)]
        assert {(f.correlation_id, f.flags) for f in firsts} == {
            (100 + i, MORE) for i in range(MAX_INFLIGHT)
        }
        with pytest.raises(TimeoutError):
            await c.recv_frame(timeout_s=0.5)  # still in flight: Hello still waits
        await producer.produce("s", 0, [ProduceMessage(b"b")])
        rest = [await c.recv_frame() for _ in range(MAX_INFLIGHT + 1)]
        lasts = [(f.correlation_id, f.flags) for f in rest if f.api == Api.FETCH_STREAM]
        assert sorted(lasts) == [(100 + i, FLAG_RESPONSE) for i in range(MAX_INFLIGHT)]
        assert rest[-1].correlation_id == 7  # read once a slot was free, answered last


async def test_a_client_closing_mid_stream_ends_it(jet: Server) -> None:
    """The stream's task ends with its connection; the server serves everyone else."""
    assert jet.address is not None
    async with await RawClient.connect(jet.address) as admin:
        await admin.create_stream(name="s", subject="s")
        async with await RawClient.connect(jet.address) as c:
            await _open(c, "s", 0, responses=50, wait_ms=60_000)
            await admin.produce("s", 0, [ProduceMessage(b"a")])
            assert (await c.recv_frame()).flags == MORE
        with anyio.fail_after(BOUND_S):
            replica = jet.streams.replica("s", 0)
            while jet._inflight or replica.fetch_waiters:  # noqa: ASYNC110 - no event
                await anyio.sleep(0.01)
        await admin.produce("s", 0, [ProduceMessage(b"b")])
        records = await admin.collect("s", 0, 2)
        assert [r.value for r in records] == [b"a", b"b"]


async def test_answers_hold_whole_records_within_max_bytes_in_order(jet: Server) -> None:
    """A backlog larger than max_bytes comes in several answers, in offset order, with no
    overlap and no gap, each answer within max_bytes."""
    assert jet.address is not None
    async with await RawClient.connect(jet.address) as c:
        await c.create_stream(name="s", subject="s")
        values = [b"%03d" % i + b"x" * 200 for i in range(40)]
        for i in range(0, 40, 10):
            await c.produce("s", 0, [ProduceMessage(v) for v in values[i : i + 10]])
        await _open(c, "s", 0, responses=MAX_FETCH_STREAM_RESPONSES, wait_ms=200, max_bytes=1000)
        offsets: list[int] = []
        while True:
            frame = await c.recv_frame()
            header, records = _answer(frame)
            if frame.flags == FLAG_RESPONSE:
                assert records == []  # the idle end
                break
            assert 0 < header.records_len <= 1000
            offsets += [r.offset for r in records]
            assert [r.value for r in records] == [values[r.offset] for r in records]
        assert offsets == list(range(40))
