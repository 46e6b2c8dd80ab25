"""Jet-Expected-Offset and Nats-Msg-Id on the Produce path, as on NATS ingest.

A real nats-server and a real jet server; the Produce request reaches the partition either
directly (the default) or through NATS (``[ingest] produce_direct = false``): both honour
the controls the same way, and the stored record keeps every header but
Jet-Expected-Offset.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from jetsdk.codec.error_codes import AckPolicy, ErrorCode
from jetsdk.codec.messages import ProduceMessage
from support.jet_server import running_server
from support.nats_server import NatsServer
from support.raw_client import RawClient

pytestmark = pytest.mark.anyio


def _msg(value: bytes, *headers: tuple[str, bytes]) -> ProduceMessage:
    return ProduceMessage(value, headers=tuple(headers))


@pytest.mark.parametrize("direct", [True, False], ids=["direct", "through-nats"])
async def test_produce_honours_header_controls(
    nats_server: NatsServer, tmp_path: Path, direct: bool
) -> None:
    async with (
        running_server(nats_server.url, tmp_path / "data", ingest__produce_direct=direct) as server,
        await RawClient.connect(server.address) as c,
    ):
        await c.create_stream(name="ctl", subject="ctl.x")
        first = await c.produce("ctl", 0, [_msg(b"a"), _msg(b"b")], ack_policy=AckPolicy.ALL)
        assert [r.offset for r in first] == [0, 1]

        wrong = await c.produce("ctl", 0, [_msg(b"w", ("Jet-Expected-Offset", b"999"))])
        assert wrong[0].error_code == ErrorCode.WRONG_EXPECTED_OFFSET
        assert wrong[0].offset == -1

        bad = await c.produce("ctl", 0, [_msg(b"w", ("jet-expected-offset", b"x"))])
        assert bad[0].error_code == ErrorCode.INVALID_ARGUMENT

        # In one request: the expected offset counts the messages before it.
        right = await c.produce(
            "ctl",
            0,
            [
                _msg(b"c", ("Jet-Expected-Offset", b"2"), ("x-keep", b"1")),
                _msg(b"d", ("JET-EXPECTED-OFFSET", b"3")),
                _msg(b"e", ("Jet-Expected-Offset", b"3")),
            ],
        )
        assert [(r.error_code, r.offset) for r in right] == [
            (ErrorCode.NONE, 2),
            (ErrorCode.NONE, 3),
            (ErrorCode.WRONG_EXPECTED_OFFSET, -1),
        ]

        once = await c.produce("ctl", 0, [_msg(b"m", ("Nats-Msg-Id", b"abc"))])
        assert (once[0].error_code, once[0].offset) == (ErrorCode.NONE, 4)
        again = await c.produce(
            "ctl", 0, [_msg(b"m2", ("nats-msg-id", b"abc")), _msg(b"n", ("Nats-Msg-Id", b"n1"))]
        )
        assert [(r.error_code, r.offset) for r in again] == [
            (ErrorCode.DUPLICATE_SEQUENCE, 4),
            (ErrorCode.NONE, 5),
        ]
        assert again[0].timestamp == once[0].timestamp

        records = await c.collect("ctl", 0, 6)
    assert [r.value for r in records] == [b"a", b"b", b"c", b"d", b"m", b"n"]
    assert records[2].headers == (("x-keep", b"1"),)
    assert records[3].headers == ()
    assert records[4].headers == (("Nats-Msg-Id", b"abc"),)
