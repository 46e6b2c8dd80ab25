"""The NATS copies of directly stored records are bounded (broker/copy_backlog.py).

A jet server in this event loop with a real nats-server, paused with SIGSTOP: NATS takes
no copies, so they wait. Pipelined LEADER-acked Produce requests of 1 MiB each to a
one-replica stream: once the copies' backlog is full the responses wait (producer
backpressure) instead of every request being answered while its copies pile up in memory;
once NATS is back every response and every copy comes. With a short request timeout the
copies that found no room are dropped, counted, and the records are still stored.

Before the bound, all requests were answered while NATS was paused (the first test saw 48
of 48 answers) and their copies held 48 MiB in the server.
"""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest
from nats.aio.client import Client as NatsClient
from nats.aio.msg import Msg

from cluster.harness import wait_until_async
from jetsdk.codec.error_codes import AckPolicy, ErrorCode
from jetsdk.codec.frames import Api, Frame, encode_frame
from jetsdk.codec.messages import (
    ProduceMessage,
    ProduceRequest,
    decode_produce_response,
    encode_produce_request,
)
from jetserver.broker.copy_backlog import CopyBacklog
from jetserver.server import Server
from support.jet_server import running_server
from support.nats_server import NatsServer
from support.raw_client import RawClient

pytestmark = pytest.mark.anyio

MIB = 1024 * 1024
BOUND_S = 60.0
HELD_S = 2.0
"""How long the answers are checked to stay held while NATS is paused."""
VALUE = b"v" * (64 * 1024)
PER_REQUEST = 16  # 1 MiB a request
REQUESTS = 48
BACKLOG_LIMIT = 2 * MIB


def _request(timeout_ms: int) -> bytes:
    return encode_produce_request(
        ProduceRequest(
            stream="big",
            partition=0,
            ack_policy=AckPolicy.LEADER,
            timeout_ms=timeout_ms,
            messages=tuple(ProduceMessage(VALUE) for _ in range(PER_REQUEST)),
        )
    )


class _Seen:
    def __init__(self) -> None:
        self.count = 0

    async def on_msg(self, msg: Msg) -> None:
        self.count += 1


async def _setup(
    server: Server, c: RawClient, nats_server: NatsServer
) -> tuple[CopyBacklog, NatsClient, _Seen]:
    backlog = server.running.produce.copy_backlog
    backlog.limit = BACKLOG_LIMIT
    await c.create_stream(name="big", subject="big", max_message_bytes=MIB)
    nc = NatsClient()
    await nc.connect(nats_server.url)
    seen = _Seen()
    await nc.subscribe("big", cb=seen.on_msg)
    await nc.flush()
    return backlog, nc, seen


async def _send_all(c: RawClient, timeout_ms: int) -> None:
    body = _request(timeout_ms)
    for cid in range(REQUESTS):
        await c.stream.send(encode_frame(Api.PRODUCE, 1000 + cid, body))


async def _answers(c: RawClient, into: list[Frame], n: int) -> None:
    while len(into) < n:
        into.append(await c.recv_frame(BOUND_S))


def _all_stored(frames: list[Frame]) -> int:
    results = [r for f in frames for r in decode_produce_response(f.body)]
    assert all(r.error_code == ErrorCode.NONE for r in results), results[:3]
    return len(results)


async def test_responses_wait_for_room_while_nats_takes_no_copies(
    nats_server: NatsServer, tmp_path: Path
) -> None:
    async with (
        running_server(
            nats_server.url,
            tmp_path / "data",
            nats__pending_bytes=MIB,
            nats__ping_interval_s=60.0,
            logging__level="WARNING",
        ) as server,
        await RawClient.connect(server.address) as c,
    ):
        backlog, nc, seen = await _setup(server, c, nats_server)
        frames: list[Frame] = []
        nats_server.pause()
        try:
            with anyio.fail_after(BOUND_S):
                await _send_all(c, timeout_ms=60_000)
            with anyio.move_on_after(HELD_S):
                await _answers(c, frames, REQUESTS)
            held_answers = len(frames)
            assert held_answers < REQUESTS, "every request answered while NATS was paused"
            assert backlog.waits > 0
            assert backlog.held <= BACKLOG_LIMIT
        finally:
            nats_server.resume()
        with anyio.fail_after(BOUND_S):
            await _answers(c, frames, REQUESTS)
            assert _all_stored(frames) == REQUESTS * PER_REQUEST
            await wait_until_async(
                lambda: seen.count == REQUESTS * PER_REQUEST, BOUND_S, "every copy"
            )
        assert backlog.dropped == 0
        await wait_until_async(lambda: backlog.held == 0, BOUND_S, "an empty backlog")
        await nc.close()


async def test_copies_without_room_by_the_timeout_are_dropped_and_counted(
    nats_server: NatsServer, tmp_path: Path
) -> None:
    async with (
        running_server(
            nats_server.url,
            tmp_path / "data",
            nats__pending_bytes=MIB,
            nats__ping_interval_s=60.0,
            logging__level="WARNING",
        ) as server,
        await RawClient.connect(server.address) as c,
    ):
        backlog, nc, seen = await _setup(server, c, nats_server)
        frames: list[Frame] = []
        nats_server.pause()
        try:
            with anyio.fail_after(BOUND_S):
                await _send_all(c, timeout_ms=500)
                # Answered at their timeout at the latest, stored all the same.
                await _answers(c, frames, REQUESTS)
                assert _all_stored(frames) == REQUESTS * PER_REQUEST
            assert backlog.dropped > 0
            assert backlog.dropped % PER_REQUEST == 0  # whole requests' copies
        finally:
            nats_server.resume()
        total = REQUESTS * PER_REQUEST
        with anyio.fail_after(BOUND_S):
            await wait_until_async(
                lambda: seen.count == total - backlog.dropped, BOUND_S, "the kept copies"
            )
            assert (await c.list_offsets("big"))["offset"] == total
        await nc.close()
