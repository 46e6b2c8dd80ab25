"""A malformed NATS message is stored alone and stops nothing (issue 31, case 1).

A hostile client publishes, with raw ``HPUB`` from a socket, messages whose header block
is broken (``NATS/1.0`` without its CRLF, one byte ``N``, no ``NATS/1.0`` line at all)
to one stream's subject, while a well-behaved client sends requests to another stream.
Before, nats-py's ``_process_headers`` raised ``IndexError`` on the first one: the
server's ingest read loop stopped until the ping timeout reconnected it about 8 s later,
and what was published in that window was lost.
"""

from __future__ import annotations

import time

import orjson
import pytest
from nats.aio.client import Client as NatsClient

from jetserver.server import Server
from support.nats_server import NatsServer
from support.raw_client import RawClient
from support.raw_nats import hpub, pub, send_frames

pytestmark = pytest.mark.anyio

MALFORMED = [b"NATS/1.0", b"N", b"X-Id: 1\r\n\r\n", b"NATS/1.0 \xff\r\n\r\n", b"NATS/1.0\r\n"]
"""Odd header blocks: nats-py's ``_process_headers`` raised IndexError on the first two and
UnicodeDecodeError on the fourth (a well-formed block whose status is not a number); all
but the fourth are malformed (spec/envelope.md). None has a header line to store."""
GOOD_BLOCK = b"NATS/1.0\r\nX-After: 1\r\n\r\n"
REQUESTS = 40
MAX_ANSWER_S = 2.0
"""A request's answer within this (the stall was about 8 s; generous for a loaded CI)."""


async def send_hostile(url: str, subject: str, payloads: list[bytes]) -> None:
    """Each malformed block (then a well-formed message) per payload, one raw connection."""
    frames: list[bytes] = []
    for payload in payloads:
        frames.extend(hpub(subject, block, payload) for block in MALFORMED)
        frames.append(hpub(subject, GOOD_BLOCK, payload))
        frames.append(pub(subject, payload))
    await send_frames(url, frames)


async def test_malformed_header_blocks_stop_nothing(
    jet: Server, nats_server: NatsServer, nc: NatsClient
) -> None:
    async with await RawClient.connect(jet.address) as c:
        await c.create_stream(name="bad", subject="bad")
        await c.create_stream(name="good", subject="good")
        # The well-behaved client works before the hostile one starts.
        first = orjson.loads((await nc.request("good", b"g-first", timeout=10)).data)
        assert first["offset"] == 0

        await send_hostile(nats_server.url, "bad", [b"one", b"two"])
        worst = 0.0
        answered = 0
        for i in range(REQUESTS):
            started = time.monotonic()
            reply = await nc.request("good", b"g%d" % i, timeout=10)
            worst = max(worst, time.monotonic() - started)
            assert orjson.loads(reply.data)["offset"] == i + 1
            answered += 1
        assert answered == REQUESTS
        assert worst < MAX_ANSWER_S, f"a request waited {worst:.2f} s"

        good = await c.collect("good", 0, REQUESTS + 1)
        assert [r.value for r in good] == [b"g-first"] + [b"g%d" % i for i in range(REQUESTS)]
        # Each malformed message is stored alone, as a plain message without headers;
        # the well-formed ones after it are stored as usual.
        per_payload = len(MALFORMED) + 2
        bad = await c.collect("bad", 0, 2 * per_payload)
    assert [r.value for r in bad] == [b"one"] * per_payload + [b"two"] * per_payload
    # Counted (jet_nats_malformed_headers_total): all but the well-formed odd status block.
    assert jet.link.malformed_headers == 2 * (len(MALFORMED) - 1)
    assert jet.link.handler_errors == 0
    for start in (0, per_payload):
        group = bad[start : start + per_payload]
        assert [r.headers for r in group] == [()] * len(MALFORMED) + [(("X-After", b"1"),), ()]
