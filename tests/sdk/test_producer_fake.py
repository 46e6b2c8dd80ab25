"""Producer behaviour (batching, partitioning, acks, errors) against the fake cluster."""

from __future__ import annotations

import anyio
import pytest

from jetsdk import AckPolicy, MessageTooLarge, PartitionNotFound, Producer, StreamNotFound
from jetsdk.codec.error_codes import ErrorCode
from jetsdk.codec.record import iter_records
from jetsdk.errors import ClientClosed, NotLeader, Timeout, Unavailable
from jetsdk.partitioner import partition_for_key

from .helpers import cluster_and_client

pytestmark = pytest.mark.anyio


async def test_send_returns_ack_with_offset() -> None:
    async with cluster_and_client() as (cluster, client):
        cluster.add_stream("s")
        async with Producer(client, "s", linger=0) as producer:
            first = await producer.send(b"a", key=b"k", headers={"h": "v"})
            second = await producer.send(b"b")
        assert (first.stream, first.partition, first.offset) == ("s", 0, 0)
        assert second.offset == 1
        assert first.timestamp > 0
        stored = list(iter_records(b"".join(cluster.streams["s"].partitions[0].records)))
        assert stored[0].key == b"k"
        assert stored[0].headers == (("h", b"v"),)


async def test_send_soon_sends_full_batches_at_once_and_flush_the_rest() -> None:
    # A linger far longer than the test: only full batches and the flush send, whatever
    # the machine's speed.
    async with cluster_and_client() as (cluster, client):
        cluster.add_stream("s")
        async with Producer(client, "s", linger=60.0, max_batch_messages=100) as producer:
            handles = [await producer.send_soon(b"m%d" % i) for i in range(250)]
            await producer.flush()
            acks = [await h for h in handles]
        assert [a.offset for a in acks] == list(range(250))
        assert cluster.produce_batches == [100, 100, 50]


async def test_exit_flushes_pending_messages() -> None:
    async with cluster_and_client() as (cluster, client):
        cluster.add_stream("s")
        async with Producer(client, "s", linger=10.0) as producer:
            handles = [await producer.send_soon(b"x") for _ in range(5)]
        assert all(h.done() for h in handles)
        assert [h.result().offset for h in handles] == [0, 1, 2, 3, 4]


async def test_keyed_messages_use_murmur2_and_keyless_round_robin() -> None:
    async with cluster_and_client() as (cluster, client):
        cluster.add_stream("s", partitions=4)
        async with Producer(client, "s", linger=0) as producer:
            keyed = [await producer.send(b"v", key=b"user-%d" % i) for i in range(20)]
            keyless = [await producer.send(b"v") for _ in range(8)]
        for i, ack in enumerate(keyed):
            assert ack.partition == partition_for_key(b"user-%d" % i, 4)
        assert [a.partition for a in keyless] == [0, 1, 2, 3, 0, 1, 2, 3]


async def test_custom_partitioner_and_explicit_partition() -> None:
    async with cluster_and_client() as (cluster, client):
        cluster.add_stream("s", partitions=3)
        async with Producer(client, "s", linger=0, partitioner=lambda k, v, n: n - 1) as p:
            assert (await p.send(b"v")).partition == 2
            assert (await p.send(b"v", partition=1)).partition == 1
            with pytest.raises(PartitionNotFound):
                await p.send(b"v", partition=3)


async def test_per_message_ack_policy_splits_batches() -> None:
    async with cluster_and_client() as (cluster, client):
        cluster.add_stream("s")
        async with Producer(client, "s", linger=0.05) as producer:
            h1 = await producer.send_soon(b"a")
            h2 = await producer.send_soon(b"b", ack=AckPolicy.NONE)
            h3 = await producer.send_soon(b"c")
            await producer.flush()
        assert h1.result().offset == 0
        assert h2.result().offset == -1  # NONE: no offset reported
        assert h3.result().offset == 2
        assert cluster.produce_batches == [1, 1, 1]


async def test_message_too_large_is_raised_before_sending() -> None:
    async with cluster_and_client() as (cluster, client):
        cluster.add_stream("s")
        cluster.max_message_bytes = 100
        async with Producer(client, "s") as producer:
            with pytest.raises(MessageTooLarge):
                await producer.send(b"x" * 101)
            assert producer.pending == 0


async def test_unknown_stream() -> None:
    async with cluster_and_client() as (_cluster, client):
        with pytest.raises(StreamNotFound):
            async with Producer(client, "nope"):
                pass


async def test_not_leader_is_retried_after_metadata_refresh() -> None:
    async with cluster_and_client(servers=2) as (cluster, client):
        cluster.add_stream("s", leader="s1")
        async with Producer(client, "s", linger=0) as producer:
            await producer.send(b"a")
            cluster.streams["s"].partitions[0].leader = "s2"
            ack = await producer.send(b"b")
        assert ack.offset == 1


async def test_retries_exhausted_fail_the_handles() -> None:
    async with cluster_and_client() as (cluster, client):
        cluster.add_stream("s")
        cluster.fail_next_produce.extend([ErrorCode.UNAVAILABLE] * 1000)
        async with Producer(client, "s", linger=0, delivery_timeout=0.5) as producer:
            # The last error, or Timeout if the deadline cut an attempt short (loaded CI).
            with pytest.raises((Unavailable, Timeout), match="delivery_timeout"):
                await producer.send(b"a")
        assert not isinstance(Unavailable(), NotLeader)


async def test_backpressure_bounds_pending() -> None:
    async with cluster_and_client() as (cluster, client):
        cluster.add_stream("s")
        seen: list[int] = []
        async with Producer(client, "s", linger=0.01, max_pending=10) as producer:
            for _ in range(50):
                await producer.send_soon(b"x")
                seen.append(producer.pending)
        assert max(seen) <= 10
        assert cluster.streams["s"].partitions[0].hw == 50


async def test_backpressure_bounds_pending_bytes() -> None:
    """``max_pending_bytes`` (Kafka's ``buffer.memory``) holds send_soon back by the
    estimated bytes pending, whatever ``max_pending`` allows."""
    async with cluster_and_client() as (cluster, client):
        cluster.add_stream("s")
        seen: list[int] = []
        async with Producer(
            client, "s", linger=0.01, max_pending=1000, max_pending_bytes=1000
        ) as producer:
            for _ in range(50):
                await producer.send_soon(b"x" * 200)  # about 216 bytes estimated
                seen.append(producer.pending)
            assert producer._sender.outcomes.unresolved_bytes > 0
            await producer.flush()
            assert producer._sender.outcomes.unresolved_bytes == 0
        assert max(seen) == 5  # 4 x 216 < 1000: a fifth; then full
        assert cluster.streams["s"].partitions[0].hw == 50


async def test_a_message_over_max_pending_bytes_still_goes_alone() -> None:
    async with cluster_and_client() as (cluster, client):
        cluster.add_stream("s")
        async with Producer(client, "s", linger=0, max_pending_bytes=100) as producer:
            first = await producer.send_soon(b"x" * 1000)
            second = await producer.send_soon(b"y" * 1000)  # waits for the first's ack
            assert first.done()
        assert (await first).offset == 0
        assert (await second).offset == 1


async def test_callbacks_run_on_completion() -> None:
    async with cluster_and_client() as (cluster, client):
        cluster.add_stream("s")
        offsets: list[int] = []
        async with Producer(client, "s") as producer:
            handle = await producer.send_soon(b"x")
            handle.add_done_callback(lambda h: offsets.append(h.result().offset))
        assert offsets == [0]


async def test_concurrent_senders_keep_per_partition_order() -> None:
    async with cluster_and_client() as (cluster, client):
        cluster.add_stream("s")
        async with Producer(client, "s", linger=0.001, max_batch_messages=7) as producer:

            async def sender(tag: bytes) -> list[int]:
                return [(await producer.send(tag + b"%d" % i)).offset for i in range(30)]

            results: dict[bytes, list[int]] = {}

            async def run(tag: bytes) -> None:
                results[tag] = await sender(tag)

            async with anyio.create_task_group() as tg:
                for tag in (b"a", b"b", b"c"):
                    tg.start_soon(run, tag)
        for offsets in results.values():
            assert offsets == sorted(offsets)


async def test_send_after_close_raises() -> None:
    async with cluster_and_client() as (cluster, client):
        cluster.add_stream("s")
        producer = Producer(client, "s")
        async with producer:
            pass
        with pytest.raises(ClientClosed):
            await producer.send(b"x")
