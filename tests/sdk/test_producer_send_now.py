"""A message sent to an idle partition is written in the caller's task (no hand-off to the
partition's sender task first), against a real `jet dev` over a real socket.

The sender task then only waits for the response. Order and acks must be as through the
sender: per-key order with many concurrent callers, every handle resolved, including when
the producer closes with written batches still unanswered.
"""

from __future__ import annotations

import asyncio
from typing import Any

import anyio
import pytest

from jetsdk import Client, Consumer, Producer
from support.jet_dev import JetDev
from support.names import unique

pytestmark = pytest.mark.anyio


async def test_the_caller_writes_the_request_of_an_idle_partition(
    jet_dev: JetDev, anyio_backend: str
) -> None:
    name = unique("now")
    async with Client(jet_dev.servers) as client:
        await client.create_stream(name, name)
        async with Producer(client, name, linger=0) as producer:
            await producer.send(b"warm")  # the leader's connection is open, the sender idle
            conn = await client.leader_connection(name, 0)
            before = conn.pending_count
            handle = await producer.send_soon(b"now")
            # Nothing yielded since send_soon returned: only the caller can have written.
            written = conn.pending_count - before
            ack = await handle
        assert ack.offset == 1
    # The fast path is for plain TCP, on asyncio and trio alike.
    assert written == 1


async def test_a_one_partition_producer_writes_without_a_loop_callback(
    jet_dev: JetDev, anyio_backend: str
) -> None:
    """Its batch has no other partition's to go with: written at once, as a Produce
    request, with no end-of-turn mark of the fan-in (a loop callback and a loop turn per
    message on the old code)."""
    if anyio_backend != "asyncio":
        pytest.skip("the caller writes the request on asyncio only")
    name = unique("one")
    async with Client(jet_dev.servers) as client:
        await client.create_stream(name, name)
        async with Producer(client, name, linger=0) as producer:
            await producer.send(b"warm")
            conn = await client.leader_connection(name, 0)
            loop = asyncio.get_running_loop()
            scheduled: list[object] = []
            call_soon = loop.call_soon

            def counting(callback: Any, *args: Any, context: Any = None) -> asyncio.Handle:
                scheduled.append(callback)
                return call_soon(callback, *args, context=context)

            before = conn.pending_count
            loop.call_soon = counting  # type: ignore[method-assign]
            try:
                handle = await producer.send_soon(b"now")
            finally:
                del loop.call_soon
            written = conn.pending_count - before
            ack = await handle
    assert ack.offset == 1
    assert written == 1
    assert scheduled == []


async def test_many_callers_keep_per_key_order_and_every_ack(jet_dev: JetDev) -> None:
    name = unique("order")
    tasks, per_task = 8, 150
    async with Client(jet_dev.servers) as client:
        await client.create_stream(name, name, partitions=3)
        async with Producer(client, name, linger=0, max_pending=50) as producer:
            acks: dict[int, list[tuple[int, int]]] = {}

            async def work(t: int) -> None:
                handles = [
                    await producer.send_soon(b"%d:%d" % (t, i), key=b"t%d" % t)
                    for i in range(per_task)
                ]
                acks[t] = [((a := await h).partition, a.offset) for h in handles]

            with anyio.fail_after(60):
                async with anyio.create_task_group() as tg:
                    for t in range(tasks):
                        tg.start_soon(work, t)
        async with Consumer(client, name, start="earliest") as consumer:
            seen: dict[bytes, list[int]] = {}
            with anyio.fail_after(60):
                while sum(len(v) for v in seen.values()) < tasks * per_task:
                    for msg in await consumer.fetch(max_records=1000):
                        assert msg.key is not None
                        seen.setdefault(msg.key, []).append(int(msg.value.split(b":")[1]))
    for t in range(tasks):
        offsets = [offset for _p, offset in acks[t]]
        assert offsets == sorted(offsets)  # one key, one partition: acked in send order
        assert len({p for p, _o in acks[t]}) == 1
        assert seen[b"t%d" % t] == list(range(per_task))


async def test_closing_with_written_batches_resolves_every_handle(jet_dev: JetDev) -> None:
    name = unique("close")
    async with Client(jet_dev.servers) as client:
        await client.create_stream(name, name, partitions=4)
        handles = []
        async with Producer(client, name, linger=0, max_in_flight=4) as producer:
            await producer.send(b"warm")
            handles = [await producer.send_soon(b"m%d" % i) for i in range(400)]
        # Leaving the block flushed: every handle has its outcome.
        assert all(h.done() for h in handles)
        assert all(h.exception() is None for h in handles)
