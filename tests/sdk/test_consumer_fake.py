"""Consumer behaviour (positions, long poll, seek, reset) against the fake cluster."""

from __future__ import annotations

import anyio
import pytest

from jetsdk import Consumer, OffsetOutOfRange, StartAt, StreamNotFound
from jetsdk.consumer.fetcher import HAND_OVER_FIRST
from jetsdk.errors import InvalidArgument, PartitionNotFound

from .fake_jet import FakeCluster
from .helpers import cluster_and_client

pytestmark = pytest.mark.anyio


async def test_iterates_all_partitions_in_offset_order() -> None:
    async with cluster_and_client() as (cluster, client):
        cluster.add_stream("s", partitions=2)
        for i in range(10):
            cluster.append("s", i % 2, b"v%d" % i, key=b"k%d" % i)
        got: dict[int, list[int]] = {0: [], 1: []}
        async with Consumer(client, "s") as consumer:
            async for msg in consumer:
                got[msg.partition].append(msg.offset)
                if sum(len(v) for v in got.values()) == 10:
                    break
            assert consumer.position(0) == 5
            assert consumer.lag(0) == 0
        assert got == {0: [0, 1, 2, 3, 4], 1: [0, 1, 2, 3, 4]}


@pytest.mark.parametrize(
    ("start", "expected"),
    [("earliest", 0), ("latest", 4), ("new-only", 5), (2, 2), (StartAt.offset(3), 3)],
)
async def test_start_positions(start: object, expected: int) -> None:
    async with cluster_and_client() as (cluster, client):
        cluster.add_stream("s")
        for i in range(5):
            cluster.append("s", 0, b"%d" % i)
        async with Consumer(client, "s", start=start) as consumer:  # type: ignore[arg-type]
            assert consumer.position(0) == expected
            if expected < 5:
                first = await consumer.fetch(max_records=1, timeout=5)
                assert first[0].offset == expected
            else:
                assert await consumer.fetch(timeout=0.05) == []
                cluster.append("s", 0, b"new")
                (msg,) = await consumer.fetch(timeout=5)
                assert (msg.offset, msg.value) == (5, b"new")


async def test_long_poll_wakes_on_new_message() -> None:
    async with cluster_and_client() as (cluster, client):
        cluster.add_stream("s")
        async with Consumer(client, "s", max_wait=10.0) as consumer:

            async def later() -> None:
                with anyio.fail_after(5):
                    await cluster.streams["s"].partitions[0].parked.wait()
                cluster.append("s", 0, b"hello")

            async with anyio.create_task_group() as tg:
                tg.start_soon(later)
                with anyio.fail_after(5):
                    msg = await consumer.__anext__()
            assert msg.value == b"hello"


async def test_fetch_batches_respect_max_records() -> None:
    async with cluster_and_client() as (cluster, client):
        cluster.add_stream("s")
        for i in range(30):
            cluster.append("s", 0, b"%d" % i)
        async with Consumer(client, "s", max_bytes=200) as consumer:
            offsets: list[int] = []
            with anyio.fail_after(5):
                while len(offsets) < 30:
                    batch = await consumer.fetch(max_records=7, timeout=5)
                    assert 1 <= len(batch) <= 7
                    offsets.extend(m.offset for m in batch)
        assert offsets == list(range(30))


async def test_seek_discards_prefetched_and_restarts() -> None:
    async with cluster_and_client() as (cluster, client):
        cluster.add_stream("s")
        for i in range(10):
            cluster.append("s", 0, b"%d" % i)
        async with Consumer(client, "s") as consumer:
            first = await consumer.fetch(max_records=3, timeout=5)
            assert [m.offset for m in first] == [0, 1, 2]
            consumer.seek(0, 8)
            assert consumer.position(0) == 8
            again = await consumer.fetch(timeout=5)
            assert [m.offset for m in again] == [8, 9]
            await consumer.seek_to(0, "earliest")
            assert (await consumer.fetch(max_records=1, timeout=5))[0].offset == 0


def ten_records_from_six(cluster: FakeCluster) -> None:
    """Stream ``s`` with records 0-9 in partition 0, the first six removed (log start 6)."""
    cluster.add_stream("s")
    for i in range(10):
        cluster.append("s", 0, b"%d" % i)
    cluster.truncate_front("s", 0, 6)


async def test_offset_below_log_start_resets_to_earliest() -> None:
    async with cluster_and_client() as (cluster, client):
        ten_records_from_six(cluster)
        async with Consumer(client, "s", start=2) as consumer:
            batch = await consumer.fetch(timeout=5)
        assert [m.offset for m in batch] == [6, 7, 8, 9]


async def test_offset_below_log_start_raises_with_reset_raise() -> None:
    async with cluster_and_client() as (cluster, client):
        ten_records_from_six(cluster)
        async with Consumer(client, "s", start=2, reset="raise") as consumer:
            with pytest.raises(OffsetOutOfRange) as info:
                await consumer.fetch(timeout=5)
        assert (info.value.log_start, info.value.hw) == (6, 10)


async def test_bad_arguments() -> None:
    async with cluster_and_client() as (cluster, client):
        cluster.add_stream("s")
        with pytest.raises(StreamNotFound):
            async with Consumer(client, "nope"):
                pass
        with pytest.raises(PartitionNotFound):
            async with Consumer(client, "s", partitions=[1]):
                pass
        with pytest.raises(InvalidArgument):
            Consumer(client, "s", start="yesterday")  # type: ignore[arg-type]
        with pytest.raises(InvalidArgument):
            Consumer(client, "s", reset="sometimes")  # type: ignore[arg-type]


async def test_iteration_stops_when_closed_elsewhere() -> None:
    async with cluster_and_client() as (cluster, client):
        cluster.add_stream("s")
        cluster.append("s", 0, b"only")
        async with Consumer(client, "s") as consumer:
            assert (await consumer.__anext__()).value == b"only"
            with anyio.move_on_after(0.05):
                await consumer.__anext__()  # nothing more: waits until cancelled


async def test_deleted_stream_surfaces_stream_not_found() -> None:
    async with cluster_and_client() as (cluster, client):
        cluster.add_stream("s")
        cluster.append("s", 0, b"a")
        async with Consumer(client, "s", max_wait=0.05) as consumer:
            assert [m.value for m in await consumer.fetch(timeout=5)] == [b"a"]
            del cluster.streams["s"]
            with anyio.fail_after(5), pytest.raises(StreamNotFound):
                await consumer.fetch(timeout=5)


@pytest.mark.parametrize("anyio_backend", ["asyncio"])  # relies on asyncio's FIFO wake-ups
async def test_a_waiting_application_gets_a_small_batch_before_the_next_fetch(
    anyio_backend: str,
) -> None:
    """Light load: a batch the application waits for is handed over before the fetcher
    writes its next Fetch (one request write sooner). A big batch keeps the next Fetch on
    its way while the application works through it (prefetch)."""
    async with cluster_and_client() as (cluster, client):
        cluster.add_stream("s")
        async with Consumer(client, "s", max_wait=10.0) as consumer:
            conn = await client.leader_connection("s", 0)
            in_flight: list[int] = []
            for count in (1, HAND_OVER_FIRST + 1):

                async def later(count: int = count) -> None:
                    with anyio.fail_after(5):
                        await cluster.streams["s"].partitions[0].parked.wait()
                    for i in range(count):
                        cluster.append("s", 0, b"v%d" % i)

                async with anyio.create_task_group() as tg:
                    tg.start_soon(later)
                    with anyio.fail_after(5):
                        got = await consumer.fetch(max_records=1000)
                    in_flight.append(conn.pending_count)  # no await since fetch returned
                assert len(got) == count
                cluster.streams["s"].partitions[0].parked = anyio.Event()
    assert in_flight == [0, 1]
