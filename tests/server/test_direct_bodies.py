"""A direct Produce message's record is framed around its headers and value as they lie in
the request (issue 39: a two-part body, not joined): stored byte for byte as before, and
read whole by the key index when a later message of the same batch is a compare-and-set
(``Jet-Expected-Key-Offset``) on its key."""

from __future__ import annotations

import pytest

from jetsdk import Client
from jetsdk.codec.error_codes import AckPolicy, ErrorCode
from jetsdk.codec.messages import ProduceMessage, ProduceRequest
from jetsdk.codec.record import iter_records
from support.jet_dev import JetDev

pytestmark = pytest.mark.anyio

HEADER = "Jet-Expected-Key-Offset"


def cas(key: bytes, value: bytes, expected: int) -> ProduceMessage:
    return ProduceMessage(value=value, key=key, headers=((HEADER, str(expected).encode()),))


async def test_one_request_of_plain_and_compare_and_set_messages(jet_dev: JetDev) -> None:
    big = bytes(range(256)) * 80  # 20 KiB: a value far larger than its record's head
    messages = (
        ProduceMessage(value=b"a1" + big, key=b"a"),  # offset 0
        cas(b"a", b"a2", 0),  # offset 1: sees offset 0 in this batch
        ProduceMessage(value=b"b1" + big, key=b"b", headers=(("h", b"v"),)),  # offset 2
        cas(b"b", b"b2", -1),  # refused: b is at offset 2 (this batch)
        cas(b"a", b"a3", 1),  # offset 3
        ProduceMessage(value=big),  # offset 4, no key
    )
    async with Client(jet_dev.servers) as client:
        await client.create_stream("bodies", compact=True)
        results = await client.produce(ProduceRequest("bodies", 0, AckPolicy.ALL, 5000, messages))
        assert [(r.error_code, r.offset) for r in results] == [
            (ErrorCode.NONE, 0),
            (ErrorCode.NONE, 1),
            (ErrorCode.NONE, 2),
            (ErrorCode.WRONG_EXPECTED_KEY_OFFSET, 2),
            (ErrorCode.NONE, 3),
            (ErrorCode.NONE, 4),
        ]
        _header, data = await client.fetch("bodies", 0, 0, max_bytes=1 << 20, max_wait=1.0)
    records = list(iter_records(data))  # every CRC checked
    assert [(r.offset, r.key, r.value) for r in records] == [
        (0, b"a", b"a1" + big),
        (1, b"a", b"a2"),
        (2, b"b", b"b1" + big),
        (3, b"a", b"a3"),
        (4, None, big),
    ]
    assert dict(records[2].headers) == {"h": b"v"}
