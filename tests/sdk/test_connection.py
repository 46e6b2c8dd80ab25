"""Connection: correlation, out-of-order answers, timeouts, failures, over an in-memory pipe
and over a real socket pair (:class:`~jetsdk.transport.SocketByteStream`: on asyncio its
frames are read in a reader callback and its writes skip the lock when the socket takes
them at once)."""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator, Callable

import anyio
import pytest

from jetsdk.codec.error_codes import ErrorCode
from jetsdk.codec.frames import FLAG_ERROR, FLAG_RESPONSE, Api, encode_frame
from jetsdk.codec.messages import encode_error
from jetsdk.connection import Connection
from jetsdk.errors import (
    ClientClosed,
    FrameTooLarge,
    JetConnectionError,
    MalformedFrame,
    StreamNotFound,
    Timeout,
)
from jetsdk.memory import FramePeer, memory_stream_pair
from jetsdk.transport import ByteStream, SocketByteStream, receive_into

pytestmark = pytest.mark.anyio


def _socket_pair() -> tuple[ByteStream, ByteStream]:
    a, b = socket.socketpair()
    a.setblocking(False)
    b.setblocking(False)
    return SocketByteStream(a, label="a"), SocketByteStream(b, label="b")


@pytest.fixture(params=["memory", "socket"])
def stream_pair(request: pytest.FixtureRequest) -> Callable[[], tuple[ByteStream, ByteStream]]:
    """Makes a connected (client end, server end) pair of either kind."""
    return memory_stream_pair if request.param == "memory" else _socket_pair  # type: ignore[return-value]


@pytest.fixture
async def wired(
    stream_pair: Callable[[], tuple[ByteStream, ByteStream]],
) -> AsyncIterator[tuple[Connection, FramePeer]]:
    """An entered Connection over a new pair of either kind, and the frame peer of its
    server end (``peer.stream``: that end's bytes)."""
    client_end, server_end = stream_pair()
    async with Connection(client_end) as conn:
        yield conn, FramePeer(server_end)


async def test_responses_out_of_order_reach_their_requesters(
    wired: tuple[Connection, FramePeer],
) -> None:
    conn, peer = wired
    results: dict[int, bytes] = {}
    async with anyio.create_task_group() as tg:

        async def ask(i: int) -> None:
            results[i] = await conn.request(Api.METADATA, b"q%d" % i, timeout=5)

        for i in range(3):
            tg.start_soon(ask, i)
        frames = [await peer.receive() for _ in range(3)]
        for frame in reversed(frames):
            assert frame is not None
            await peer.respond(frame, b"a" + frame.body[1:])
    assert results == {0: b"a0", 1: b"a1", 2: b"a2"}


async def test_error_response_raises_registered_class(wired: tuple[Connection, FramePeer]) -> None:
    conn, peer = wired
    async with anyio.create_task_group() as tg:

        async def serve() -> None:
            frame = await peer.receive()
            assert frame is not None
            await peer.respond_error(
                frame, ErrorCode.STREAM_NOT_FOUND, "no such stream", {"stream": "x"}
            )

        tg.start_soon(serve)
        with pytest.raises(StreamNotFound) as info:
            await conn.request(Api.DESCRIBE_STREAM, b"{}", timeout=5)
    assert info.value.stream == "x"
    assert not info.value.retriable
    assert not conn.closed  # an error answer leaves the connection usable


async def test_timeout_then_late_answer_is_dropped(wired: tuple[Connection, FramePeer]) -> None:
    conn, peer = wired
    with pytest.raises(Timeout) as info:
        await conn.request(Api.METADATA, b"slow", timeout=0.05)
    assert info.value.retriable
    assert isinstance(info.value, TimeoutError)
    slow = await peer.receive()
    assert slow is not None
    await peer.respond(slow, b"too late")
    async with anyio.create_task_group() as tg:

        async def serve() -> None:
            frame = await peer.receive()
            assert frame is not None
            await peer.respond(frame, b"fresh")

        tg.start_soon(serve)
        assert await conn.request(Api.METADATA, b"next", timeout=5) == b"fresh"
    assert conn.pending_count == 0


async def test_connection_loss_fails_pending_with_retriable_error(
    wired: tuple[Connection, FramePeer],
) -> None:
    conn, peer = wired
    pending = [await conn.send(Api.FETCH, b"x") for _ in range(3)]
    await peer.aclose()
    for p in pending:
        with pytest.raises(JetConnectionError) as info:
            await p.wait(5)
        assert info.value.retriable
    assert conn.closed
    with pytest.raises(JetConnectionError):
        await conn.request(Api.METADATA, b"", timeout=1)


async def test_garbage_from_server_is_a_protocol_error(wired: tuple[Connection, FramePeer]) -> None:
    conn, peer = wired
    pending = await conn.send(Api.METADATA, b"")
    await peer.stream.write(b"\x00\x00\x00\x01zzzz")  # length 1 < 6
    with pytest.raises(MalformedFrame):
        await pending.wait(5)
    assert conn.closed


async def test_frame_too_large_on_correlation_zero_fails_everything(
    wired: tuple[Connection, FramePeer],
) -> None:
    conn, peer = wired
    pending = await conn.send(Api.PRODUCE, b"big")
    body = encode_error(ErrorCode.FRAME_TOO_LARGE, "too big", {"max_frame_bytes": 10})
    await peer.stream.write(encode_frame(Api.PRODUCE, 0, body, flags=FLAG_RESPONSE | FLAG_ERROR))
    with pytest.raises(FrameTooLarge) as info:
        await pending.wait(5)
    assert info.value.details == {"max_frame_bytes": 10}


async def test_close_fails_pending_with_client_closed(wired: tuple[Connection, FramePeer]) -> None:
    conn = wired[0]
    pending = await conn.send(Api.METADATA, b"")
    await conn.aclose()
    with pytest.raises(ClientClosed):
        await pending.wait(5)


async def test_cancelled_waiter_does_not_break_connection(
    wired: tuple[Connection, FramePeer],
) -> None:
    conn, peer = wired
    with anyio.move_on_after(0.05):
        await conn.request(Api.FETCH, b"long poll", timeout=None)
    first = await peer.receive()
    assert first is not None
    async with anyio.create_task_group() as tg:

        async def serve() -> None:
            frame = await peer.receive()
            assert frame is not None
            await peer.respond(first, b"late")  # dropped: nobody waits for it
            await peer.respond(frame, b"ok")

        tg.start_soon(serve)
        assert await conn.request(Api.METADATA, b"", timeout=5) == b"ok"


async def test_a_frame_begun_without_waiting_is_finished_before_the_next(
    anyio_backend: str,
) -> None:
    # The server end does not read until both requests are out: the first frame is far
    # larger than the socket buffers, so the socket takes only part of it at once.
    client_end, server_end = _socket_pair()
    peer = FramePeer(server_end)
    big = b"x" * (8 << 20)
    async with Connection(client_end) as conn:
        first = conn.send_nowait(Api.PRODUCE, big)  # (trio too: the rest from a side task)
        assert first is not None
        assert not conn.can_send_now  # the rest of the big frame is still being written
        assert conn.send_nowait(Api.METADATA, b"second") is None
        async with anyio.create_task_group() as tg:
            tg.start_soon(conn.send, Api.METADATA, b"second")
            with anyio.fail_after(30):
                frames = [await peer.receive(), await peer.receive()]
        assert [f.body if f is not None else None for f in frames] == [big, b"second"]
        assert frames[0] is not None
        assert frames[0].correlation_id == first.correlation_id
        assert conn.can_send_now


async def test_receive_into_hands_over_every_chunk_then_the_end(
    stream_pair: Callable[[], tuple[ByteStream, ByteStream]],
) -> None:
    """The connection's one read path, over both kinds of stream (a socket on asyncio
    delivers from its reader callback; a memory pipe, and a socket on trio, are read in a
    loop): every byte in order, then ``b""`` once, then it returns."""
    here, there = stream_pair()
    got: list[bytes] = []
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(receive_into, here, got.append)
            for chunk in (b"one", b"two", b"three"):
                await there.write(chunk)
            await there.aclose()
    assert b"".join(got) == b"onetwothree"
    assert got[-1] == b""
    assert b"" not in got[:-1]
    await here.aclose()


async def test_receive_into_stops_reading_when_the_receiver_raises(
    stream_pair: Callable[[], tuple[ByteStream, ByteStream]],
) -> None:
    here, there = stream_pair()
    calls: list[bytes] = []

    def refuse(data: bytes) -> None:
        calls.append(data)
        raise MalformedFrame("bad bytes")

    await there.write(b"garbage")
    with anyio.fail_after(10), pytest.raises(MalformedFrame):
        await receive_into(here, refuse)
    assert calls == [b"garbage"]
    if isinstance(here, SocketByteStream):
        assert here._reading is None  # no reader callback left registered
    await here.aclose()
    await there.aclose()
