"""The console's HTTP layer on a real socket: an early error answer does not reset the client.

A browser or ``http.client`` sends a whole request body before it reads the answer. When the
console refuses a request by its head (a body over :data:`MAX_BODY_BYTES`), it must let the
client finish sending and read the answer: closing with unread bytes makes the kernel reset
the connection, and the client sees ``BrokenPipeError`` instead of 413 (a CI failure of
``test_console.py::test_writes_with_allow_writes``).
"""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator
from http import HTTPStatus

import anyio
import pytest

from jetserver.console.http import MAX_BODY_BYTES, Request, Response, serve

pytestmark = pytest.mark.anyio

IO_TIMEOUT_S = 10.0


async def _echo(request: Request) -> Response:
    return Response.json({"len": len(request.body)})


@pytest.fixture
async def port() -> AsyncIterator[int]:
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
    bound = listener.extra(anyio.abc.SocketAttribute.local_port)
    async with anyio.create_task_group() as tg:
        tg.start_soon(serve, listener, _echo)
        yield bound
        tg.cancel_scope.cancel()


def _read_all(sock: socket.socket) -> bytes:
    chunks = []
    while chunk := sock.recv(65536):
        chunks.append(chunk)
    return b"".join(chunks)


def _oversized_exchange(port: int) -> tuple[bytes, bytes]:
    """Send an oversized head, read the answer, then send the body; (answer, after)."""
    size = MAX_BODY_BYTES * 2
    with socket.create_connection(("127.0.0.1", port), timeout=IO_TIMEOUT_S) as sock:
        sock.sendall(
            b"POST /x HTTP/1.1\r\nHost: t\r\nContent-Length: " + str(size).encode() + b"\r\n\r\n"
        )
        answer = _read_all(sock)  # the server answers and half-closes before the body
        sock.sendall(b"v" * size)  # old code: the peer had closed, so this reset (EPIPE)
        sock.shutdown(socket.SHUT_WR)
        after = _read_all(sock)
    return answer, after


async def test_an_oversized_body_is_answered_413_and_the_client_can_finish_sending(
    port: int,
) -> None:
    answer, after = await anyio.to_thread.run_sync(_oversized_exchange, port)
    assert answer.startswith(b"HTTP/1.1 413 "), answer[:80]
    assert b"body too large" in answer
    assert after == b""


def _plain_exchange(port: int, body: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=IO_TIMEOUT_S) as sock:
        sock.sendall(
            b"POST /x HTTP/1.1\r\nHost: t\r\nContent-Length: "
            + str(len(body)).encode()
            + b"\r\n\r\n"
            + body
        )
        return _read_all(sock)


async def test_a_body_at_the_limit_is_read_whole(port: int) -> None:
    body = b"b" * MAX_BODY_BYTES
    answer = await anyio.to_thread.run_sync(_plain_exchange, port, body)
    assert answer.startswith(b"HTTP/1.1 200 "), answer[:80]
    assert answer.endswith(b'{"len":%d}' % MAX_BODY_BYTES)


async def test_the_console_keeps_serving_after_a_refused_request(port: int) -> None:
    await anyio.to_thread.run_sync(_oversized_exchange, port)
    answer = await anyio.to_thread.run_sync(_plain_exchange, port, b"{}")
    assert answer.split(b" ", 2)[1] == str(int(HTTPStatus.OK)).encode()
