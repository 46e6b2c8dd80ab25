"""Large request frames back to back on one connection (AcceptedConnection._read_loop):
each body is received in place, and the read after one asks only for the next frame's
head (HEAD_READ_BYTES), not for RECV_BYTES that were then copied into the next body's
buffer (the first 256 KiB of every 1 MiB Produce request)."""

from __future__ import annotations

import os
import socket

import anyio
import pytest

from jetsdk.codec.frames import Api, Frame, encode_frame
from jetserver.config.server import LimitsConfig
from jetserver.protocol import connection
from jetserver.protocol.connection import AcceptedConnection, Reply
from jetserver.protocol.socket_io import RECV_BYTES, SocketIO

pytestmark = pytest.mark.anyio

FRAMES = 4
BODY_BYTES = 1 << 20


async def test_after_a_body_read_in_place_the_next_read_takes_a_head(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Four 1 MiB frames sent at once: every one arrives whole and in order; no read into
    a new ``bytes`` after the first frame's is over HEAD_READ_BYTES. Failed before: the
    reads after a body asked for RECV_BYTES and got them (the socket held them)."""
    plain: list[int] = []
    real = SocketIO.recv_within

    async def recv_within(
        self: SocketIO, seconds: float, max_bytes: int = RECV_BYTES
    ) -> bytes | None:
        data = await real(self, seconds, max_bytes)
        if data:
            plain.append(len(data))
        return data

    monkeypatch.setattr(SocketIO, "recv_within", recv_within)
    bodies = [os.urandom(BODY_BYTES) for _ in range(FRAMES)]
    got: list[Frame] = []
    all_in = anyio.Event()

    async def handler(frame: Frame) -> Reply:
        got.append(frame)
        if len(got) == FRAMES:
            all_in.set()
        return Reply(encode_frame(frame.api, frame.correlation_id, b"", flags=1))

    with socket.create_server(("127.0.0.1", 0)) as server:
        client = socket.create_connection(server.getsockname())
        accepted, _ = server.accept()
    with client:
        client.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 8 << 20)
        conn = AcceptedConnection(SocketIO(accepted), handler, LimitsConfig())
        async with anyio.create_task_group() as tg:
            tg.start_soon(conn.serve)
            data = b"".join(encode_frame(Api.PRODUCE, i + 1, b) for i, b in enumerate(bodies))
            client.setblocking(False)
            view = memoryview(data)
            with anyio.fail_after(20):
                while view:
                    await anyio.wait_writable(client)
                    view = view[client.send(view) :]
                await all_in.wait()
            tg.cancel_scope.cancel()
    assert [(f.correlation_id, bytes(f.body)) for f in got] == [
        (i + 1, b) for i, b in enumerate(bodies)
    ]
    assert len(plain) >= FRAMES  # one read per frame at least: its head
    assert max(plain[1:]) <= connection.HEAD_READ_BYTES
