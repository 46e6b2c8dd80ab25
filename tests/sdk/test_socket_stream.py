"""SocketByteStream (jetsdk.transport): the SDK's plain-TCP byte stream, on a real loopback
TCP connection, under asyncio and trio."""

from __future__ import annotations

import socket

import anyio
import pytest

from jetsdk.errors import JetConnectionError
from jetsdk.transport import Address, SocketByteStream, tcp_dialer

pytestmark = pytest.mark.anyio
WAIT_S = 10.0


async def _pair() -> tuple[SocketByteStream, socket.socket]:
    listener = socket.create_server(("127.0.0.1", 0))
    try:
        port = listener.getsockname()[1]
        stream = await tcp_dialer(Address("127.0.0.1", port), WAIT_S)
        peer, _ = listener.accept()
    finally:
        listener.close()
    assert isinstance(stream, SocketByteStream)
    return stream, peer


async def test_bytes_both_ways_and_a_write_larger_than_the_socket_buffers() -> None:
    stream, peer = await _pair()
    with peer, anyio.fail_after(WAIT_S):
        assert stream.sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)
        await stream.write(b"ping")
        assert await anyio.to_thread.run_sync(peer.recv, 4) == b"ping"
        peer.sendall(b"pong")
        assert await stream.read() == b"pong"
        big = bytes(range(256)) * 40_000  # ~10 MB: the write must wait for the reader
        got = bytearray()

        def drain() -> None:
            while len(got) < len(big):
                got.extend(peer.recv(1 << 20))

        async with anyio.create_task_group() as tg:
            tg.start_soon(anyio.to_thread.run_sync, drain)
            await stream.write(big)
        assert bytes(got) == big
        peer.close()
        assert await stream.read() == b""  # end of stream
        await stream.aclose()


async def test_close_wakes_a_blocked_reader_and_later_calls_fail() -> None:
    stream, peer = await _pair()
    errors: list[BaseException] = []
    with peer, anyio.fail_after(WAIT_S):

        async def reader() -> None:
            try:
                await stream.read()
            except JetConnectionError as exc:
                errors.append(exc)

        async with anyio.create_task_group() as tg:
            tg.start_soon(reader)
            await anyio.wait_all_tasks_blocked()
            await stream.aclose()
        assert len(errors) == 1
        with pytest.raises(JetConnectionError):
            await stream.write(b"x")
        await stream.aclose()  # idempotent


async def test_close_completes_without_yielding_in_a_cancelled_scope() -> None:
    """A connection closed while its task is being cancelled (a server stopping) must go on
    to close the rest (its reader's task group): aclose() never raises the cancellation."""
    stream, peer = await _pair()
    after = False
    with peer:
        with anyio.CancelScope() as scope:
            scope.cancel()
            await stream.aclose()
            after = True
        assert after
        assert stream.sock.fileno() == -1


async def test_a_write_now_to_a_reset_connection_raises_a_connection_error() -> None:
    stream, peer = await _pair()
    try:
        # The peer resets the connection (SO_LINGER 0): the next sends fail with ECONNRESET
        # or EPIPE, translated at the I/O boundary.
        peer.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
        peer.close()

        async def write_until_it_fails() -> None:
            while True:  # the first send may still be taken before the reset arrives
                stream.write_now(b"x" * 1024)
                await anyio.sleep(0.01)

        with anyio.fail_after(WAIT_S), pytest.raises(JetConnectionError, match="write to 127"):
            await write_until_it_fails()
    finally:
        await stream.aclose()
