"""Plain messages keep every NATS header line: order, repeats and case as sent (issue 12).

Published with raw ``HPUB`` from a socket (nats-py's client sends headers as a map, so it
cannot repeat a name), including a header-only message and non-UTF-8 value bytes. Before,
the ingest read headers through nats-py's parser into a dict: ``X-Multi: a`` and
``X-Multi: b`` were stored as ``X-Multi: b`` only.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest
from nats.aio.client import Client as NatsClient

from jetsdk.codec.error_codes import ErrorCode
from jetserver.server import Server
from support.jet_server import start_server_process, stopping
from support.nats_server import NatsServer
from support.raw_client import RawClient
from support.raw_nats import hpub, send_frames

pytestmark = pytest.mark.anyio

BLOCKS = [
    (b"NATS/1.0\r\nX-Multi: a\r\nX-Multi: b\r\nx-multi: c\r\n\r\n", b"multi"),
    (b"NATS/1.0\r\nEmpty:\r\nRaw: \xff\xfe bytes\r\nSpaced:  two\r\n\r\n", b""),
]
EXPECTED = [
    (("X-Multi", b"a"), ("X-Multi", b"b"), ("x-multi", b"c")),
    (("Empty", b""), ("Raw", b"\xff\xfe bytes"), ("Spaced", b" two")),
]


async def hpub_all(url: str, subject: str, blocks: list[tuple[bytes, bytes]]) -> None:
    await send_frames(url, [hpub(subject, block, payload) for block, payload in blocks])


async def test_header_lines_are_stored_as_sent(jet: Server, nats_server: NatsServer) -> None:
    async with await RawClient.connect(jet.address) as c:
        await c.create_stream(name="hdr", subject="hdr")
        await hpub_all(nats_server.url, "hdr", BLOCKS)
        records = await c.collect("hdr", 0, 2)
    assert [r.headers for r in records] == EXPECTED
    assert [r.value for r in records] == [b"multi", b""]


async def test_header_controls_of_plain_requests(jet: Server, nc: NatsClient) -> None:
    async with await RawClient.connect(jet.address) as c:
        await c.create_stream(name="ctl", subject="ctl")

        async def request(payload: bytes, **headers: str) -> dict[str, Any]:
            reply = await nc.request("ctl", payload, timeout=10, headers=headers)
            answer: dict[str, Any] = orjson.loads(reply.data)
            return answer

        first = await request(b"keyed", **{"Jet-Key": "user-1", "jet-ack": "all", "X-App": "1"})
        assert first == {"stream": "ctl", "partition": 0, "offset": 0}
        described = await c.describe("ctl")
        assert described["partitions"][0]["hw"] >= 1  # ALL: committed when acked
        second = await request(b"next", **{"Jet-Expected-Offset": "1"})
        assert second["offset"] == 1
        wrong = await request(b"stale", **{"Jet-Expected-Offset": "1"})
        assert wrong["error"]["name"] == "WRONG_EXPECTED_OFFSET"
        assert wrong["error"]["code"] == ErrorCode.WRONG_EXPECTED_OFFSET
        assert "next offset is 2" in wrong["error"]["description"]
        bad = await request(b"bad", **{"Jet-Ack": "maybe"})
        assert bad["error"]["name"] == "INVALID_ARGUMENT"
        assert "Jet-Ack" in bad["error"]["description"]
        # Neither refused message was stored: the next one gets offset 2.
        assert (await request(b"last"))["offset"] == 2
        records = await c.collect("ctl", 0, 3)
    assert [(r.offset, r.key, r.value) for r in records] == [
        (0, b"user-1", b"keyed"),
        (1, None, b"next"),
        (2, None, b"last"),
    ]
    assert records[0].headers == (("X-App", b"1"),)  # the controls are not stored


async def test_nats_msg_id_deduplicates_within_the_window_and_across_a_restart(
    nats_server: NatsServer, nc: NatsClient, tmp_path: Path
) -> None:
    with stopping(
        start_server_process(nats_server.url, tmp_path / "data", "--log-level", "INFO")
    ) as proc:
        async with await RawClient.connect(proc.address) as c:
            await c.create_stream(name="ids", subject="ids")

        async def request(payload: bytes, msg_id: str) -> dict[str, Any]:
            reply = await nc.request("ids", payload, timeout=10, headers={"Nats-Msg-Id": msg_id})
            answer: dict[str, Any] = orjson.loads(reply.data)
            return answer

        assert await request(b"one", "order-1") == {"stream": "ids", "partition": 0, "offset": 0}
        assert await request(b"two", "order-2") == {"stream": "ids", "partition": 0, "offset": 1}
        again = await request(b"one, sent again", "order-1")
        assert again == {"stream": "ids", "partition": 0, "offset": 0, "duplicate": True}
    # A new leadership (here: the same server started again) rebuilds the ids from its log.
    with stopping(
        start_server_process(nats_server.url, tmp_path / "data", "--log-level", "INFO")
    ) as proc:
        async with await RawClient.connect(proc.address) as c:
            again = await request(b"two, after a restart", "order-2")
            assert again == {"stream": "ids", "partition": 0, "offset": 1, "duplicate": True}
            assert (await request(b"three", "order-3"))["offset"] == 2
            records = await c.collect("ids", 0, 3)
    assert [r.value for r in records] == [b"one", b"two", b"three"]
    assert records[0].headers == (("Nats-Msg-Id", b"order-1"),)  # kept: the ids survive
