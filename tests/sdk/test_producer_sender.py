"""The producer's Sender alone: an Accumulator it drains, a client to a fake cluster, no
Producer around it (the accumulator and the sender are composed by the Producer, each
owning its state)."""

from __future__ import annotations

import time

import anyio
import pytest

from jetsdk.codec.error_codes import AckPolicy
from jetsdk.codec.messages import new_produce_message
from jetsdk.errors import ClientClosed
from jetsdk.producer.accumulator import Accumulator
from jetsdk.producer.handle import SendHandle
from jetsdk.producer.sender import Pending, Sender

from .helpers import cluster_and_client

pytestmark = pytest.mark.anyio


def _queue(acc: Accumulator[Pending], sender: Sender, partition: int, value: bytes) -> SendHandle:
    handle = SendHandle()
    message = new_produce_message(value, None, (), "")
    acc.append(
        partition,
        Pending(message, handle),
        size=len(value) + 16,
        ack_policy=AckPolicy.LEADER,
        now=time.monotonic(),
    )
    sender.queued(partition)
    return handle


async def test_sender_delivers_what_is_queued_and_counts_it() -> None:
    async with cluster_and_client() as (cluster, client):
        cluster.add_stream("s", partitions=2)
        acc: Accumulator[Pending] = Accumulator(linger=60.0)  # only a flush cuts batches
        sender = Sender(
            client, "s", acc, max_in_flight=1, max_pending=10, ack_timeout=5, delivery_timeout=5
        )
        async with anyio.create_task_group() as tg:
            sender.start(tg, None)
            handles = [_queue(acc, sender, i % 2, b"m%d" % i) for i in range(6)]
            assert sender.unresolved == 6
            assert acc.total_queued == 6  # lingering: nothing cut yet
            with anyio.fail_after(10):
                await sender.flush()
            assert sender.unresolved == 0
            assert acc.total_queued == 0
            acks = [h.result() for h in handles]
            assert [(a.partition, a.offset) for a in acks] == [
                (0, 0),
                (1, 0),
                (0, 1),
                (1, 1),
                (0, 2),
                (1, 2),
            ]
            assert sender.retries == 0
            tg.cancel_scope.cancel()


async def test_close_fails_what_was_never_sent_and_frees_room() -> None:
    async with cluster_and_client() as (cluster, client):
        cluster.add_stream("s")
        acc: Accumulator[Pending] = Accumulator(linger=60.0)
        sender = Sender(
            client, "s", acc, max_in_flight=1, max_pending=2, ack_timeout=5, delivery_timeout=5
        )
        async with anyio.create_task_group() as tg:
            sender.start(tg, None)
            handles = [_queue(acc, sender, 0, b"x"), _queue(acc, sender, 0, b"y")]
            room = anyio.Event()

            async def wait_for_room() -> None:
                await sender.wait_for_room()
                room.set()

            tg.start_soon(wait_for_room)
            await anyio.wait_all_tasks_blocked()
            assert not room.is_set()  # two unresolved of max_pending=2
            sender.close(acc.drain_all())
            with anyio.fail_after(5):
                await room.wait()
            assert sender.unresolved == 0
            for handle in handles:
                assert isinstance(handle.exception(), ClientClosed)
            tg.cancel_scope.cancel()


async def test_room_and_idle_are_waited_for_again_after_each_wake_up() -> None:
    """The room and idle events are made by the waits that need them (none per message):
    a second wait after the first was woken waits for the next acks, not at once."""
    async with cluster_and_client() as (cluster, client):
        cluster.add_stream("s")
        acc: Accumulator[Pending] = Accumulator(linger=60.0)  # only a flush cuts batches
        sender = Sender(
            client, "s", acc, max_in_flight=1, max_pending=1, ack_timeout=5, delivery_timeout=5
        )
        async with anyio.create_task_group() as tg:
            sender.start(tg, None)
            for i in range(2):
                handle = _queue(acc, sender, 0, b"m%d" % i)
                room = anyio.Event()

                async def wait_for_room(room: anyio.Event = room) -> None:
                    await sender.wait_for_room()
                    room.set()

                tg.start_soon(wait_for_room)
                await anyio.wait_all_tasks_blocked()
                assert not room.is_set()  # one unresolved of max_pending=1
                with anyio.fail_after(10):
                    await sender.flush()
                    await room.wait()
                assert sender.unresolved == 0
                assert handle.result().offset == i
            tg.cancel_scope.cancel()


async def test_a_cancelled_wait_for_a_handle_leaves_the_other_waits() -> None:
    """Each wait of a handle has its own future on asyncio: one cancelled does not cancel
    the others, which get the ack."""
    handle = SendHandle()
    got: list[int] = []
    cancelled = anyio.CancelScope()

    async def wait_cancelled() -> None:
        with cancelled:
            await handle.wait()
            got.append(-1)

    async def wait() -> None:
        got.append((await handle.wait()).offset)

    async with anyio.create_task_group() as tg:
        tg.start_soon(wait_cancelled)
        tg.start_soon(wait)
        tg.start_soon(wait)
        await anyio.wait_all_tasks_blocked()
        cancelled.cancel()
        await anyio.wait_all_tasks_blocked()
        assert got == []
        assert handle._set_acked("s", 0, 7, 1)
    assert got == [7, 7]
    assert (await handle.wait()).offset == 7  # done: at once
