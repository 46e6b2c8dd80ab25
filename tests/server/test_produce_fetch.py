"""Produce through the server and Fetch: ack policies, validation, long poll, restart."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest
from nats.aio.client import Client as NatsClient

from jetsdk.codec.error_codes import AckPolicy, ErrorCode
from jetsdk.codec.fetch_messages import FetchRequest, encode_fetch_request
from jetsdk.codec.frames import Api
from jetsdk.codec.messages import ProduceMessage
from jetserver.server import Server
from jetserver.testing import nats_flushed
from support.jet_server import running_server
from support.nats_server import NatsServer
from support.raw_client import RawClient, ServerError

pytestmark = pytest.mark.anyio


async def test_produce_each_ack_policy(jet: Server) -> None:
    async with await RawClient.connect(jet.address) as c:
        await c.create_stream(name="p", subject="p")
        msgs = [ProduceMessage(b"a", key=b"k1"), ProduceMessage(b"b", headers=(("h", b"v"),))]
        leader = await c.produce("p", 0, msgs, ack_policy=AckPolicy.LEADER)
        assert [(r.error_code, r.offset) for r in leader] == [(0, 0), (0, 1)]
        assert all(r.timestamp > 0 for r in leader)
        everyone = await c.produce("p", 0, msgs, ack_policy=AckPolicy.ALL)
        assert [(r.error_code, r.offset) for r in everyone] == [(0, 2), (0, 3)]
        assert jet.streams.replica("p", 0).log.flushed_offset >= 4
        none = await c.produce("p", 0, msgs, ack_policy=AckPolicy.NONE)
        assert [(r.error_code, r.offset, r.timestamp) for r in none] == [(0, -1, -1)] * 2
        records = await c.collect("p", 0, 6)
    assert [r.value for r in records] == [b"a", b"b"] * 3
    assert records[0].key == b"k1"
    assert records[1].headers == (("h", b"v"),)
    assert all(r.subject == "p" for r in records)


async def test_produce_validation(jet: Server) -> None:
    async with await RawClient.connect(jet.address) as c:
        await c.create_stream(name="v", subject="v.*", partitions=2)
        with pytest.raises(ServerError) as err:
            await c.produce("nope", 0, [ProduceMessage(b"x")])
        assert err.value.code == ErrorCode.STREAM_NOT_FOUND
        with pytest.raises(ServerError) as err:
            await c.produce("v", 2, [ProduceMessage(b"x", subject="v.a.2")])
        assert err.value.code == ErrorCode.PARTITION_NOT_FOUND
        with pytest.raises(ServerError) as err:  # wildcard partition subject: subject needed
            await c.produce("v", 0, [ProduceMessage(b"x")])
        assert err.value.code == ErrorCode.INVALID_ARGUMENT
        with pytest.raises(ServerError) as err:
            await c.produce("v", 0, [ProduceMessage(b"x", subject="w.a")])
        assert err.value.code == ErrorCode.INVALID_ARGUMENT
        assert "does not match" in err.value.error.message
        with pytest.raises(ServerError) as err:
            await c.produce("v", 1, [ProduceMessage(b"x", subject="v.a")])  # partition 1: v.*.1
        assert err.value.code == ErrorCode.INVALID_ARGUMENT
        ok = await c.produce(
            "v", 1, [ProduceMessage(b"x", subject="v.a.1"), ProduceMessage(b"y", subject="v.b.1")]
        )
        assert [r.offset for r in ok] == [0, 1]
        records = await c.collect("v", 1, 2)
        assert [r.subject for r in records] == ["v.a.1", "v.b.1"]


async def test_produce_oversized_is_refused_per_message(jet: Server) -> None:
    async with await RawClient.connect(jet.address) as c:
        await c.create_stream(name="big", subject="big", max_message_bytes=100)
        results = await c.produce(
            "big", 0, [ProduceMessage(b"x" * 101), ProduceMessage(b"y" * 100)]
        )
    assert results[0].error_code == ErrorCode.MESSAGE_TOO_LARGE
    assert (results[1].error_code, results[1].offset) == (0, 0)


async def test_fetch_long_poll_wakes_on_new_data(jet: Server, nc: NatsClient) -> None:
    async with await RawClient.connect(jet.address) as c:
        await c.create_stream(name="lp", subject="lp")
        # A short wait with nothing new: empty answer.
        header, records = await c.fetch("lp", 0, 0, max_wait_ms=50)
        assert (header.error_code, header.hw, records) == (0, 0, [])
        result: list[bytes] = []
        replica = jet.streams.replica("lp", 0)
        with anyio.fail_after(10):
            async with anyio.create_task_group() as tg:

                async def poll() -> None:
                    async with await RawClient.connect(jet.address or "") as c2:
                        # Waits up to 60 s: returning with data proves the HW event woke it.
                        _h, recs = await c2.fetch("lp", 0, 0, max_wait_ms=60_000)
                        result.extend(r.value for r in recs)

                tg.start_soon(poll)
                while replica.fetch_waiters == 0:  # noqa: ASYNC110 - no event for "parked"
                    await anyio.sleep(0.005)
                await nc.publish("lp", b"wake")
                await nats_flushed(nc)
        assert result == [b"wake"]


async def test_fetch_offset_out_of_range_and_pipelining(jet: Server) -> None:
    async with await RawClient.connect(jet.address) as c:
        await c.create_stream(name="r", subject="r")
        await c.produce("r", 0, [ProduceMessage(b"x")] * 3, ack_policy=AckPolicy.ALL)
        header, _ = await c.fetch("r", 0, 5)
        assert header.error_code == ErrorCode.OFFSET_OUT_OF_RANGE
        assert (header.hw, header.log_start, header.leo) == (3, 0, 3)
        header, _ = await c.fetch("r", 0, -1)
        assert header.error_code == ErrorCode.OFFSET_OUT_OF_RANGE
        # Pipelined fetches: a slow long poll does not hold up the others.
        requests = [
            (Api.FETCH, encode_fetch_request(FetchRequest("r", 0, 3, 1 << 20, 2000))),
            *[
                (Api.FETCH, encode_fetch_request(FetchRequest("r", 0, i, 1 << 20, 0)))
                for i in range(3)
            ],
        ]
        frames = await c.pipeline(requests)
        assert len(frames) == 4


async def test_restart_reads_everything_back(nats_server: NatsServer, tmp_path: Path) -> None:
    data = tmp_path / "data"
    values = [f"m{i}".encode() for i in range(300)]
    async with (
        running_server(nats_server.url, data) as server,
        await RawClient.connect(server.address) as c,
    ):
        await c.create_stream(name="keep", subject="keep", partitions=2)
        await c.produce("keep", 0, [ProduceMessage(v) for v in values[:150]])
        await c.produce(
            "keep", 1, [ProduceMessage(v) for v in values[150:]], ack_policy=AckPolicy.NONE
        )
        await c.produce("keep", 1, [ProduceMessage(b"last")], ack_policy=AckPolicy.ALL)
    async with (
        running_server(nats_server.url, data) as server,
        await RawClient.connect(server.address) as c,
    ):
        p0 = await c.fetch_all("keep", 0)
        p1 = await c.fetch_all("keep", 1)
        assert [r.value for r in p0] == values[:150]
        assert [r.value for r in p1] == [*values[150:], b"last"]
        assert (await c.describe("keep"))["partitions"][1]["hw"] == 151
        more = await c.produce("keep", 0, [ProduceMessage(b"after")])
        assert more[0].offset == 150


async def test_message_over_nats_max_payload_is_too_large(tmp_path: Path) -> None:
    with NatsServer(max_payload=64 * 1024) as small:
        async with (
            running_server(small.url, tmp_path / "data") as server,
            await RawClient.connect(server.address) as c,
        ):
            await c.create_stream(name="np", subject="np")
            results = await c.produce(
                "np", 0, [ProduceMessage(b"x" * (100 * 1024)), ProduceMessage(b"ok")]
            )
    assert results[0].error_code == ErrorCode.MESSAGE_TOO_LARGE
    assert (results[1].error_code, results[1].offset) == (0, 0)


@pytest.mark.parametrize("io", ["sendfile", "read", "auto"])
async def test_fetch_io_modes_send_the_same_bytes(
    nats_server: NatsServer, tmp_path: Path, io: str
) -> None:
    values = [bytes([i % 256]) * 2000 for i in range(300)]
    async with (
        running_server(nats_server.url, tmp_path / "data", fetch__io=io) as server,
        await RawClient.connect(server.address) as c,
    ):
        await c.create_stream(name="io", subject="io")
        for i in range(0, 300, 100):
            batch = [ProduceMessage(v) for v in values[i : i + 100]]
            await c.produce("io", 0, batch, ack_policy=AckPolicy.ALL)
        header, big = await c.fetch("io", 0, 0, max_bytes=1 << 20)  # > 256 KiB: sendfile
        assert header.records_len > 256 * 1024
        _h, small = await c.fetch("io", 0, 0, max_bytes=4096)  # small: read in auto
        assert [r.value for r in big] == values[: len(big)]
        assert [r.value for r in small] == values[: len(small)]
        assert [r.value for r in await c.fetch_all("io", 0)] == values
