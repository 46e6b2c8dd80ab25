"""A server alone with many partitions answers before it opens them ([storage]
open_in_background_from, jetserver.broker.pending_opens): they open after ready, a request
for one opens it first, and recovery (a torn tail cut) still comes before anything is read."""

from __future__ import annotations

import logging
from pathlib import Path

import anyio
import pytest

from jetsdk.codec.error_codes import AckPolicy
from jetsdk.codec.messages import ProduceMessage
from jetserver.metrics.exposition import render
from jetserver.server import Server
from jetserver.testing import wait_until_async
from jetserver.testing.in_process import in_process_config
from support.jet_server import running_server, start_server_process
from support.nats_server import NatsServer
from support.raw_client import RawClient

pytestmark = pytest.mark.anyio

PARTITIONS = 200
"""Several background batches (32 each): the last ones are still unopened at ready."""
LATE = {"storage__open_in_background_from": 1}
BOUND_S = 30.0


def _metric(server: Server, name: str) -> int:
    (line,) = [x for x in render(server.metrics).splitlines() if x.startswith(name + " ")]
    return int(line.split()[1])


def _unopened(server: Server) -> list[int]:
    return [p for p in range(PARTITIONS) if server.streams.local_replica("late", p) is None]


@pytest.fixture
async def filled(nats_server: NatsServer, tmp_path: Path) -> Path:
    """A data directory: stream ``late`` of PARTITIONS partitions, 3 records in the last
    one, stopped cleanly."""
    data = tmp_path / "data"
    async with (
        running_server(nats_server.url, data) as server,
        await RawClient.connect(server.address) as c,
    ):
        await c.create_stream(name="late", subject="late", partitions=PARTITIONS)
        last = PARTITIONS - 1
        acks = await c.produce("late", last, [ProduceMessage(b"r")] * 3, ack_policy=AckPolicy.ALL)
        assert [a.offset for a in acks] == [0, 1, 2]
    return data


async def test_a_restart_answers_before_opening_and_a_request_opens_its_partition_first(
    nats_server: NatsServer, filled: Path
) -> None:
    async with running_server(nats_server.url, filled, **LATE) as server:
        # Ready (answering), yet most partitions, the last among them, are not open.
        assert len(server.streams.pending) > 0
        assert PARTITIONS - 1 in _unopened(server)
        assert _metric(server, "jet_partitions_unopened") == len(server.streams.pending)
        async with await RawClient.connect(server.address) as c:
            # Asked for, the last one opens first: its records are there, and it takes more.
            assert (await c.list_offsets("late", PARTITIONS - 1))["offset"] == 3
            assert server.streams.pending.asked >= 1
            records = await c.fetch_all("late", PARTITIONS - 1)
            assert [(r.offset, r.value) for r in records] == [(0, b"r"), (1, b"r"), (2, b"r")]
            acks = await c.produce("late", PARTITIONS - 2, [ProduceMessage(b"n")])
            assert [(a.error_code, a.offset) for a in acks] == [(0, 0)]
            # The rest open in the background.
            await wait_until_async(lambda: not _unopened(server), BOUND_S, "all opened")
            assert len(server.streams.pending) == 0
            assert _metric(server, "jet_partitions_unopened") == 0
            assert _metric(server, "jet_partitions_opened_late_total") == PARTITIONS
            describe = await c.describe("late")
            assert describe["partitions"][PARTITIONS - 1]["leo"] == 3


async def test_the_background_opens_begin_once_the_server_is_ready(
    nats_server: NatsServer, filled: Path
) -> None:
    """At "server ready" no batch is being opened nor was: the opens do not compete with the
    start for the CPU (they began during its NATS round trips)."""
    server = Server(in_process_config(nats_server.url, filled, **LATE))
    at_ready: list[tuple[bool, int]] = []

    class AtReady(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if record.getMessage() == "server ready":
                pending = server.streams.pending
                at_ready.append((pending.opening, pending.opened))

    logger, handler = logging.getLogger("jetserver.server"), AtReady()
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        async with anyio.create_task_group() as tg:
            await tg.start(server.run)
            await wait_until_async(lambda: not _unopened(server), BOUND_S, "all opened")
            server.request_stop()
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
    assert at_ready == [(False, 0)]


async def test_a_stop_before_every_partition_opened_leaves_the_others_as_they_were(
    nats_server: NatsServer, filled: Path
) -> None:
    async with running_server(nats_server.url, filled, **LATE) as server:
        assert len(server.streams.pending) > 0  # stopped at once
    # Opened at the next start (all before ready, the default below 1,000): nothing lost.
    async with running_server(nats_server.url, filled) as server:
        assert not _unopened(server)
        assert server.streams.replica("late", PARTITIONS - 1).log.log_end_offset == 3
        assert server.streams.replica("late", PARTITIONS - 1).log.recovery.clean_shutdown


async def test_a_stream_deleted_before_its_partitions_opened_is_not_opened(
    nats_server: NatsServer, filled: Path
) -> None:
    async with running_server(nats_server.url, filled, **LATE) as server:
        async with await RawClient.connect(server.address) as c:
            await c.delete_stream("late")
        await wait_until_async(lambda: len(server.streams.pending) == 0, BOUND_S, "none pending")
        assert len(_unopened(server)) == PARTITIONS
        assert not list((filled / "streams").glob("late-*"))


def test_a_torn_tail_after_a_kill_is_cut_before_the_first_read(
    nats_server: NatsServer, tmp_path: Path
) -> None:
    """kill -9, a torn record appended to the last segment; at the restart the partition
    opens (and is recovered) when first asked for, before its offsets are answered."""
    data = tmp_path / "data"
    proc = start_server_process(
        nats_server.url,
        data,
        "--log-level",
        "INFO",
        settings={"storage": {"open_in_background_from": 1}},
    )
    try:

        async def produce() -> None:
            async with await RawClient.connect(proc.address) as c:
                await c.create_stream(name="torn", subject="torn", partitions=64)
                acks = await c.produce(
                    "torn", 63, [ProduceMessage(b"ok")] * 10, ack_policy=AckPolicy.ALL
                )
                assert acks[-1].offset == 9

        anyio.run(produce, backend="asyncio")
        proc.kill9()
        (segment,) = list((data / "streams").glob("torn-*/63/*.log"))
        with segment.open("ab") as f:
            f.write(b"\x00\x00\x00\x00\x00\x00\x00\x0a half a record")
        proc.start()

        async def read_back() -> None:
            async with await RawClient.connect(proc.address) as c:
                assert (await c.list_offsets("torn", 63))["offset"] == 10
                records = await c.fetch_all("torn", 63)
                assert [r.value for r in records] == [b"ok"] * 10
                more = await c.produce("torn", 63, [ProduceMessage(b"next")])
                assert more[0].offset == 10

        anyio.run(read_back, backend="asyncio")
    finally:
        proc.stop()
    assert "recovery repaired the log" in proc.log_path.read_text()
