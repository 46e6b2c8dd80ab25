"""Large response frames on a client connection: a Fetch answer's body is received in
place (the transport's ``recv_into`` into the decoder's buffer), not in 256 KiB chunks then
joined, and the read after it asks only for the next frame's head; other APIs' large
bodies still come as ``bytes``."""

from __future__ import annotations

import os
import socket

import anyio
import pytest

from jetsdk import transport
from jetsdk.codec.fetch_messages import encode_fetch_response_header
from jetsdk.codec.frames import FLAG_RESPONSE, Api, encode_frame
from jetsdk.connection import Connection
from jetsdk.memory import FramePeer, memory_stream_pair
from jetsdk.transport import SocketByteStream

pytestmark = pytest.mark.anyio

FRAMES = 4
BODY_BYTES = 1 << 20


class _CountingSocket(socket.socket):
    """A socket that records the size of every plain ``recv`` and counts ``recv_into``."""

    plain: list[int]
    into: int

    def recv(self, bufsize: int, flags: int = 0) -> bytes:
        data = super().recv(bufsize, flags)
        self.plain.append(len(data))
        return data

    def recv_into(self, buffer: memoryview, nbytes: int = 0, flags: int = 0) -> int:  # type: ignore[override]
        self.into += 1
        return super().recv_into(buffer, nbytes, flags)


def _counting_pair() -> tuple[_CountingSocket, socket.socket]:
    a, b = socket.socketpair()
    counted = _CountingSocket(a.family, a.type, fileno=a.detach())
    counted.plain, counted.into = [], 0
    counted.setblocking(False)
    b.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 8 << 20)
    return counted, b


def _fetch_answer(cid: int, records: bytes) -> bytes:
    head = encode_fetch_response_header(0, 0, 0, 0, len(records))
    return encode_frame(Api.FETCH, cid, head + records, flags=FLAG_RESPONSE)


async def _answer_all(peer: socket.socket, frames: bytes) -> None:
    peer.setblocking(False)
    view = memoryview(frames)
    while view:
        await anyio.wait_writable(peer)
        view = view[peer.send(view) :]


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_large_fetch_answers_are_received_in_place(anyio_backend: str) -> None:
    """Four 1 MiB Fetch answers written at once: each comes whole, as the bytearray it
    was received into; the reads into new ``bytes`` after the first answer's body are of a
    head (HEAD_READ_BYTES). Failed before: every body came as ``bytes`` joined from reads
    of 256 KiB."""
    bodies = [os.urandom(BODY_BYTES) for _ in range(FRAMES)]
    counted, peer = _counting_pair()
    with peer:
        async with Connection(SocketByteStream(counted, label="peer")) as conn:
            pendings = [await conn.send(Api.FETCH, b"ask") for _ in range(FRAMES)]
            ids = [p.correlation_id for p in pendings]
            with anyio.fail_after(20):
                await _answer_all(peer, b"".join(map(_fetch_answer, ids, bodies)))
                got = [await p.wait_buffer(5) for p in pendings]
    assert [type(b) for b in got] == [bytearray] * FRAMES
    assert [bytes(b[30:]) for b in got] == bodies
    assert counted.into >= FRAMES
    assert max(counted.plain[1:]) <= transport.HEAD_READ_BYTES


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_a_large_answer_of_another_api_comes_as_bytes(anyio_backend: str) -> None:
    """Only Fetch, FetchStream and ReplicaFetch answers are handed over as received: a
    1 MiB Metadata answer, received in place too, still reaches ``request`` and
    ``wait_buffer`` as ``bytes``."""
    body = os.urandom(BODY_BYTES)
    counted, peer = _counting_pair()
    with peer:
        async with Connection(SocketByteStream(counted, label="peer")) as conn:
            pending = await conn.send(Api.METADATA, b"ask")
            frame = encode_frame(Api.METADATA, pending.correlation_id, body, flags=FLAG_RESPONSE)
            with anyio.fail_after(20):
                await _answer_all(peer, frame)
                got = await pending.wait_buffer(5)
    assert type(got) is bytes
    assert got == body
    assert counted.into >= 1


async def test_a_large_fetch_answer_over_a_pipe_is_whole() -> None:
    """A stream without ``recv_into`` (the memory pipe; a socket on trio) feeds its reads
    into the body's buffer: the answer comes whole, through ``request_buffer``."""
    records = os.urandom(BODY_BYTES)
    client_end, server_end = memory_stream_pair()
    peer = FramePeer(server_end)
    async with Connection(client_end, label="mem") as conn, anyio.create_task_group() as tg:
        got: list[bytes | bytearray] = []

        async def ask() -> None:
            got.append(await conn.request_buffer(Api.FETCH, b"ask", timeout=10))

        tg.start_soon(ask)
        with anyio.fail_after(20):
            frame = await peer.receive()
            assert frame is not None
            await server_end.write(_fetch_answer(frame.correlation_id, records))
    assert len(got) == 1
    assert bytes(got[0][30:]) == records
