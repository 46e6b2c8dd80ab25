"""A response written from outside its request's task (``AcceptedConnection.write_now``,
the connection's :data:`ANSWER_NOW` in a Produce request's task): an ALL ack at RF 3 is
settled in the turn of the replica fetch that moved the HW, and its answer goes from that
turn, not from the request task's later wake-up (docs/latency.md, RF 3).

Real loopback sockets; the handler stands in for the Produce service: it keeps the
request's ``write_now`` and parks until the test settles it from a loop callback."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import anyio
import pytest

from jetsdk.codec.frames import FLAG_ERROR, FLAG_RESPONSE, Api, Frame, FrameDecoder, encode_frame
from jetserver.config.server import LimitsConfig
from jetserver.protocol.connection import ANSWER_NOW, AcceptedConnection, Reply
from jetserver.protocol.reply import AnswerAtOnce
from jetserver.protocol.socket_io import SocketIO
from jetserver.testing.waiting import wait_until_async
from support.loop_tasks import tasks_made

pytestmark = pytest.mark.anyio

BOUND_S = 10.0
POLL_S = 0.005


def _response(correlation_id: int, body: bytes) -> bytes:
    return encode_frame(Api.PRODUCE, correlation_id, body, flags=FLAG_RESPONSE)


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
    handler: Callable[[Frame], Awaitable[Reply]], at_once: AnswerAtOnce | None = None
) -> AsyncIterator[socket.socket]:
    """A client socket whose server side an AcceptedConnection serves with ``handler``
    (and ``at_once``, the Produce requests it answers in the reader callback)."""
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


class _TaskAnswers:
    """A handler that answers every request from its task with ``task``, keeping the
    correlation ids it was called with."""

    def __init__(self) -> None:
        self.handled: list[int] = []

    async def __call__(self, frame: Frame) -> Reply:
        self.handled.append(frame.correlation_id)
        return Reply(_response(frame.correlation_id, b"task"))


class _LeftToLater:
    """An ``at_once`` that takes every Produce request and leaves its answer to a later
    call (an ALL ack left to its commit), keeping those calls."""

    def __init__(self) -> None:
        self.laters: list[Callable[[bytes], None]] = []

    def __call__(self, cid: int, body: bytes, later: Callable[[bytes], None]) -> tuple[bytes, Any]:
        self.laters.append(later)
        return b"", None

    async def wait_for(self, count: int) -> None:
        """Until ``count`` answers are left to later calls."""
        what = f"{count} answers left to a later call"
        await wait_until_async(lambda: len(self.laters) >= count, BOUND_S, what, interval_s=POLL_S)


async def test_an_answer_is_on_the_socket_in_the_turn_that_settles_it() -> None:
    """The settling callback writes the answer: the client can read it before the
    request's task runs again, and the task writes nothing more (the next frame the
    client reads is the next request's answer)."""
    writers: list[Callable[[bytes], bool]] = []
    parked = asyncio.Event()
    release = asyncio.Event()
    resumed = asyncio.Event()

    async def handler(frame: Frame) -> Reply:
        if frame.correlation_id == 12:
            return Reply(_response(12, b"next"))
        write_now = ANSWER_NOW.get()
        assert write_now is not None  # a Produce request's task has it
        writers.append(write_now)
        parked.set()
        await release.wait()
        resumed.set()
        return Reply(b"", sent=True)

    async with _serving(handler) as client:
        client.sendall(encode_frame(Api.PRODUCE, 11, b"request"))
        with anyio.fail_after(BOUND_S):
            await parked.wait()
        seen: list[bytes] = []

        def settle() -> None:  # the turn that moved the HW
            assert writers[0](_response(11, b"answer"))
            release.set()
            # In this same turn, before the request's task ran again:
            assert not resumed.is_set()
            seen.append(client.recv(1 << 16))

        asyncio.get_running_loop().call_soon(settle)
        with anyio.fail_after(BOUND_S):
            await resumed.wait()
        client.sendall(encode_frame(Api.PRODUCE, 12, b"request"))
        later = await _read_frames(client, 1)
    assert seen == [_response(11, b"answer")]
    assert [(f.correlation_id, bytes(f.body)) for f in later] == [(12, b"next")]


def _send_next_in_part(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """Once armed (a value appended to the list returned), the socket takes only 5 bytes
    of the next frame sent (a full buffer)."""
    real_send_now = SocketIO.send_now
    short: list[bool] = []

    def send_now(self: SocketIO, data: bytes | memoryview, *, more: bool = False) -> int:
        if short and len(data) > 8:
            short.clear()
            return real_send_now(self, memoryview(data)[:5], more=more)  # a full buffer
        return real_send_now(self, data, more=more)

    monkeypatch.setattr(SocketIO, "send_now", send_now)
    return short


async def test_what_the_socket_did_not_take_goes_before_the_next_response(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An early answer the socket takes only in part: its rest goes out before the next
    request's response, whole, so the client reads both frames intact and in order."""
    _send_next_in_part(monkeypatch).append(True)
    first_parked = asyncio.Event()
    writers: list[Callable[[bytes], bool]] = []

    async def handler(frame: Frame) -> Reply:
        if frame.correlation_id == 1:
            write_now = ANSWER_NOW.get()
            assert write_now is not None
            assert write_now(_response(1, b"first answer, sent in part"))
            writers.append(write_now)
            first_parked.set()
            await release.wait()  # the task resumes late: the second answers first
            return Reply(b"", sent=True)
        return Reply(_response(frame.correlation_id, b"second answer"))

    release = asyncio.Event()
    async with _serving(handler) as client:
        client.sendall(encode_frame(Api.PRODUCE, 1, b"a"))
        with anyio.fail_after(BOUND_S):
            await first_parked.wait()
        # Another write_now while the rest is pending must not interleave: refused.
        assert not writers[0](_response(9, b"refused"))
        client.sendall(encode_frame(Api.PRODUCE, 2, b"b"))
        frames = await _read_frames(client, 2)
        release.set()
    assert [(f.correlation_id, bytes(f.body)) for f in frames] == [
        (1, b"first answer, sent in part"),
        (2, b"second answer"),
    ]


class _Reads:
    """The read loop's waits that ended with bytes (its steps that took a read)."""

    def __init__(self) -> None:
        self.count = 0
        self.seen = asyncio.Event()
        """Set at each (clear it to wait for the next)."""


def _count_reads(monkeypatch: pytest.MonkeyPatch) -> _Reads:
    """Count the read loop's waits that ended with bytes."""
    real_recv_within = SocketIO.recv_within
    reads = _Reads()

    async def recv_within(self: SocketIO, seconds: float, max_bytes: int = 1 << 18) -> bytes | None:
        data = await real_recv_within(self, seconds, max_bytes)
        if data:
            reads.count += 1
            reads.seen.set()
        return data

    monkeypatch.setattr(SocketIO, "recv_within", recv_within)
    return reads


async def _echo(frame: Frame) -> Reply:
    return Reply(_response(frame.correlation_id, b"re " + bytes(frame.body)))


@pytest.mark.parametrize("api", [Api.PRODUCE, Api.PRODUCE_MANY], ids=["produce", "many"])
async def test_a_request_alone_in_its_read_starts_from_the_reader_callback(
    monkeypatch: pytest.MonkeyPatch, api: Api
) -> None:
    """A request frame that arrives alone (the usual one at light load) starts its task
    from the socket's reader callback: the read loop does not take a step per request
    (it took one for every request before, a loop turn and its lines; for a ProduceMany,
    a table's round of puts, until a7cd68ab: 5 reads)."""
    reads = _count_reads(monkeypatch)
    async with _serving(_echo) as client:
        for cid in range(1, 6):
            client.sendall(encode_frame(api, cid, b"m%d" % cid))
            (frame,) = await _read_frames(client, 1)
            assert (frame.correlation_id, bytes(frame.body)) == (cid, b"re m%d" % cid)
    assert reads.count <= 1  # the first may be there before the reader callback is


async def test_a_produce_behind_a_produce_many_starts_after_its_section_tasks() -> None:
    """Pipelined requests keep their order on a partition (spec/protocol.md §17): a
    ProduceMany's first step makes a task per section, which enters its partition in its
    first step; a Produce sent right behind it, whether it comes in the same read or the
    next (taken from the reader callback), starts after those section tasks."""
    order: list[str] = []

    async def handler(frame: Frame) -> Reply:
        if frame.api == Api.PRODUCE_MANY:

            async def section(i: int) -> None:
                order.append(f"{frame.correlation_id}.{i}")

            await asyncio.gather(*(section(i) for i in range(3)))
        else:
            order.append(f"{frame.correlation_id}")
        return Reply(_response(frame.correlation_id, b""))

    async with _serving(handler) as client:
        for rnd in range(20):
            many, one = 2 * rnd + 1, 2 * rnd + 2
            order.clear()
            client.sendall(encode_frame(Api.PRODUCE_MANY, many, b"m"))
            client.sendall(encode_frame(Api.PRODUCE, one, b"p"))
            frames = await _read_frames(client, 2)
            assert sorted(f.correlation_id for f in frames) == [many, one]
            assert order == [f"{many}.0", f"{many}.1", f"{many}.2", f"{one}"], rnd


async def test_the_read_loop_still_takes_what_is_not_one_whole_request(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Two requests in one read, a request split across reads and a response frame (which
    a client must not send) go through the read loop as before: answered in order, and
    the response frame closes the connection with MALFORMED_FRAME."""
    reads = _count_reads(monkeypatch)
    async with _serving(_echo) as client:
        client.sendall(encode_frame(Api.PRODUCE, 1, b"a") + encode_frame(Api.PRODUCE, 2, b"b"))
        frames = await _read_frames(client, 2)
        assert [(f.correlation_id, bytes(f.body)) for f in frames] == [(1, b"re a"), (2, b"re b")]
        whole = encode_frame(Api.PRODUCE, 3, b"split")
        reads.seen.clear()
        client.sendall(whole[:7])
        with anyio.fail_after(BOUND_S):
            await reads.seen.wait()  # the read loop took the first part
        client.sendall(whole[7:])
        (frame,) = await _read_frames(client, 1)
        assert (frame.correlation_id, bytes(frame.body)) == (3, b"re split")
        client.sendall(encode_frame(Api.PRODUCE, 4, b"x", flags=FLAG_RESPONSE))
        (frame,) = await _read_frames(client, 1)
        assert frame.flags & FLAG_ERROR
        assert frame.correlation_id == 4


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

    def at_once(cid: int, body: bytes, _later: Any) -> tuple[bytes, Any] | None:
        if cid == 0:
            return None  # the first: its task (the read loop then waits for the next)
        return _response(cid, b"at once " + body), after if cid == 3 else None

    async with _serving(handler, at_once) as client:
        client.sendall(encode_frame(Api.PRODUCE, 0, b"m0"))
        await _read_frames(client, 1)
        with tasks_made() as made:
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

    def at_once(cid: int, body: bytes, _later: Any) -> tuple[bytes, Any] | None:
        offered.append(cid)
        return None if cid == 1 else (_response(cid, b"at once"), None)

    async with _serving(handler, at_once) as client:
        client.sendall(encode_frame(Api.PRODUCE, 1, b"slow"))
        with anyio.fail_after(BOUND_S):
            await parked.wait()
        client.sendall(encode_frame(Api.PRODUCE, 2, b"fast"))
        await wait_until_async(
            lambda: len(handled) >= 2, BOUND_S, "the second's task", interval_s=POLL_S
        )
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
    short = _send_next_in_part(monkeypatch)

    def at_once(cid: int, body: bytes, _later: Any) -> tuple[bytes, Any] | None:
        return _response(cid, b"answer %d at once" % cid), None

    async with _serving(_TaskAnswers(), at_once) as client:
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


async def test_a_produce_answered_later_stays_in_flight_until_its_answer() -> None:
    """``at_once`` may leave the answer to a later call (an ALL ack: its commit writes
    it): no task, the request counts as in flight until then (a request behind it goes
    to its task: none is answered at once ahead of it; the broker answers its tasks'
    ALL acks in commit order), and the later frame reaches the client from the loop
    callback that writes it."""
    handler = _TaskAnswers()
    at_once = _LeftToLater()
    async with _serving(handler, at_once) as client:
        client.sendall(encode_frame(Api.PRODUCE, 0, b"first: the read loop's"))
        await _read_frames(client, 1)
        with tasks_made() as made:
            client.sendall(encode_frame(Api.PRODUCE, 1, b"left to its commit"))
            await at_once.wait_for(1)  # (the reader callback's)
        assert made == []
        client.sendall(encode_frame(Api.PRODUCE, 2, b"behind it"))
        await wait_until_async(
            lambda: len(handler.handled) >= 2, BOUND_S, "its task", interval_s=POLL_S
        )
        (task_answer,) = await _read_frames(client, 1)
        laters = at_once.laters
        asyncio.get_running_loop().call_soon(laters[0], _response(1, b"from its commit"))
        (later_answer,) = await _read_frames(client, 1)
        client.sendall(encode_frame(Api.PRODUCE, 3, b"alone again"))
        await at_once.wait_for(2)  # taken at once again
    assert handler.handled == [0, 2]
    assert (task_answer.correlation_id, bytes(task_answer.body)) == (2, b"task")
    assert (later_answer.correlation_id, bytes(later_answer.body)) == (1, b"from its commit")


async def test_an_answer_later_and_a_push_of_the_same_callback_go_in_one_send(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The commit that answers an ALL ack left to it also pushes a tailing consumer's
    records on the same connection: both frames go in one send (the later answer corks
    the connection until the callback's end), in the order written."""
    sends: list[int] = []
    real_send_now = SocketIO.send_now

    def send_now(self: SocketIO, data: bytes | memoryview, *, more: bool = False) -> int:
        sends.append(len(data))
        return real_send_now(self, data, more=more)

    pushes: list[Callable[[bytes], bool]] = []
    parked = asyncio.Event()

    async def tailing() -> Reply:
        parked.set()
        await asyncio.Event().wait()  # (cancelled with the connection)
        raise AssertionError("unreachable")

    async def handler(frame: Frame) -> Reply:
        if frame.api == Api.FETCH_STREAM:  # a tailing consumer: answers pushed to it
            write_now = ANSWER_NOW.get()
            assert write_now is not None
            pushes.append(write_now)
            first = encode_frame(Api.FETCH_STREAM, 1, b"first", flags=FLAG_RESPONSE)
            return Reply(first, then=tailing)
        return Reply(_response(frame.correlation_id, b"task"))

    at_once = _LeftToLater()
    async with _serving(handler, at_once) as client:
        client.sendall(encode_frame(Api.FETCH_STREAM, 1, b"tail"))
        await _read_frames(client, 1)
        with anyio.fail_after(BOUND_S):
            await parked.wait()
        client.sendall(encode_frame(Api.PRODUCE, 2, b"ack all"))
        await at_once.wait_for(1)  # (the reader callback's)
        monkeypatch.setattr(SocketIO, "send_now", send_now)
        answer = _response(2, b"committed")
        push = encode_frame(Api.FETCH_STREAM, 1, b"records", flags=FLAG_RESPONSE)

        def commit() -> None:  # the fsync's end: the ALL answer, then the consumer's push
            at_once.laters[0](answer)
            assert pushes[0](push)

        asyncio.get_running_loop().call_soon(commit)
        frames = await _read_frames(client, 2)
    assert [(f.correlation_id, bytes(f.body)) for f in frames] == [
        (2, b"committed"),
        (1, b"records"),
    ]
    assert sends == [len(answer) + len(push)]
