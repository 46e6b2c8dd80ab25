"""Plain messages keep every NATS header line: order, repeats and case as sent (issue 12).

Published with raw ``HPUB`` from a socket (nats-py's client sends headers as a map, so it
cannot repeat a name), including a header-only message and non-UTF-8 value bytes. Before,
the ingest read headers through nats-py's parser into a dict: ``X-Multi: a`` and
``X-Multi: b`` were stored as ``X-Multi: b`` only.
"""

from __future__ import annotations

import anyio
import pytest

from jetserver.server import Server
from support.nats_server import NatsServer
from support.raw_client import RawClient

pytestmark = pytest.mark.anyio

BLOCKS = [
    (b"NATS/1.0\r\nX-Multi: a\r\nX-Multi: b\r\nx-multi: c\r\n\r\n", b"multi"),
    (b"NATS/1.0\r\nEmpty:\r\nRaw: \xff\xfe bytes\r\nSpaced:  two\r\n\r\n", b""),
]
EXPECTED = [
    (("X-Multi", b"a"), ("X-Multi", b"b"), ("x-multi", b"c")),
    (("Empty", b""), ("Raw", b"\xff\xfe bytes"), ("Spaced", b" two")),
]


async def hpub(url: str, subject: str, blocks: list[tuple[bytes, bytes]]) -> None:
    host, port = url.removeprefix("nats://").rsplit(":", 1)
    async with await anyio.connect_tcp(host, int(port)) as sock:
        await sock.receive()  # INFO
        out = [b'CONNECT {"verbose":false,"pedantic":false,"headers":true}\r\n']
        for block, payload in blocks:
            head = f"HPUB {subject} {len(block)} {len(block) + len(payload)}\r\n".encode()
            out.append(head + block + payload + b"\r\n")
        out.append(b"PING\r\n")
        await sock.send(b"".join(out))
        with anyio.fail_after(10):
            got = b""
            while b"PONG" not in got:
                got += await sock.receive()
        assert b"-ERR" not in got, got


async def test_header_lines_are_stored_as_sent(jet: Server, nats_server: NatsServer) -> None:
    assert jet.address is not None
    async with await RawClient.connect(jet.address) as c:
        await c.create_stream(name="hdr", subject="hdr")
        await hpub(nats_server.url, "hdr", BLOCKS)
        records = await c.collect("hdr", 0, 2)
    assert [r.headers for r in records] == EXPECTED
    assert [r.value for r in records] == [b"multi", b""]
