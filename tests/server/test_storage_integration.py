"""The server on top of the storage engine: retention (fetch below the log start), compaction
gaps (skipped silently), recovery of a torn tail at start-up."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import pytest

from jetsdk.codec.error_codes import AckPolicy, ErrorCode
from jetsdk.codec.messages import ProduceMessage
from jetserver.server import Server
from jetserver.storage import Log
from jetserver.storage.checkpoint import HIGH_WATERMARK_FILE, read_single_value
from jetserver.testing import wait_until_async
from support.jet_server import running_server
from support.nats_server import NatsServer
from support.raw_client import RawClient

pytestmark = pytest.mark.anyio


@asynccontextmanager
async def _housekeeping_every(
    interval_s: float, nats_server: NatsServer, tmp_path: Path
) -> AsyncIterator[tuple[Server, RawClient]]:
    """A server whose housekeeping (HW checkpoints, retention) runs every ``interval_s``,
    and a raw client connected to it."""
    async with (
        running_server(
            nats_server.url,
            tmp_path / "data",
            storage__hw_checkpoint_interval_s=interval_s,
            storage__maintenance_interval_s=interval_s,
        ) as jet,
        await RawClient.connect(jet.address) as c,
    ):
        yield jet, c


async def test_retention_moves_the_log_start(jet: Server) -> None:
    async with await RawClient.connect(jet.address) as c:
        await c.create_stream(
            name="ret", subject="ret", segment_max_bytes=4096, retention_max_messages=50
        )
        for _ in range(5):
            await c.produce("ret", 0, [ProduceMessage(b"v" * 200)] * 40, ack_policy=AckPolicy.ALL)
        replica = jet.streams.replica("ret", 0)
        await replica.run_maintenance()
        log_start = replica.log.log_start_offset
        assert log_start > 0
        header, records = await c.fetch("ret", 0, 0)
        assert header.error_code == ErrorCode.OFFSET_OUT_OF_RANGE
        assert header.log_start == log_start
        assert records == []
        assert (await c.list_offsets("ret", 0, "earliest"))["offset"] == log_start
        kept = await c.fetch_all("ret", 0, log_start)
        assert [r.offset for r in kept] == list(range(log_start, 200))
        assert (await c.describe("ret"))["partitions"][0]["log_start"] == log_start


async def test_compaction_gaps_are_skipped(jet: Server) -> None:
    async with await RawClient.connect(jet.address) as c:
        await c.create_stream(name="cmp", subject="cmp", compact=True, segment_max_bytes=2048)
        for round_ in range(6):
            msgs = [ProduceMessage(f"{k}-{round_}".encode(), key=k.encode()) for k in "abcd"]
            await c.produce("cmp", 0, msgs * 3, ack_policy=AckPolicy.ALL)
        replica = jet.streams.replica("cmp", 0)
        await replica.run_maintenance()
        records = await c.fetch_all("cmp", 0)
    offsets = [r.offset for r in records]
    assert offsets == sorted(offsets)
    assert len(records) < 72  # something was compacted away
    assert offsets[-1] == 71  # the active segment is kept whole
    latest = {r.key: r.value for r in records}
    assert latest == {k.encode(): f"{k}-5".encode() for k in "abcd"}


async def test_torn_tail_is_cut_at_start(
    nats_server: NatsServer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    data = tmp_path / "data"
    async with (
        running_server(nats_server.url, data) as server,
        await RawClient.connect(server.address) as c,
    ):
        await c.create_stream(name="torn", subject="torn")
        await c.produce("torn", 0, [ProduceMessage(b"ok")] * 10, ack_policy=AckPolicy.ALL)
    (segment,) = list((data / "streams").glob("torn-*/0/*.log"))
    with segment.open("ab") as f:
        f.write(b"\x00\x00\x00\x00\x00\x00\x00\x0a half a record")
    caplog.set_level(logging.WARNING, logger="jetserver")
    async with (
        running_server(nats_server.url, data) as server,
        await RawClient.connect(server.address) as c,
    ):
        records = await c.fetch_all("torn", 0)
        assert [r.value for r in records] == [b"ok"] * 10
        more = await c.produce("torn", 0, [ProduceMessage(b"next")])
        assert more[0].offset == 10
    assert any("recovery repaired the log" in r.getMessage() for r in caplog.records)


async def test_one_housekeeping_task_checkpoints_moved_hws_and_runs_retention(
    nats_server: NatsServer, tmp_path: Path
) -> None:
    """HW checkpoints and retention of every partition come from the server's one
    housekeeping task (broker/housekeeping.py), not from a timer per partition."""
    async with _housekeeping_every(0.1, nats_server, tmp_path) as (jet, c):
        for p in range(3):
            await c.create_stream(
                name=f"hk{p}", subject=f"hk{p}", segment_max_bytes=4096, retention_max_messages=50
            )
            for _ in range(3):
                batch = [ProduceMessage(b"v" * 200)] * (10 * (p + 1))
                await c.produce(f"hk{p}", 0, batch, ack_policy=AckPolicy.ALL)
        replicas = [jet.streams.replica(f"hk{p}", 0) for p in range(3)]

        def checkpointed() -> bool:
            return all(
                read_single_value(r.log.directory, HIGH_WATERMARK_FILE) == 30 * (p + 1)
                for p, r in enumerate(replicas)
            )

        await wait_until_async(checkpointed, 10.0, "every partition's HW checkpointed")
        # The third holds 90 records over several segments: retention (50) cuts it.
        await wait_until_async(
            lambda: replicas[2].log.log_start_offset > 0, 10.0, "retention applied"
        )
        assert replicas[0].log.log_start_offset == 0  # 30 records: nothing to cut


async def test_idle_empty_partitions_are_not_checkpointed_again_after_a_restart(
    nats_server: NatsServer, tmp_path: Path
) -> None:
    """An empty partition has no HW checkpoint file (it reads as the log start): after a
    restart its HW has not moved since the checkpoint, so housekeeping writes none (it
    wrote one per idle partition, issue 34)."""
    data = tmp_path / "data"
    async with (
        running_server(nats_server.url, data) as jet,
        await RawClient.connect(jet.address) as c,
    ):
        await c.create_stream(name="idle", subject="idle", partitions=3)
        await c.create_stream(name="busy", subject="busy")
        await c.produce("busy", 0, [ProduceMessage(b"x")] * 4, ack_policy=AckPolicy.ALL)
    assert not list((data / "streams").glob(f"idle-*/*/{HIGH_WATERMARK_FILE}"))
    async with running_server(nats_server.url, data) as jet:
        idle = [jet.streams.replica("idle", p) for p in range(3)]
        assert [r.log.high_watermark for r in idle] == [0, 0, 0]
        assert not any(r.hw_moved_since_checkpoint for r in idle)
        busy = jet.streams.replica("busy", 0)
        assert busy.log.high_watermark == 4
        assert not busy.hw_moved_since_checkpoint  # its close wrote 4


async def test_housekeeping_leaves_a_stopping_partition_alone(
    nats_server: NatsServer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A stopping partition closes its log in a worker thread before it reads as closed:
    housekeeping must not run retention or a HW checkpoint on it meanwhile (it did, and
    logged "maintenance failed ... LogClosedError" at the stop of a large server)."""
    async with _housekeeping_every(0.02, nats_server, tmp_path) as (jet, c):
        for name in ("going", "staying"):
            await c.create_stream(name=name, subject=name, retention_max_messages=50)
            await c.produce(name, 0, [ProduceMessage(b"v")] * 3, ack_policy=AckPolicy.ALL)
        going = jet.streams.replica("going", 0)
        staying = jet.streams.replica("staying", 0)
        closed_log = anyio.Event()
        release = anyio.Event()

        async def slow_closer(log: Log) -> None:
            await anyio.to_thread.run_sync(log.close)
            closed_log.set()
            await release.wait()  # the log is closed; the replica does not say so yet

        going.closer = slow_closer
        going.stop()
        with anyio.fail_after(10):
            await closed_log.wait()
        for n in range(4, 7):  # each checkpoint of "staying" is a later housekeeping round
            await c.produce("staying", 0, [ProduceMessage(b"v")], ack_policy=AckPolicy.ALL)
            await wait_until_async(
                lambda n=n: read_single_value(staying.log.directory, HIGH_WATERMARK_FILE) == n,
                10.0,
                "a housekeeping round after the stop",
            )
        release.set()
        await going.wait_stopped()
    failed = [
        r.getMessage()
        for r in caplog.records
        if "maintenance failed" in r.getMessage() or "checkpoint failed" in r.getMessage()
    ]
    assert failed == []
