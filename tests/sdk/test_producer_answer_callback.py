"""A batch the caller wrote to an idle partition is settled from its answer's loop callback
(the partition's sender task does not wake for it), against a real `jet dev` over a real
socket (the caller writes only on plain TCP under asyncio). Anything but a clean answer
goes back to the sender task: a refused message fails as before, a raising handle callback
still ends the producer, and the partition goes on afterwards.
"""

from __future__ import annotations

import asyncio
import traceback
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
import pytest

from jetsdk import Client, Producer
from jetsdk.errors import WrongExpectedOffset
from jetsdk.producer.handle import SendHandle
from support.jet_dev import JetDev
from support.names import unique

pytestmark = pytest.mark.anyio


def _asyncio_only(anyio_backend: str) -> None:
    if anyio_backend != "asyncio":
        pytest.skip("the caller writes the request on asyncio only")


@asynccontextmanager
async def _idle_producer(jet_dev: JetDev, prefix: str) -> AsyncIterator[Producer]:
    """A producer (linger 0) of a new stream whose leader's connection is open and whose
    partition's sender is idle (one message sent and acked)."""
    name = unique(prefix)
    async with Client(jet_dev.servers) as client:
        await client.create_stream(name, name)
        async with Producer(client, name, linger=0) as producer:
            await producer.send(b"warm")
            yield producer


async def test_an_idle_partitions_ack_is_settled_by_the_answers_callback(
    jet_dev: JetDev, anyio_backend: str
) -> None:
    _asyncio_only(anyio_backend)
    settled_in: list[object] = []
    async with _idle_producer(jet_dev, "cb") as producer:
        for i in range(20):
            handle = await producer.send_soon(b"m%d" % i)
            handle.add_done_callback(lambda _h: settled_in.append(asyncio.current_task()))
            with anyio.fail_after(30):
                assert (await handle).offset == i + 1
    # Before: each was settled in the partition's sender task, woken at the write.
    assert settled_in == [None] * 20


async def test_an_idle_partitions_ack_is_settled_in_the_turn_that_reads_its_answer(
    jet_dev: JetDev, anyio_backend: str
) -> None:
    _asyncio_only(anyio_backend)
    from_reader: list[bool] = []

    def settled(_handle: SendHandle) -> None:
        # The connection's reader decoding the answer is on the stack: not a loop callback
        # one turn later (before: the answer's future scheduled it).
        from_reader.append(any(f.name == "_received" for f in traceback.extract_stack()))

    async with _idle_producer(jet_dev, "cbturn") as producer:
        for i in range(5):
            handle = await producer.send_soon(b"m%d" % i)
            handle.add_done_callback(settled)
            with anyio.fail_after(30):
                assert (await handle).offset == i + 1
    assert from_reader == [True] * 5


async def test_a_refused_message_fails_through_the_sender_task_and_the_partition_goes_on(
    jet_dev: JetDev, anyio_backend: str
) -> None:
    async with _idle_producer(jet_dev, "cbref") as producer:
        with anyio.fail_after(30):
            with pytest.raises(WrongExpectedOffset):
                await producer.send(b"no", expected_offset=5)
            assert (await producer.send(b"yes")).offset == 1
            handles = [await producer.send_soon(b"m%d" % i) for i in range(50)]
            assert [(await h).offset for h in handles] == list(range(2, 52))


class _CallbackBroke(Exception):
    pass


async def test_a_raising_handle_callback_still_ends_the_producer(
    jet_dev: JetDev, anyio_backend: str
) -> None:
    def broken(_handle: SendHandle) -> None:
        raise _CallbackBroke("from the application's callback")

    with anyio.fail_after(30), pytest.RaisesGroup(_CallbackBroke, flatten_subgroups=True):
        async with _idle_producer(jet_dev, "cbraise") as producer:
            handle = await producer.send_soon(b"m")
            handle.add_done_callback(broken)
            await anyio.sleep(60)  # ended by the producer's failure, not by this


async def test_a_wide_producers_batches_are_settled_by_the_answers_callbacks(
    jet_dev: JetDev, anyio_backend: str
) -> None:
    # Keyed to 20 partitions, more than one loop turn of sends: each partition's next
    # batch goes from its previous batch's answer callback (with the other partitions'
    # batches in one ProduceMany), in order, and no sender task wakes for any of them.
    _asyncio_only(anyio_backend)
    name = unique("cbwide")
    settled_in: list[object] = []
    async with Client(jet_dev.servers) as client:
        await client.create_stream(name, name, partitions=20)
        async with Producer(client, name, linger=0) as producer:
            for i in range(20):  # every partition's sender started and idle
                await producer.send(b"warm", partition=i)
            handles = []
            for i in range(3000):
                handle = await producer.send_soon(b"m%d" % i, key=b"k%d" % i)
                handle.add_done_callback(lambda _h: settled_in.append(asyncio.current_task()))
                handles.append(handle)
            with anyio.fail_after(60):
                await producer.flush()
                acks = [await h for h in handles]
    by_partition: dict[int, list[int]] = {}
    for ack in acks:
        by_partition.setdefault(ack.partition, []).append(ack.offset)
    assert len(by_partition) == 20
    assert all(offsets == sorted(offsets) for offsets in by_partition.values())
    assert sum(map(len, by_partition.values())) == 3000
    # Before: most were settled in their partition's sender task.
    tasks = [t for t in settled_in if t is not None]
    assert len(settled_in) == 3000
    assert tasks == []
