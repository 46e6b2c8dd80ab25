"""A Fetch answer whose records are what the last small append wrote goes out with its
head in one ``send``: no ``sendfile`` (AcceptedConnection._send_at_once)."""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from jetsdk.codec.frames import Api, Frame, encode_frame
from jetsdk.codec.record import encode_body, iter_records
from jetserver.config.server import LimitsConfig
from jetserver.protocol import socket_io
from jetserver.protocol.connection import AcceptedConnection, Reply
from jetserver.protocol.socket_io import SocketIO
from jetserver.storage import Log, LogConfig
from jetserver.storage.read_slices import ReadSlices

pytestmark = pytest.mark.anyio

HEAD = b"answer-head:"


def bodies(n: int, *, start: int = 0) -> list[bytes]:
    return [encode_body(b"v%d" % i) for i in range(start, start + n)]


async def _answer(log: Log, offset: int, monkeypatch: pytest.MonkeyPatch) -> tuple[bytes, int, int]:
    """Serve one request on a loopback connection whose answer is ``HEAD`` and the
    records from ``offset``: (the bytes the client got, sends, sendfiles)."""
    sends: list[int] = []
    sendfiles: list[int] = []
    real_send, real_sendfile = SocketIO.send_now, os.sendfile

    def send_now(self: SocketIO, data: bytes | memoryview, *, more: bool = False) -> int:
        sends.append(len(data))
        return real_send(self, data, more=more)

    def sendfile(out_fd: int, in_fd: int, offset: int | None, count: int) -> int:
        sendfiles.append(count)
        return real_sendfile(out_fd, in_fd, offset, count)

    monkeypatch.setattr(SocketIO, "send_now", send_now)
    monkeypatch.setattr(socket_io.os, "sendfile", sendfile)

    async def handler(_frame: Frame) -> Reply:
        return Reply(HEAD, records=ReadSlices((log.read(offset, 1 << 20),)))

    with socket.create_server(("127.0.0.1", 0)) as server:
        client = socket.create_connection(server.getsockname())
        accepted, _ = server.accept()
    with log.read(offset, 1 << 20) as records:
        expected = len(HEAD) + records.length
    got = b""
    with client:
        conn = AcceptedConnection(SocketIO(accepted), handler, LimitsConfig())
        async with anyio.create_task_group() as tg:
            tg.start_soon(conn.serve)
            client.sendall(encode_frame(Api.FETCH, 7, b""))
            client.setblocking(False)
            with anyio.fail_after(10):
                while len(got) < expected:
                    await anyio.wait_readable(client)
                    got += client.recv(1 << 16)
            tg.cancel_scope.cancel()
    return got, len(sends), len(sendfiles)


@pytest.fixture
def log(tmp_path: Path) -> Iterator[Log]:
    """Records 0-2, then 3-4 from the last (small) append; all committed."""
    with Log.open(tmp_path / "p", LogConfig(index_interval_bytes=1 << 20)) as log:
        log.append(bodies(3), 1, 0)
        log.append(bodies(2, start=3), 1, 0)
        log.set_high_watermark(5)
        yield log


async def test_a_tailing_answer_goes_in_one_send_without_sendfile(
    log: Log, monkeypatch: pytest.MonkeyPatch
) -> None:
    got, sends, sendfiles = await _answer(log, 3, monkeypatch)
    assert got.startswith(HEAD)
    assert [r.offset for r in iter_records(got[len(HEAD) :], verify=True)] == [3, 4]
    assert (sends, sendfiles) == (1, 0)


async def test_an_answer_of_older_records_is_sent_from_the_file(
    log: Log, monkeypatch: pytest.MonkeyPatch
) -> None:
    got, sends, sendfiles = await _answer(log, 0, monkeypatch)
    assert [r.offset for r in iter_records(got[len(HEAD) :], verify=True)] == [0, 1, 2, 3, 4]
    assert (sends, sendfiles) == (1, 1)
