"""The common Produce request answered in its connection's reader callback: no task, no
coroutine (``AcceptedConnection._answer_at_once``, ``OneProduce.serve_now``), and every
request it does not take served by its task as before.

The connection's side with real loopback sockets and stand-ins for the server's parts;
the server's side in process (tasks counted by the loop's task factory)."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any

import anyio
import pytest

from jetsdk.codec.error_codes import AckPolicy, ErrorCode
from jetsdk.codec.frames import FLAG_RESPONSE, Api, Frame, FrameDecoder, encode_frame
from jetsdk.codec.messages import ProduceMessage, ProduceRequest, encode_produce_request
from jetsdk.codec.transcode import (
    SPLIT_VALUE_MIN,
    DirectRecord,
    one_message_envelope,
    produce_envelopes,
)
from jetserver.broker.produce_one import OneProduce
from jetserver.config.server import LimitsConfig
from jetserver.protocol.connection import AcceptedConnection, Reply
from jetserver.protocol.reply import AnswerAtOnce
from jetserver.protocol.socket_io import SocketIO
from jetserver.server import Server
from support.raw_client import RawClient, ServerError

pytestmark = pytest.mark.anyio

BOUND_S = 10.0


def _response(correlation_id: int, body: bytes) -> bytes:
    return encode_frame(Api.PRODUCE, correlation_id, body, flags=FLAG_RESPONSE)


@contextlib.contextmanager
def _tasks_made() -> Iterator[list[str]]:
    """The tasks the running loop makes meanwhile for jetserver's coroutines (names)."""
    loop = asyncio.get_running_loop()
    made: list[str] = []
    before = loop.get_task_factory()

    def factory(loop: asyncio.AbstractEventLoop, coro: Any, **kw: Any) -> asyncio.Future[Any]:
        code = getattr(coro, "cr_code", None)
        if code is not None and "/jetserver/" in code.co_filename:
            made.append(code.co_qualname)
        if before is None:
            return asyncio.Task(coro, loop=loop, **kw)
        return before(loop, coro, **kw)

    loop.set_task_factory(factory)
    try:
        yield made
    finally:
        loop.set_task_factory(before)


async def _read_frames(client: socket.socket, count: int) -> list[Frame]:
    decoder = FrameDecoder(1 << 24)
    frames: list[Frame] = []
    with anyio.fail_after(BOUND_S):
        while len(frames) < count:
            await anyio.wait_readable(client)
            decoder.feed(client.recv(1 << 20))
            while (frame := decoder.next_frame()) is not None:
                frames.append(frame)
    return frames


@contextlib.asynccontextmanager
async def _serving(
    handler: Callable[[Frame], Awaitable[Reply]], at_once: AnswerAtOnce
) -> AsyncIterator[socket.socket]:
    """A client socket whose server side an AcceptedConnection serves."""
    with socket.create_server(("127.0.0.1", 0)) as server:
        client = socket.create_connection(server.getsockname())
        accepted, _ = server.accept()
    client.setblocking(False)
    with client:
        conn = AcceptedConnection(SocketIO(accepted), handler, LimitsConfig(), at_once=at_once)
        async with anyio.create_task_group() as tg:
            tg.start_soon(conn.serve)
            yield client
            tg.cancel_scope.cancel()


async def test_a_produce_alone_is_answered_in_the_reader_callback_with_no_task() -> None:
    """Taken at once: answered, its after-work run after the answer (in a task: the one
    task left), the handler never called."""
    handled: list[int] = []
    after_ran = asyncio.Event()

    async def handler(frame: Frame) -> Reply:
        handled.append(frame.correlation_id)
        return Reply(_response(frame.correlation_id, b"from the task"))

    async def after() -> None:
        after_ran.set()

    def at_once(cid: int, body: bytes) -> tuple[bytes, Any] | None:
        if cid == 0:
            return None  # the first: its task (the read loop then waits for the next)
        return _response(cid, b"at once " + body), after if cid == 3 else None

    async with _serving(handler, at_once) as client:
        client.sendall(encode_frame(Api.PRODUCE, 0, b"m0"))
        await _read_frames(client, 1)
        with _tasks_made() as made:
            for cid in (1, 2):
                client.sendall(encode_frame(Api.PRODUCE, cid, b"m%d" % cid))
                (frame,) = await _read_frames(client, 1)
                assert (frame.correlation_id, bytes(frame.body)) == (cid, b"at once m%d" % cid)
        assert made == []  # no request task, no after-work task
        client.sendall(encode_frame(Api.PRODUCE, 3, b"m3"))
        (frame,) = await _read_frames(client, 1)
        with anyio.fail_after(BOUND_S):
            await after_ran.wait()
    assert bytes(frame.body) == b"at once m3"
    assert handled == [0]


async def test_a_produce_behind_a_request_in_flight_is_served_by_its_task() -> None:
    """A request pipelined behind one still in its task is not taken at once (its answer
    could overtake the earlier one's): its task serves it; declined ones too."""
    offered: list[int] = []
    handled: list[int] = []
    parked = asyncio.Event()
    release = asyncio.Event()

    async def handler(frame: Frame) -> Reply:
        handled.append(frame.correlation_id)
        if frame.correlation_id == 1:
            parked.set()
            await release.wait()
        return Reply(_response(frame.correlation_id, b"task"))

    def at_once(cid: int, body: bytes) -> tuple[bytes, Any] | None:
        offered.append(cid)
        return None if cid == 1 else (_response(cid, b"at once"), None)

    async with _serving(handler, at_once) as client:
        client.sendall(encode_frame(Api.PRODUCE, 1, b"slow"))
        with anyio.fail_after(BOUND_S):
            await parked.wait()
        client.sendall(encode_frame(Api.PRODUCE, 2, b"fast"))
        with anyio.fail_after(BOUND_S):
            while len(handled) < 2:  # noqa: ASYNC110 (bounded: the second's task)
                await asyncio.sleep(0.005)
        release.set()
        frames = await _read_frames(client, 2)
        client.sendall(encode_frame(Api.PRODUCE, 3, b"alone again"))
        (third,) = await _read_frames(client, 1)
    assert offered == [3]  # (the first came through the read loop) not the second
    assert handled == [1, 2]
    assert sorted((f.correlation_id, bytes(f.body)) for f in frames) == [
        (1, b"task"),
        (2, b"task"),
    ]
    assert bytes(third.body) == b"at once"


async def test_what_the_socket_does_not_take_of_an_answer_at_once_follows(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An answer at once the socket takes in part: a task sends the rest, whole, before
    the next answer."""
    real_send_now = SocketIO.send_now
    short: list[bool] = []

    def send_now(self: SocketIO, data: bytes | memoryview, *, more: bool = False) -> int:
        if short and len(data) > 8:
            short.clear()
            return real_send_now(self, memoryview(data)[:5], more=more)  # a full buffer
        return real_send_now(self, data, more=more)

    monkeypatch.setattr(SocketIO, "send_now", send_now)

    async def handler(frame: Frame) -> Reply:
        return Reply(_response(frame.correlation_id, b"task"))

    def at_once(cid: int, body: bytes) -> tuple[bytes, Any] | None:
        return _response(cid, b"answer %d at once" % cid), None

    async with _serving(handler, at_once) as client:
        client.sendall(encode_frame(Api.PRODUCE, 0, b"first: the read loop's"))
        await _read_frames(client, 1)
        short.append(True)  # the next answer: sent in part
        client.sendall(encode_frame(Api.PRODUCE, 1, b"a"))
        (first,) = await _read_frames(client, 1)
        client.sendall(encode_frame(Api.PRODUCE, 2, b"b"))
        (second,) = await _read_frames(client, 1)
    assert [(f.correlation_id, bytes(f.body)) for f in (first, second)] == [
        (1, b"answer 1 at once"),
        (2, b"answer 2 at once"),
    ]


class _Counted:
    """``OneProduce.serve_now``, its results counted (taken: not None)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        real = OneProduce.serve_now
        self.taken = 0
        self.declined = 0

        def counting(obj: OneProduce, *args: Any) -> Any:
            out = real(obj, *args)
            self.taken += out is not None
            self.declined += out is None
            return out

        monkeypatch.setattr(OneProduce, "serve_now", counting)


@pytest.mark.parametrize("durability", ["written", "flushed"])
async def test_the_server_makes_no_task_for_the_common_produce(
    jet: Server, durability: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One message at a time: ``written``, no task at all per message; ``flushed``, one
    (the after-work: the fsync, then the NATS copy)."""
    counted = _Counted(monkeypatch)
    async with await RawClient.connect(jet.address) as c:
        await c.create_stream(name="t", subject="t.x", durability=durability)
        await c.produce("t", 0, [ProduceMessage(b"first")])  # the partition's set-up
        with _tasks_made() as made:
            for i in range(20):
                (result,) = await c.produce("t", 0, [ProduceMessage(b"m%d" % i)])
                assert (result.error_code, result.offset) == (ErrorCode.NONE, i + 1)
    assert counted.taken == 21
    if durability == "written":
        assert made == []
    else:
        assert len(made) <= 20
        assert set(made) <= {"DirectCopies.publish_let_in"}


async def test_requests_it_declines_are_answered_by_their_task(
    jet: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each reason to decline: a large write, no room for the copy in the backlog, the
    server shutting down, several messages, an ALL ack, a producer id. Each is answered
    as the task's path answers it (nothing done at once)."""
    counted = _Counted(monkeypatch)
    async with await RawClient.connect(jet.address) as c:
        await c.create_stream(
            name="d", subject="d.x", durability="written", max_message_bytes=1 << 20
        )
        (large,) = await c.produce("d", 0, [ProduceMessage(b"x" * (70 * 1024))])
        assert (large.error_code, large.offset, counted.taken) == (ErrorCode.NONE, 0, 0)
        backlog = jet.running.produce.copy_backlog
        held, limit = backlog.held, backlog.limit
        backlog.held, backlog.limit = 10, 10  # full: the copy would wait for room
        try:
            (full,) = await c.produce("d", 0, [ProduceMessage(b"no room")], timeout_ms=200)
        finally:
            backlog.held, backlog.limit = held, limit
        assert (full.error_code, full.offset, counted.taken) == (ErrorCode.NONE, 1, 0)
        several = await c.produce("d", 0, [ProduceMessage(b"a"), ProduceMessage(b"b")])
        assert [r.offset for r in several] == [2, 3]
        (all_acked,) = await c.produce("d", 0, [ProduceMessage(b"c")], ack_policy=AckPolicy.ALL)
        (idempotent,) = await c.produce("d", 0, [ProduceMessage(b"p")], producer_id=7)
        assert (all_acked.offset, idempotent.offset) == (4, 5)
        declined = counted.declined
        jet.running.dispatcher.shutting_down = True
        try:
            with pytest.raises(ServerError) as refused:
                await c.produce("d", 0, [ProduceMessage(b"late")])
        finally:
            jet.running.dispatcher.shutting_down = False
        assert refused.value.code == ErrorCode.SHUTTING_DOWN
        assert counted.declined == declined  # (refused before it: the handler's answer)
        (plain,) = await c.produce("d", 0, [ProduceMessage(b"plain")])
    assert plain.offset == 6
    assert counted.taken == 1
    assert counted.declined == 5  # all but the one refused before it (shutting down)


def _body(messages: list[ProduceMessage], **options: Any) -> bytes:
    fields: dict[str, Any] = {"ack_policy": AckPolicy.LEADER, "timeout_ms": 5000, **options}
    req = ProduceRequest(stream="s", partition=0, messages=tuple(messages), **fields)
    return encode_produce_request(req)


@pytest.mark.parametrize(
    "message",
    [
        ProduceMessage(b"v"),
        ProduceMessage(b""),
        ProduceMessage(b"v", key=b"k"),
        ProduceMessage(b"v", key=b""),
        ProduceMessage(b"v", subject="s.\u00e9"),
        ProduceMessage(b"x" * (SPLIT_VALUE_MIN - 1), key=b"k" * 300),
    ],
)
def test_one_message_envelope_is_the_general_decoding(message: ProduceMessage) -> None:
    body = _body([message], ack_policy=AckPolicy.LEADER, timeout_ms=1234)
    one = one_message_envelope(body, "_INBOX.x.1f")
    records: list[DirectRecord | None] = []
    head, messages = produce_envelopes(body, "_INBOX.x.1f", records, split=True)
    assert one is not None
    assert one[:3] == (head[0], head[1], head[3])
    assert one[3:] == (*messages[0], records[0])


@pytest.mark.parametrize(
    "body",
    [
        _body([ProduceMessage(b"v")], ack_policy=AckPolicy.NONE),
        _body([ProduceMessage(b"v")], ack_policy=AckPolicy.ALL),
        _body([ProduceMessage(b"v")], producer_id=1),
        _body([ProduceMessage(b"v")], current_values=True),
        _body([ProduceMessage(b"v", headers=(("h", b"1"),))]),
        _body([ProduceMessage(b"v"), ProduceMessage(b"w")]),
        _body([ProduceMessage(b"x" * SPLIT_VALUE_MIN)]),
        _body([ProduceMessage(b"v")]) + b"\x00",  # trailing
        _body([ProduceMessage(b"v")])[:-1],  # truncated
        _body([ProduceMessage(b"v", key=b"k")])[:30],
        b"\xff\xff",
        b"",
    ],
)
def test_one_message_envelope_leaves_anything_else_to_the_general_decoding(
    body: bytes,
) -> None:
    assert one_message_envelope(body, "_INBOX.x.1f") is None
