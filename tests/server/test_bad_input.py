"""Bad clients over raw sockets: garbage, huge length prefix, truncated frame then stall,
undecodable bodies. Each gets an error frame and is disconnected; other clients keep working.
"""

from __future__ import annotations

import struct
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import pytest

from jetsdk.codec.error_codes import ErrorCode
from jetsdk.codec.frames import Api, Frame, encode_frame
from jetsdk.codec.messages import decode_error
from jetserver.server import Server
from support.jet_server import running_server
from support.nats_server import NatsServer
from support.raw_client import RawClient

pytestmark = pytest.mark.anyio

READ_TIMEOUT_S = 0.5


@pytest.fixture
async def strict(nats_server: NatsServer, tmp_path: Path) -> AsyncIterator[Server]:
    """A server with short read and idle timeouts."""
    async with running_server(
        nats_server.url,
        tmp_path / "data",
        limits__read_timeout_s=READ_TIMEOUT_S,
        limits__idle_timeout_s=2.0,
        limits__max_frame_bytes=1024 * 1024,
        limits__max_message_bytes=1000,
    ) as server:
        yield server


def error_code_of(frames: list[Frame]) -> int:
    assert len(frames) == 1, frames
    frame = frames[0]
    assert frame.is_error
    return decode_error(frame.body).code


async def test_huge_length_prefix(strict: Server) -> None:
    async with await RawClient.connect(strict.address) as bad:
        await bad.send_raw(struct.pack(">I", 0xFFFFFFF0) + b"\x00" * 6)
        frames = await bad.wait_closed(5)
    assert error_code_of(frames) == ErrorCode.FRAME_TOO_LARGE
    assert frames[0].correlation_id == 0


async def test_garbage_bytes(strict: Server) -> None:
    async with await RawClient.connect(strict.address) as bad:
        await bad.send_raw(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        frames = await bad.wait_closed(5)
    assert error_code_of(frames) in (ErrorCode.FRAME_TOO_LARGE, ErrorCode.MALFORMED_FRAME)


async def test_length_below_minimum(strict: Server) -> None:
    async with await RawClient.connect(strict.address) as bad:
        await bad.send_raw(struct.pack(">I", 3) + b"abc")
        frames = await bad.wait_closed(5)
    assert error_code_of(frames) == ErrorCode.MALFORMED_FRAME


async def test_undecodable_body_closes_the_connection(strict: Server) -> None:
    async with await RawClient.connect(strict.address) as bad:
        await bad.send_raw(encode_frame(Api.PRODUCE, 7, b"\x00\x05ab"))
        frames = await bad.wait_closed(5)
    assert error_code_of(frames) == ErrorCode.MALFORMED_FRAME
    assert frames[0].correlation_id == 7


async def test_truncated_frame_then_stall_times_out_while_others_work(strict: Server) -> None:
    async with (
        await RawClient.connect(strict.address) as bad,
        await RawClient.connect(strict.address) as good,
    ):
        frame = encode_frame(Api.HELLO, 1, b'{"protocol": 1}')
        await bad.send_raw(frame[:7])  # header cut short, then nothing
        # The good client is served while the bad one stalls.
        assert (await good.hello())["protocol"] == 1
        with anyio.fail_after(READ_TIMEOUT_S * 10):
            frames = await bad.wait_closed()
        assert error_code_of(frames) == ErrorCode.MALFORMED_FRAME
        assert (await good.hello())["protocol"] == 1


async def test_idle_connection_is_closed(strict: Server) -> None:
    async with await RawClient.connect(strict.address) as idle:
        await idle.hello()
        frames = await idle.wait_closed(10)  # idle_timeout_s=2
    assert frames == []


async def test_many_bad_clients_do_not_disturb_a_good_one(strict: Server) -> None:
    async with await RawClient.connect(strict.address) as good:
        await good.create_stream(name="s", subject="s")
        with anyio.fail_after(20):
            async with anyio.create_task_group() as tg:

                async def misbehave(i: int) -> None:
                    async with await RawClient.connect(strict.address or "") as bad:
                        payloads = [
                            b"\xff" * 64,
                            struct.pack(">I", 2**31) + b"x",
                            encode_frame(Api.FETCH, i, b"\x00"),
                        ]
                        await bad.send_raw(payloads[i % len(payloads)])
                        await bad.wait_closed()

                for i in range(30):
                    tg.start_soon(misbehave, i)
                for _ in range(20):
                    assert (await good.hello())["server_id"] == "s1"
        assert (await good.describe("s"))["name"] == "s"


async def test_pipelined_requests_complete_in_any_order(strict: Server) -> None:
    async with await RawClient.connect(strict.address) as c:
        frames = await c.pipeline([(Api.HELLO, b"{}")] * 200)
    assert len(frames) == 200
    assert all(not f.is_error for f in frames.values())


async def test_connection_limit(nats_server: NatsServer, tmp_path: Path) -> None:
    async with (
        running_server(nats_server.url, tmp_path / "data", limits__max_connections=2) as server,
        await RawClient.connect(server.address) as a,
        await RawClient.connect(server.address) as b,
    ):
        await a.hello()
        await b.hello()
        async with await RawClient.connect(server.address) as c:
            frames = await c.wait_closed(5)
        assert error_code_of(frames) == ErrorCode.TOO_MANY_REQUESTS
        assert (await a.hello())["protocol"] == 1
