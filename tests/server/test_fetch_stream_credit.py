"""FetchStreamCredit (api 20): a client grants one of its FetchStreams more responses
(spec/protocol.md, "20 FetchStreamCredit"), against a real server on a real nats-server."""

from __future__ import annotations

import pytest

from jetsdk.codec.error_codes import AckPolicy, ErrorCode
from jetsdk.codec.fetch_messages import decode_fetch_response
from jetsdk.codec.fetch_stream import (
    MAX_FETCH_STREAM_RESPONSES,
    FetchStreamCredit,
    FetchStreamRequest,
    decode_fetch_stream_credit_answer,
    encode_fetch_stream_credit,
    encode_fetch_stream_request,
)
from jetsdk.codec.frames import FLAG_MORE, FLAG_RESPONSE, Api, Frame, encode_frame
from jetsdk.codec.messages import (
    ProduceMessage,
    ProduceRequest,
    decode_error,
    encode_produce_request,
)
from jetsdk.codec.record import iter_records
from jetserver.server import Server
from support.raw_client import RawClient

pytestmark = pytest.mark.anyio

MORE = FLAG_RESPONSE | FLAG_MORE
LONG_POLL_MS = 60_000
BOUND_S = 10.0


async def _open(c: RawClient, offset: int, cid: int, responses: int) -> None:
    req = FetchStreamRequest("s", 0, offset, 1 << 20, LONG_POLL_MS, responses)
    await c.send_raw(encode_frame(Api.FETCH_STREAM, cid, encode_fetch_stream_request(req)))


async def _grant(c: RawClient, stream_cid: int, more: int, cid: int) -> None:
    body = encode_fetch_stream_credit(FetchStreamCredit(stream_cid, more))
    await c.send_raw(encode_frame(Api.FETCH_STREAM_CREDIT, cid, body))


async def _frames(c: RawClient, count: int) -> dict[int, Frame]:
    """``count`` frames, in whatever order they come, by correlation id."""
    frames = [await c.recv_frame(BOUND_S) for _ in range(count)]
    by_cid = {f.correlation_id: f for f in frames}
    assert len(by_cid) == count, frames
    return by_cid


async def _produce_beside(c: RawClient, value: bytes, cid: int) -> Frame:
    """Produce ``value`` on the connection of a parked stream: the stream's answer, the
    Produce's answer checked aside (the two may come in either order)."""
    req = ProduceRequest("s", 0, AckPolicy.LEADER, 5000, (ProduceMessage(value),))
    await c.send_raw(encode_frame(Api.PRODUCE, cid, encode_produce_request(req)))
    frames = await _frames(c, 2)
    assert not frames.pop(cid).is_error
    (answer,) = frames.values()
    return answer


def _values(frame: Frame) -> list[bytes]:
    assert frame.api == Api.FETCH_STREAM, frame
    assert not frame.is_error, frame
    return [r.value for r in iter_records(decode_fetch_response(frame.body)[1])]


async def test_a_grant_while_the_last_answer_is_parked_makes_the_stream_go_on(
    jet: Server,
) -> None:
    """A stream of 2 answers gave one and is parked for its last; granted 3 more, it
    says so (4 left), gives its second answer with "more" and ends at its fifth."""
    assert jet.address is not None
    async with await RawClient.connect(jet.address) as c:
        assert Api.FETCH_STREAM_CREDIT in (await c.hello())["apis"]
        await c.create_stream(name="s", subject="s")
        await _open(c, 0, cid=900, responses=2)
        first = await _produce_beside(c, b"0", cid=10)
        assert (first.correlation_id, first.flags, _values(first)) == (900, MORE, [b"0"])
        await _grant(c, 900, 3, cid=901)
        answer = await c.recv_frame(BOUND_S)
        assert (answer.api, answer.correlation_id, answer.flags) == (
            Api.FETCH_STREAM_CREDIT,
            901,
            FLAG_RESPONSE,
        )
        assert decode_fetch_stream_credit_answer(answer.body) == 4
        got = []
        for i in range(1, 5):
            frame = await _produce_beside(c, b"%d" % i, cid=10 + i)
            got.append((frame.correlation_id, frame.flags, _values(frame)))
        assert got == [
            (900, MORE, [b"1"]),
            (900, MORE, [b"2"]),
            (900, MORE, [b"3"]),
            (900, FLAG_RESPONSE, [b"4"]),
        ]
        assert jet.streams.replica("s", 0).fetch_waiters == 0


async def test_grants_are_capped_at_the_most_one_stream_may_ask_for(jet: Server) -> None:
    assert jet.address is not None
    async with await RawClient.connect(jet.address) as c:
        await c.create_stream(name="s", subject="s")
        await _open(c, 0, cid=900, responses=1000)
        await _grant(c, 900, 20, cid=901)
        await _grant(c, 900, MAX_FETCH_STREAM_RESPONSES, cid=902)
        frames = await _frames(c, 2)
        assert [decode_fetch_stream_credit_answer(frames[cid].body) for cid in (901, 902)] == [
            1020,
            MAX_FETCH_STREAM_RESPONSES,
        ]


async def test_a_grant_to_no_open_stream_is_void(jet: Server) -> None:
    """After its last answer, under a correlation id of no stream, or of another
    connection's stream: the answer is 0 and nothing changes."""
    assert jet.address is not None
    async with await RawClient.connect(jet.address) as c:
        await c.create_stream(name="s", subject="s")
        await c.produce("s", 0, [ProduceMessage(b"0")])
        hello = await c.hello()  # (the grants below are answered, not UNSUPPORTED_API)
        assert Api.FETCH_STREAM_CREDIT in hello["apis"]
        await _open(c, 0, cid=900, responses=1)
        only = await c.recv_frame(BOUND_S)
        assert (only.correlation_id, only.flags, _values(only)) == (900, FLAG_RESPONSE, [b"0"])
        async with await RawClient.connect(jet.address) as other:
            await _open(other, 1, cid=800, responses=1)
            await _grant(c, 900, 5, cid=901)  # ended
            await _grant(c, 77, 5, cid=902)  # none
            await _grant(c, 800, 5, cid=903)  # the other connection's
            frames = await _frames(c, 3)
            answers = [
                decode_fetch_stream_credit_answer(frames[cid].body) for cid in (901, 902, 903)
            ]
            assert answers == [0, 0, 0]
            # The other connection's stream still ends at its one answer.
            await c.produce("s", 0, [ProduceMessage(b"1")])
            last = await other.recv_frame(BOUND_S)
            assert (last.correlation_id, last.flags, _values(last)) == (800, FLAG_RESPONSE, [b"1"])


@pytest.mark.parametrize("more", [0, MAX_FETCH_STREAM_RESPONSES + 1])
async def test_a_grant_out_of_range_is_invalid_argument_and_the_stream_is_unchanged(
    jet: Server, more: int
) -> None:
    assert jet.address is not None
    async with await RawClient.connect(jet.address) as c:
        await c.create_stream(name="s", subject="s")
        await _open(c, 0, cid=900, responses=1)
        await _grant(c, 900, more, cid=901)
        error = await c.recv_frame(BOUND_S)
        assert (error.api, error.correlation_id, error.is_error) == (
            Api.FETCH_STREAM_CREDIT,
            901,
            True,
        )
        body = decode_error(error.body)
        assert (body.code, body.details) == (
            ErrorCode.INVALID_ARGUMENT,
            {"field": "more_responses"},
        )
        last = await _produce_beside(c, b"0", cid=10)
        assert (last.correlation_id, last.flags, _values(last)) == (900, FLAG_RESPONSE, [b"0"])
