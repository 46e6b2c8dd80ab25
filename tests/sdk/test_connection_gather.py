"""Large request bodies go out after their frame header in one gathered send (issue 39: no
join of header and body), whole and in order, also when the socket takes them in pieces."""

from __future__ import annotations

import random
import socket
from collections.abc import Sequence

import anyio
import pytest

from jetsdk.codec.frames import FRAME_HEADER_SIZE, Api, FrameDecoder
from jetsdk.connection import (
    GATHER_MAX_PARTS,
    GATHER_MIN_BODY_BYTES,
    GATHER_MIN_PART_BYTES,
    Connection,
    RequestBody,
    _frame_rest,
)
from jetsdk.memory import FramePeer
from jetsdk.transport import SocketByteStream

pytestmark = pytest.mark.anyio


def test_the_rest_of_a_frame_is_what_follows_the_bytes_sent() -> None:
    head, body = b"0123456789", bytes(range(256)) * 3
    whole = head + body
    for sent in range(len(whole) + 1):
        rest = _frame_rest((head, body), sent)
        assert b"".join(rest) == whole[sent:]
        assert all(len(part) for part in rest)
    assert _frame_rest((whole,), 0) == [whole]  # nothing sent: the frame itself, no view


class _CountingStream(SocketByteStream):
    """A socket stream that counts its gathered sends and what they carried."""

    gathered: int = 0
    buffers: list[int]

    def write_gathered_now(self, buffers: Sequence[bytes | memoryview]) -> int:
        if not hasattr(self, "buffers"):
            self.buffers = []
        self.gathered += 1
        self.buffers.append(len(buffers))
        assert len(buffers) >= 2  # the frame header, then the body (in its parts)
        assert len(buffers[0]) == FRAME_HEADER_SIZE
        return super().write_gathered_now(buffers)


def _small_send_buffer_pair() -> tuple[_CountingStream, FramePeer]:
    """A counting client end and a frame-reading peer over a socket pair whose 64 KiB send
    buffer splits large sends in pieces."""
    a, b = socket.socketpair()
    for s in (a, b):
        s.setblocking(False)
    a.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 64 * 1024)  # sends split in pieces
    return _CountingStream(a, label="a"), FramePeer(SocketByteStream(b, label="b"))


async def _send_and_receive(
    client_end: _CountingStream, peer: FramePeer, api: Api, bodies: Sequence[RequestBody]
) -> list[bytes]:
    """Send ``bodies`` from one task (frames go in call order) while ``peer`` reads as
    many frames: the bodies it got, in order."""
    got: list[bytes] = []
    async with Connection(client_end) as conn, anyio.create_task_group() as tg:

        async def send_all() -> None:
            for body in bodies:
                await conn.send(api, body)

        tg.start_soon(send_all)
        with anyio.fail_after(30):
            for _ in bodies:
                frame = await peer.receive()
                assert frame is not None
                got.append(bytes(frame.body))
    return got


async def test_large_bodies_are_gathered_and_arrive_whole_in_order(anyio_backend: str) -> None:
    client_end, peer = _small_send_buffer_pair()
    rng = random.Random(39)
    sizes = [GATHER_MIN_BODY_BYTES, 5, GATHER_MIN_BODY_BYTES * 9 + 3, 0, 1 << 20, 100]
    bodies = [rng.randbytes(n) for n in sizes]
    got = await _send_and_receive(client_end, peer, Api.PRODUCE, bodies)
    assert got == bodies
    assert client_end.gathered == sum(n >= GATHER_MIN_BODY_BYTES for n in sizes)


async def test_small_bodies_are_written_as_one_frame() -> None:
    a, b = socket.socketpair()
    for s in (a, b):
        s.setblocking(False)
    client_end = _CountingStream(a, label="a")
    async with Connection(client_end) as conn:
        await conn.send(Api.METADATA, b"small")
        b.setblocking(True)
        b.settimeout(10)
        decoder = FrameDecoder()
        decoder.feed(b.recv(1024))
        frame = decoder.next_frame()
    b.close()
    assert frame is not None
    assert frame.body == b"small"
    assert client_end.gathered == 0


async def test_bodies_in_parts_are_gathered_when_large_and_few_else_joined(
    anyio_backend: str,
) -> None:
    """A body in parts (ProduceMany sections, a Spark sink's message views) goes out as
    header + parts, unjoined, when large and of few, not tiny, parts (a sink's 1 MiB
    request of 16 KiB messages: head + 64 views; joined before, at 64 parts at most); a
    small one, one of many tiny parts, or one of too many parts (a send takes at most
    IOV_MAX buffers) is joined. The peer reads each whole and in order."""
    client_end, peer = _small_send_buffer_pair()
    rng = random.Random(3939)
    large = tuple(rng.randbytes(n) for n in (4, 4, 300_000, 4, 700_000))
    small = (b"ab", b"cd", b"")
    views = (b"head", *(rng.randbytes(16 * 1024) for _ in range(64)))
    tiny = tuple(rng.randbytes(GATHER_MIN_PART_BYTES // 2) for _ in range(200))
    many = tuple(rng.randbytes(GATHER_MIN_BODY_BYTES // 8) for _ in range(GATHER_MAX_PARTS))
    bodies: list[RequestBody] = [large, small, views, tiny, many, large[2]]
    got = await _send_and_receive(client_end, peer, Api.PRODUCE_MANY, bodies)
    assert got == [b"".join(body) if isinstance(body, tuple) else body for body in bodies]
    # The large body and the views in parts: header + their parts; the joined tiny-part
    # and many-part ones and the plain large body: header + body. The small one: one
    # joined frame, not gathered.
    assert client_end.buffers == [1 + len(large), 1 + len(views), 2, 2, 2]


class _RestCountingStream(_CountingStream):
    """A counting stream that also counts the writes of what a first send left: part by
    part (``write``) or gathered (``write_gathered``)."""

    writes: int = 0
    rests_gathered: int = 0

    async def write(self, data: bytes | memoryview) -> None:
        self.writes += 1
        await super().write(data)

    async def write_gathered(self, buffers: Sequence[bytes | memoryview]) -> None:
        self.rests_gathered += 1
        await super().write_gathered(buffers)


async def test_the_rest_of_a_body_in_parts_is_written_gathered(anyio_backend: str) -> None:
    """Issue 39: what the socket did not take of a body in parts (a 1 MiB Produce request
    of 16 KiB values: its head and 64 values, not joined) was written a part at a time,
    a send for each 16 KiB value and each few bytes between them; it goes in gathered
    sends, and the peer reads every body whole and in order."""
    a, b = socket.socketpair()
    for s in (a, b):
        s.setblocking(False)
    a.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 64 * 1024)  # sends split in pieces
    client_end = _RestCountingStream(a, label="a")
    peer = FramePeer(SocketByteStream(b, label="b"))
    rng = random.Random(1639)
    bodies: list[RequestBody] = []
    for _ in range(4):
        parts: list[bytes] = [b"head"]
        for _ in range(64):
            parts += [b"\x00\x00", rng.randbytes(16 * 1024)]
        bodies.append(tuple(parts))
    got = await _send_and_receive(client_end, peer, Api.PRODUCE, bodies)
    assert got == [b"".join(body) for body in bodies]
    assert client_end.rests_gathered >= 1  # the socket took a 1 MiB body in pieces
    assert client_end.writes == 0
