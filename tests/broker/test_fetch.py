"""broker.fetch called directly on a running server's partitions: what a consumer Fetch
answers (records below the HW, out of range, waiting at the HW, unknown stream)."""

from __future__ import annotations

import time
from pathlib import Path

import anyio
import pytest

from jetsdk.codec.error_codes import AckPolicy, ErrorCode
from jetsdk.codec.fetch_messages import FetchRequest
from jetsdk.codec.messages import ProduceMessage
from jetsdk.codec.record import iter_records
from jetserver.broker.fetch import FetchAnswer, fetch
from jetserver.errors import ApiError
from jetserver.server import Server
from jetserver.testing import running_server, wait_until_async
from support.nats_server import NatsServer
from support.raw_client import RawClient

pytestmark = pytest.mark.anyio


def values(answer: FetchAnswer) -> list[bytes]:
    if answer.records is None:
        return []
    with answer.records as records:
        return [r.value for r in iter_records(records.read_bytes())]


async def answer(server: Server, offset: int, *, max_wait_ms: int = 0) -> FetchAnswer:
    req = FetchRequest("f", 0, offset, 1 << 20, max_wait_ms)
    return await fetch(server.streams, server.config.limits, req)


async def test_fetch_answers_from_the_log(nats_server: NatsServer, tmp_path: Path) -> None:
    async with (
        running_server(nats_server.url, tmp_path / "data") as server,
        await RawClient.connect(server.address) as c,
    ):
        await c.create_stream(name="f", subject="f")
        messages = [ProduceMessage(b"%d" % i) for i in range(3)]
        await c.produce("f", 0, messages, ack_policy=AckPolicy.ALL)

        got = await answer(server, 1)
        assert (got.error_code, got.hw, got.log_start, got.leo) == (ErrorCode.NONE, 3, 0, 3)
        assert values(got) == [b"1", b"2"]

        at_hw = await answer(server, 3)  # nothing yet, no wait: an empty answer
        assert (at_hw.error_code, at_hw.records) == (ErrorCode.NONE, None)

        past = await answer(server, 4)
        assert (past.error_code, past.hw, past.leo) == (ErrorCode.OFFSET_OUT_OF_RANGE, 3, 3)

        with pytest.raises(ApiError) as info:
            await fetch(server.streams, server.config.limits, FetchRequest("nope", 0, 0, 1, 0))
        assert info.value.code == ErrorCode.STREAM_NOT_FOUND


async def test_a_fetch_at_the_hw_waits_for_the_next_record(
    nats_server: NatsServer, tmp_path: Path
) -> None:
    async with (
        running_server(nats_server.url, tmp_path / "data") as server,
        await RawClient.connect(server.address) as c,
    ):
        await c.create_stream(name="f", subject="f")
        results: list[FetchAnswer] = []
        async with anyio.create_task_group() as tg:

            async def wait() -> None:
                results.append(await answer(server, 0, max_wait_ms=20_000))

            tg.start_soon(wait)
            replica = server.streams.replica("f", 0)
            await wait_until_async(lambda: replica.fetch_waiters, 10, "the fetch parked")
            started = time.monotonic()
            await c.produce("f", 0, [ProduceMessage(b"late")], ack_policy=AckPolicy.ALL)
        (got,) = results
        assert values(got) == [b"late"]
        assert time.monotonic() - started < 10  # woken by the record, not the 20 s wait
