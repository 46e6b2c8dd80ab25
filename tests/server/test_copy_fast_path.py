"""The NATS copies of a lone Produce request (one replica, nothing before it) take their
turn, wait for it and pass it on without a future: at light load every request used to
make one, with its callbacks, on each message's way (``python -m bench cost``). The copies
still reach a plain NATS subscriber in append order, marked as stored. A large value's
copy is written from the request, not from one more copy of it, byte for byte the same.
"""

from __future__ import annotations

import asyncio
import sys

import anyio
import pytest
from nats.aio.client import Client as NatsClient

from jetsdk.codec.envelope import parse_nats_payload
from jetsdk.codec.error_codes import AckPolicy, ErrorCode
from jetsdk.codec.messages import ProduceMessage
from jetsdk.codec.transcode import SPLIT_ENVELOPE_MIN, SPLIT_VALUE_MIN
from jetserver.broker.stored_copy import STORED_HEADER
from jetserver.server import Server
from support.raw_client import RawClient
from support.subscriber import Subscriber

pytestmark = pytest.mark.anyio

BOUND_S = 30.0
_OURS = ("broker/direct_copies.py", "broker/commit.py", "broker/copy_turns.py")


@pytest.mark.parametrize("durability", ["flushed", "written"])
async def test_a_lone_requests_copies_go_without_a_future(
    jet: Server, nc: NatsClient, monkeypatch: pytest.MonkeyPatch, durability: str
) -> None:
    name = f"lone{durability[0]}"
    loop = asyncio.get_running_loop()
    made: list[str] = []
    create_future = loop.create_future

    def counted() -> asyncio.Future[object]:
        code = sys._getframe(1).f_code
        if code.co_filename.endswith(_OURS):
            made.append(code.co_name)
        return create_future()

    with anyio.fail_after(BOUND_S):
        async with await RawClient.connect(jet.address) as c:
            await c.create_stream(name=name, subject=f"{name}.x", durability=durability)
            copies = await Subscriber.of(nc, f"{name}.x")
            monkeypatch.setattr(loop, "create_future", counted)
            for i in range(5):
                results = await c.produce(
                    name, 0, [ProduceMessage(b"v%d" % i)], ack_policy=AckPolicy.LEADER
                )
                assert [(r.error_code, r.offset) for r in results] == [(ErrorCode.NONE, i)]
                seen = await copies.wait_for(i + 1)
            monkeypatch.undo()
    assert made == []
    assert [m.data[-2:] for m in seen] == [b"v%d" % i for i in range(5)]
    assert all(m.headers is not None and m.headers[STORED_HEADER] == f"{name} 0" for m in seen)


async def test_large_values_are_copied_to_nats_from_the_request_byte_for_byte(
    jet: Server, nc: NatsClient
) -> None:
    """A value of SPLIT_ENVELOPE_MIN bytes or more goes to NATS as its envelope's head and
    a view of the request (not joined into one more copy): the subscriber gets the same
    envelope, its CRC checking, and the partition stores each value once."""
    values = [b"s" * 100, b"k" * SPLIT_ENVELOPE_MIN, b"m" * SPLIT_VALUE_MIN, b"l" * (512 * 1024)]
    with anyio.fail_after(BOUND_S):
        async with await RawClient.connect(jet.address) as c:
            await c.create_stream(name="big", subject="big.x")
            copies = await Subscriber.of(nc, "big.x")
            messages = [ProduceMessage(v, key=b"k") for v in values]
            results = await c.produce("big", 0, messages, ack_policy=AckPolicy.ALL)
            assert [(r.error_code, r.offset) for r in results] == [
                (ErrorCode.NONE, i) for i in range(len(values))
            ]
            seen = await copies.wait_for(len(values))
            stored = await c.collect("big", 0, len(values))
    envelopes = [parse_nats_payload(m.data) for m in seen]
    assert [e.value if e is not None else None for e in envelopes] == values
    assert all(e is not None and e.key == b"k" for e in envelopes)
    assert [r.value for r in stored] == values


@pytest.mark.parametrize("sizes", [[900 * 1024], [SPLIT_ENVELOPE_MIN] * 8])
async def test_a_large_values_bytes_are_crc_checked_once(
    jet: Server, nc: NatsClient, monkeypatch: pytest.MonkeyPatch, sizes: list[int]
) -> None:
    """Issue 39: the server ran CRC-32 over a large value twice, once for its NATS copy's
    envelope and once for its record. The value's CRC is taken once and both follow from
    it (crc32_combine): fewer than 1.5 times the values' bytes are scanned for a 900 KiB
    value and for a request of 16 KiB ones (SPLIT_ENVELOPE_MIN; they were scanned twice
    below 64 KiB), and both CRCs still check, the subscriber's envelopes and the stored
    records."""
    import os

    from jetsdk.codec import transcode
    from jetserver.storage import framing

    scanned = [0]
    for module in (transcode, framing):
        real = module._crc32

        def counting(data: bytes | bytearray | memoryview, start: int, real=real) -> int:
            scanned[0] += len(data)
            return real(data, start)

        monkeypatch.setattr(module, "_crc32", counting)
    values = [os.urandom(size) for size in sizes]
    with anyio.fail_after(BOUND_S):
        async with await RawClient.connect(jet.address) as c:
            await c.create_stream(name="once", subject="once.x")
            copies = await Subscriber.of(nc, "once.x")
            scanned[0] = 0
            results = await c.produce(
                "once", 0, [ProduceMessage(v, key=b"k") for v in values], ack_policy=AckPolicy.ALL
            )
            assert [(r.error_code, r.offset) for r in results] == [
                (ErrorCode.NONE, i) for i in range(len(values))
            ]
            seen = await copies.wait_for(len(values))
            used = scanned[0]
            stored = await c.collect("once", 0, len(values))
    assert used < 1.5 * sum(sizes), used
    envelopes = [parse_nats_payload(m.data) for m in seen]  # checks the envelopes' CRCs
    assert [e.value if e is not None else None for e in envelopes] == values
    assert [r.value for r in stored] == values
