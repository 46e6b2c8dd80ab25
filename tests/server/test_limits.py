"""Resource limits: a slowloris and a flood from one client do not starve a normal client;
in-flight requests per connection are capped (reading stops: backpressure, not buffering);
Fetch ``max_bytes`` is clamped to ``limits.max_fetch_bytes``.

Every assertion is on success within a generous bound, never on a timing.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import anyio.lowlevel
import pytest

from jetsdk.codec.error_codes import AckPolicy, ErrorCode
from jetsdk.codec.fetch_messages import FetchRequest, encode_fetch_request
from jetsdk.codec.frames import Api, encode_frame
from jetsdk.codec.messages import ProduceMessage, decode_error
from jetserver.config.server import (
    DEFAULT_IDLE_TIMEOUT_S,
    DEFAULT_MAX_CONNECTIONS,
    DEFAULT_MAX_FETCH_BYTES,
    DEFAULT_MAX_INFLIGHT_PER_CONNECTION,
    DEFAULT_READ_TIMEOUT_S,
    LimitsConfig,
)
from jetserver.server import Server
from support.jet_server import running_server
from support.nats_server import NatsServer
from support.raw_client import ConnectionClosed, RawClient

pytestmark = pytest.mark.anyio

MAX_INFLIGHT = 8
READ_TIMEOUT_S = 1.0
WRITE_TIMEOUT_S = 2.0
SLOW_CLIENTS = 40
FLOOD_REQUESTS = 3000
LONG_POLL_MS = 20
NORMAL_ROUNDS = 10
BOUND_S = 30.0
"""Generous bound on everything a normal client does while the bad ones misbehave."""


@pytest.fixture
async def limited(nats_server: NatsServer, tmp_path: Path) -> AsyncIterator[Server]:
    """A server with a small in-flight cap and short read/write timeouts."""
    async with running_server(
        nats_server.url,
        tmp_path / "data",
        limits__max_inflight_per_connection=MAX_INFLIGHT,
        limits__read_timeout_s=READ_TIMEOUT_S,
        limits__write_timeout_s=WRITE_TIMEOUT_S,
        limits__max_connections=SLOW_CLIENTS + 10,
        limits__max_fetch_bytes=1000,
        logging__level="INFO",
    ) as server:
        yield server


async def normal_client_works(address: str, rounds: int = NORMAL_ROUNDS) -> None:
    """Produce (ack ALL) then fetch back, ``rounds`` times, each within BOUND_S."""
    async with await RawClient.connect(address) as good:
        for i in range(rounds):
            with anyio.fail_after(BOUND_S):
                results = await good.produce(
                    "s", 0, [ProduceMessage(b"good-%d" % i)], ack_policy=AckPolicy.ALL
                )
                assert results[0].error_code == ErrorCode.NONE
                _header, records = await good.fetch("s", 0, offset=results[0].offset)
                assert records[0].value == b"good-%d" % i


def test_limits_have_named_defaults() -> None:
    limits = LimitsConfig()
    assert limits.max_connections == DEFAULT_MAX_CONNECTIONS
    assert limits.max_inflight_per_connection == DEFAULT_MAX_INFLIGHT_PER_CONNECTION
    assert limits.max_fetch_bytes == DEFAULT_MAX_FETCH_BYTES
    assert limits.idle_timeout_s == DEFAULT_IDLE_TIMEOUT_S
    assert limits.read_timeout_s == DEFAULT_READ_TIMEOUT_S


async def test_slowloris_does_not_starve_a_normal_client(limited: Server) -> None:
    """Many connections trickle a frame one byte at a time: each is closed with
    MALFORMED_FRAME once ``read_timeout_s`` passes without a whole frame; meanwhile a
    normal client produces and fetches."""
    address = limited.address or ""
    async with await RawClient.connect(address) as admin:
        await admin.create_stream(name="s", subject="s")
    frame = encode_frame(Api.HELLO, 1, b'{"protocol": 1, "client": "slow"}' + b" " * 200)
    closed_with: list[int] = []

    async def trickle() -> None:
        async with await RawClient.connect(address) as slow:
            answered = anyio.Event()

            async def read() -> None:
                # Always reading, so the error frame is taken before a later trickled byte
                # could make the closed socket answer with a reset (which drops it).
                try:
                    frame = await slow.recv_frame(BOUND_S * 2)
                    closed_with.append(decode_error(frame.body).code)
                except (ConnectionClosed, TimeoutError):
                    pass
                answered.set()

            async with anyio.create_task_group() as tg:
                tg.start_soon(read)
                for i in range(len(frame) - 1):  # never the last byte
                    with anyio.move_on_after(0.1):
                        await answered.wait()
                    if answered.is_set():
                        break
                    try:
                        await slow.send_raw(frame[i : i + 1])
                    except (anyio.BrokenResourceError, OSError):
                        break

    with anyio.fail_after(BOUND_S * 3):
        async with anyio.create_task_group() as tg:
            for _ in range(SLOW_CLIENTS):
                tg.start_soon(trickle)
            await normal_client_works(address)
    assert len(closed_with) == SLOW_CLIENTS
    assert set(closed_with) == {ErrorCode.MALFORMED_FRAME}


async def test_pipelined_flood_is_capped_and_does_not_starve(limited: Server) -> None:
    """One client pipelines thousands of requests and reads the answers; the server never
    runs more than ``max_inflight_per_connection`` of them at once and a normal client is
    served meanwhile."""
    address = limited.address or ""
    async with await RawClient.connect(address) as admin:
        await admin.create_stream(name="s", subject="s")
        await admin.create_stream(name="idle", subject="idle")
    peak = 0
    done = anyio.Event()

    async def sample() -> None:
        nonlocal peak
        while not done.is_set():
            peak = max(peak, limited._inflight)  # white-box check of the cap
            await anyio.lowlevel.checkpoint()

    async def flood() -> None:
        # Every 5th request is a long poll on a stream nobody writes to (parked
        # LONG_POLL_MS), so that many requests of the connection are in flight at once.
        long_poll = encode_fetch_request(FetchRequest("idle", 0, 0, 1 << 20, LONG_POLL_MS))
        fetch = encode_fetch_request(FetchRequest("s", 0, 0, 1 << 20, 0))
        kinds = [(Api.FETCH, long_poll), (Api.FETCH, fetch), (Api.FETCH, fetch)]
        kinds += [(Api.METADATA, b"{}"), (Api.HELLO, b"{}")]
        requests = [kinds[i % len(kinds)] for i in range(FLOOD_REQUESTS)]
        async with await RawClient.connect(address) as flooder:
            frames = await flooder.pipeline(requests, timeout_s=BOUND_S * 2)
        assert len(frames) == FLOOD_REQUESTS
        assert not any(f.is_error for f in frames.values())

    with anyio.fail_after(BOUND_S * 3):
        async with anyio.create_task_group() as outer:
            outer.start_soon(sample)
            async with anyio.create_task_group() as tg:
                tg.start_soon(flood)
                await normal_client_works(address)
            done.set()
    # The flood's connection (capped) plus the normal client's (one request at a time).
    print(f"peak in-flight requests: {peak}")
    assert MAX_INFLIGHT // 2 <= peak <= MAX_INFLIGHT + 1


async def test_flood_that_never_reads_is_backpressured_then_closed(limited: Server) -> None:
    """A client pipelines requests and never reads: the server stops reading its socket once
    ``max_inflight_per_connection`` requests wait on their writes (nothing is buffered
    beyond that), the client's sends block, and after ``write_timeout_s`` the connection is
    closed; a normal client is served throughout."""
    address = limited.address or ""
    async with await RawClient.connect(address) as admin:
        await admin.create_stream(name="s", subject="s")
        for _ in range(5):
            await admin.produce("s", 0, [ProduceMessage(b"x" * 900)], ack_policy=AckPolicy.ALL)
    body = encode_fetch_request(FetchRequest("s", 0, 0, 1 << 20, 0))
    chunk = b"".join(encode_frame(Api.FETCH, i + 1, body) for i in range(500))
    sent_chunks = 0
    async with await RawClient.connect(address) as flooder:
        with anyio.fail_after(BOUND_S * 3):
            async with anyio.create_task_group() as tg:

                async def flood() -> None:
                    nonlocal sent_chunks
                    with anyio.move_on_after(BOUND_S):
                        for _ in range(2000):  # ~50 MB of requests if nothing pushed back
                            try:
                                await flooder.send_raw(chunk)
                            except (anyio.BrokenResourceError, OSError):
                                return
                            sent_chunks += 1

                tg.start_soon(flood)
                await normal_client_works(address)
                assert limited._inflight <= MAX_INFLIGHT + 1
        # The sends were pushed back long before 2000 chunks (the socket buffers fill).
        assert sent_chunks < 2000
        # Whatever the server wrote before closing is drained, then the close is seen.
        with anyio.fail_after(BOUND_S):
            await flooder.wait_closed(BOUND_S)


async def test_fetch_max_bytes_is_clamped(limited: Server) -> None:
    """limits.max_fetch_bytes=1000: a Fetch asking for 1 MiB gets at most ~1000 bytes of
    records (whole records; one record alone may exceed the limit)."""
    async with await RawClient.connect(limited.address or "") as c:
        await c.create_stream(name="s", subject="s")
        await c.produce("s", 0, [ProduceMessage(b"v" * 100)] * 50, ack_policy=AckPolicy.ALL)
        _header, records = await c.fetch("s", 0, offset=0, max_bytes=1 << 20)
        assert 0 < len(records) < 50
        assert sum(len(r.value) for r in records) <= 1000
        await c.produce("s", 0, [ProduceMessage(b"w" * 5000)], ack_policy=AckPolicy.ALL)
        _header, records = await c.fetch("s", 0, offset=50, max_bytes=1 << 20)
        assert [r.value for r in records] == [b"w" * 5000]  # a big record still comes alone
