"""SocketIO's timed read over a real socket pair: the reader callback stays registered
from one wait to the next, and nothing it reads is lost when nobody waits."""

from __future__ import annotations

import socket

import anyio
import pytest

from jetserver.protocol.socket_io import SocketIO

pytestmark = pytest.mark.anyio


@pytest.fixture(params=[False, True], ids=["asyncio", "uvloop"])
def anyio_backend(request: pytest.FixtureRequest) -> tuple[str, dict[str, bool]]:
    """The server runs on asyncio or uvloop."""
    return ("asyncio", {"use_uvloop": request.param})


async def test_waits_return_what_arrives_and_keep_watching() -> None:
    a, b = socket.socketpair()
    io = SocketIO(a)
    try:
        assert await io.recv_within(0.05) is None  # nothing came: timed out
        async with anyio.create_task_group() as tg:
            tg.start_soon(_send_when_waited, io, b, b"one")
            with anyio.fail_after(5):
                assert await io.recv_within(5) == b"one"
        assert io._watch is not None  # still registered for the next wait
        async with anyio.create_task_group() as tg:
            tg.start_soon(_send_when_waited, io, b, b"two")
            with anyio.fail_after(5):
                assert await io.recv_within(5) == b"two"
    finally:
        io.close()
        b.close()
    assert io._watch is None


async def test_what_arrives_while_nobody_waits_is_kept_for_the_next_read() -> None:
    a, b = socket.socketpair()
    io = SocketIO(a)
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(_send_when_waited, io, b, b"first")
            with anyio.fail_after(5):
                assert await io.recv_within(5) == b"first"
        # Bytes arrive while the reader is busy elsewhere: the callback reads them and
        # stops watching; the next read gets them, and the watch comes back with a wait.
        b.send(b"early")
        with anyio.fail_after(5):
            while io._watch is not None:  # noqa: ASYNC110 - the loop's callback, no event
                await anyio.sleep(0.001)
        assert io.recv_now() == b"early"
        assert io.recv_now() is None
        b.send(b"late")
        with anyio.fail_after(5):
            assert await io.recv_within(5) == b"late"
        b.close()
        with anyio.fail_after(5):
            assert await io.recv_within(5) == b""  # end of stream
    finally:
        io.close()


class _CountingSocket(socket.socket):
    """A socket that counts the reads that found nothing (EAGAIN)."""

    empty_reads = 0

    def recv(self, bufsize: int, flags: int = 0) -> bytes:
        try:
            return super().recv(bufsize, flags)
        except BlockingIOError:
            self.empty_reads += 1
            raise


async def test_a_watched_socket_waits_without_a_read_that_finds_nothing() -> None:
    """Once the reader callback is registered, a wait does not first try a read of its
    own: whatever the socket holds, the callback reads on this loop turn (epoll is level
    triggered). That read found nothing on almost every request at light load (one EAGAIN
    system call per request), and the connection's read loop tried one more before it."""
    a, b = socket.socketpair()
    sock = _CountingSocket(a.family, a.type, a.proto, fileno=a.detach())
    io = SocketIO(sock)
    try:
        for data in (b"one", b"two", b"three"):
            async with anyio.create_task_group() as tg:
                tg.start_soon(_send_when_waited, io, b, data)
                with anyio.fail_after(5):
                    assert await io.recv_within(5) == data
        assert sock.empty_reads == 1  # the first wait, before the callback was registered
        b.send(b"ready")  # already there when the next wait starts: read at once
        with anyio.fail_after(5):
            assert await io.recv_within(5) == b"ready"
        assert await io.recv_within(0.05) is None
        assert sock.empty_reads == 1
    finally:
        io.close()
        b.close()


async def _send_when_waited(io: SocketIO, sock: socket.socket, data: bytes) -> None:
    """Send ``data`` once the reader waits for it (its future is set), so that the bytes
    arrive during the wait, through the reader callback."""
    with anyio.fail_after(5):
        while io._waiter is None:  # noqa: ASYNC110 - the reader's own state, no event
            await anyio.sleep(0.001)
    sock.send(data)


async def test_reads_into_a_buffer_in_every_way_bytes_can_come() -> None:
    """recv_into_within (a large frame's body received in place): bytes already there,
    bytes that arrive during the wait (through the reader callback, into the target),
    bytes the callback read while nobody waited (copied into the target, the rest kept),
    a timeout (None) and the end of the stream (0)."""
    a, b = socket.socketpair()
    io = SocketIO(a)
    buf = bytearray(10)
    view = memoryview(buf)
    try:
        b.send(b"abc")
        with anyio.fail_after(5):
            assert await io.recv_into_within(view, 5) == 3  # there already: at once
        assert buf[:3] == b"abc"
        async with anyio.create_task_group() as tg:
            tg.start_soon(_send_when_waited, io, b, b"defg")
            with anyio.fail_after(5):
                assert await io.recv_into_within(view[3:], 5) == 4  # through the callback
        assert buf[:7] == b"abcdefg"
        assert io._into is None
        # Read by the callback while nobody waited: more than the target takes.
        b.send(b"0123456789")
        with anyio.fail_after(5):
            while io._watch is not None:  # noqa: ASYNC110 - the loop's callback, no event
                await anyio.sleep(0.001)
        assert await io.recv_into_within(view[7:], 5) == 3
        assert buf == b"abcdefg012"
        assert await io.recv_within(5) == b"3456789"  # the rest, kept
        assert await io.recv_into_within(view, 0.05) is None  # nothing came
        b.close()
        with anyio.fail_after(5):
            assert await io.recv_into_within(view, 5) == 0  # end of stream
    finally:
        io.close()


async def test_waits_share_one_timer_until_a_deadline_comes_sooner() -> None:
    """A connection's reads wait with a deadline that moves on with each request (the
    idle timeout): one timer serves them all, none is armed or cancelled per request.
    It still ends a wait at that wait's deadline: a later one after the timer fired
    early (re-armed), and a sooner one (the timer moved)."""
    import asyncio

    loop = asyncio.get_running_loop()
    timers: list[asyncio.TimerHandle] = []  # held: distinct objects are distinct timers

    def note() -> None:
        if io._timer is not None and all(t is not io._timer for t in timers):
            timers.append(io._timer)

    a, b = socket.socketpair()
    io = SocketIO(a)
    try:
        for i in range(20):
            async with anyio.create_task_group() as tg:
                tg.start_soon(_send_when_waited, io, b, b"m%d" % i)
                with anyio.fail_after(5):
                    assert await io.recv_within(30 + i) == b"m%d" % i
            note()
        assert len(timers) == 1
        assert not timers[0].cancelled()
        started = loop.time()
        with anyio.fail_after(5):
            assert await io.recv_within(0.05) is None  # sooner: the timer moved
        assert loop.time() - started >= 0.04
        assert timers[0].cancelled()
        io._arm(loop, 0.05)  # as if a wait armed it and data ended that wait
        note()
        started = loop.time()
        with anyio.fail_after(5):
            assert await io.recv_within(0.2) is None  # that timer fires early: re-armed
        assert loop.time() - started >= 0.19
        note()
        assert len(timers) == 2  # the re-armed one was let go when it fired
    finally:
        io.close()
        b.close()
