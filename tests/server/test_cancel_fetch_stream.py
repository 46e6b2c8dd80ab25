"""CancelFetchStream (api 19): a client ends one of its FetchStreams early
(spec/protocol.md, "19 CancelFetchStream"), against a real server on a real nats-server."""

from __future__ import annotations

import pytest

from jetsdk.codec.error_codes import ErrorCode
from jetsdk.codec.fetch_messages import decode_fetch_response
from jetsdk.codec.fetch_stream import (
    FetchStreamRequest,
    decode_cancel_fetch_stream_answer,
    encode_cancel_fetch_stream,
    encode_fetch_stream_request,
)
from jetsdk.codec.frames import FLAG_MORE, FLAG_RESPONSE, Api, Frame, encode_frame
from jetsdk.codec.messages import ProduceMessage, decode_error
from jetsdk.codec.record import iter_records
from jetserver.server import Server
from support.raw_client import RawClient

pytestmark = pytest.mark.anyio

MORE = FLAG_RESPONSE | FLAG_MORE
LONG_POLL_MS = 60_000
"""The streams' idle wait: a cancelled stream must end long before it."""
ENDED_BOUND_S = 10.0
"""Bound on a cancelled stream's last response (and the cancel's answer)."""


async def _open(c: RawClient, offset: int, cid: int, responses: int = 100) -> None:
    req = FetchStreamRequest("s", 0, offset, 1 << 20, LONG_POLL_MS, responses)
    await c.send_raw(encode_frame(Api.FETCH_STREAM, cid, encode_fetch_stream_request(req)))


async def _cancel(c: RawClient, stream_cid: int, cid: int) -> None:
    await c.send_raw(
        encode_frame(Api.CANCEL_FETCH_STREAM, cid, encode_cancel_fetch_stream(stream_cid))
    )


async def _two_frames(c: RawClient) -> dict[int, Frame]:
    """The cancel's answer and the stream's last response, in either order, by API."""
    frames = [await c.recv_frame(ENDED_BOUND_S) for _ in range(2)]
    by_api = {f.api: f for f in frames}
    assert set(by_api) == {Api.FETCH_STREAM, Api.CANCEL_FETCH_STREAM}, frames
    return by_api


@pytest.mark.parametrize("parked_at", ["first answer", "a later answer"])
async def test_a_parked_stream_ends_at_once_with_an_empty_last_response(
    jet: Server, parked_at: str
) -> None:
    """Parked waiting for records (before its first answer, or after one), the stream
    ends with an empty last response when cancelled, not after its 60 s idle wait."""
    assert jet.address is not None
    async with await RawClient.connect(jet.address) as c:
        assert Api.CANCEL_FETCH_STREAM in (await c.hello())["apis"]
        await c.create_stream(name="s", subject="s")
        await c.produce("s", 0, [ProduceMessage(b"a")])
        if parked_at == "first answer":
            await _open(c, 1, cid=900)
        else:
            await _open(c, 0, cid=900)
            first = await c.recv_frame()
            assert (first.correlation_id, first.flags) == (900, MORE)
        await _cancel(c, 900, cid=901)
        frames = await _two_frames(c)
        answer = frames[Api.CANCEL_FETCH_STREAM]
        assert (answer.correlation_id, answer.flags) == (901, FLAG_RESPONSE)
        assert decode_cancel_fetch_stream_answer(answer.body) is True
        last = frames[Api.FETCH_STREAM]
        assert (last.correlation_id, last.flags) == (900, FLAG_RESPONSE)
        header, raw = decode_fetch_response(last.body)
        assert (header.error_code, header.leo, list(iter_records(raw))) == (0, 1, [])
        assert header.hw <= header.leo  # the log's offsets now (the HW may trail the ack)
        # Nothing parked any more; the connection serves on.
        assert jet.streams.replica("s", 0).fetch_waiters == 0
        assert (await c.produce("s", 0, [ProduceMessage(b"b")]))[0].offset == 1


async def test_a_cancel_naming_no_stream_answers_not_ended_and_the_others_go_on(
    jet: Server,
) -> None:
    assert jet.address is not None
    async with (
        await RawClient.connect(jet.address) as c,
        await RawClient.connect(jet.address) as other,
    ):
        await c.create_stream(name="s", subject="s")
        await _open(other, 0, cid=900)  # the same id on another connection: not touched
        await _cancel(c, 900, cid=5)
        answer = await c.recv_frame(ENDED_BOUND_S)
        assert (answer.api, answer.correlation_id) == (Api.CANCEL_FETCH_STREAM, 5)
        assert decode_cancel_fetch_stream_answer(answer.body) is False
        await c.produce("s", 0, [ProduceMessage(b"a")])
        first = await other.recv_frame(ENDED_BOUND_S)
        assert (first.correlation_id, first.flags) == (900, MORE)
        assert [r.value for r in iter_records(decode_fetch_response(first.body)[1])] == [b"a"]


async def test_a_stream_that_ended_cannot_be_cancelled(jet: Server) -> None:
    assert jet.address is not None
    async with await RawClient.connect(jet.address) as c:
        await c.create_stream(name="s", subject="s")
        await c.produce("s", 0, [ProduceMessage(b"a")])
        await _open(c, 0, cid=900, responses=1)
        only = await c.recv_frame(ENDED_BOUND_S)
        assert (only.correlation_id, only.flags) == (900, FLAG_RESPONSE)
        await _cancel(c, 900, cid=901)
        answer = await c.recv_frame(ENDED_BOUND_S)
        assert answer.correlation_id == 901
        assert decode_cancel_fetch_stream_answer(answer.body) is False


@pytest.mark.parametrize(
    ("api", "body"),
    [
        (Api.CANCEL_FETCH_STREAM, b"\x00\x00\x03"),
        (Api.CANCEL_FETCH_STREAM, b"\x00\x00\x03\x84\x00"),
        (Api.FETCH_STREAM_CREDIT, b"\x00\x00\x03\x84\x00\x00\x00"),  # (FetchStreamCredit)
        (Api.FETCH_STREAM_CREDIT, b"\x00" * 9),
    ],
)
async def test_a_malformed_cancel_or_grant_is_malformed_frame_and_closes(
    jet: Server, api: Api, body: bytes
) -> None:
    assert jet.address is not None
    async with await RawClient.connect(jet.address) as c:
        await c.send_raw(encode_frame(api, 7, body))
        frames = await c.wait_closed()
        assert [(f.correlation_id, decode_error(f.body).code) for f in frames] == [
            (7, ErrorCode.MALFORMED_FRAME)
        ]
