"""A caller whose scope is cancelled ends cancelled, even when the object it waits on fails
in the same moment because of that cancellation.

The SDK's own tasks (a producer's senders, a connection's reader, a consumer's fetchers)
run inside the caller's scope; cancelling it cancels them too, and as they end they fail
what their waiters wait for (``ClientClosed``). anyio delivers the cancellation to a task
only while its wait is pending: a waiter whose wait was completed by the failure first was
woken normally and, before this fix, raised the failure out of a cancelled scope as an
error (``tests/sdk/test_stream_edit.py`` failed so in CI: ``ClientClosed`` out of a task
group whose scope had been cancelled). Each test completes the wait and cancels the scope
in the same loop turn, the order of that race.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import anyio
import pytest

from jetsdk.codec.frames import Api
from jetsdk.connection import Connection
from jetsdk.consumer.delivery import Delivery
from jetsdk.errors import ClientClosed
from jetsdk.memory import memory_stream_pair
from jetsdk.producer.fan_in import SectionAnswer
from jetsdk.producer.handle import SendHandle

pytestmark = pytest.mark.anyio


async def _ends_cancelled(wait: Callable[[], Awaitable[object]], fail: Callable[[], None]) -> None:
    """Run ``wait`` in a task; once it waits, ``fail`` and cancel its scope in one step;
    assert it ended cancelled (not returned, not raised the failure)."""
    ended: list[str] = []

    async def waiter() -> None:
        try:
            await wait()
        except anyio.get_cancelled_exc_class():
            ended.append("cancelled")
            raise
        ended.append("returned")

    async with anyio.create_task_group() as tg:
        tg.start_soon(waiter)
        await anyio.wait_all_tasks_blocked()
        fail()
        tg.cancel_scope.cancel()
    assert ended == ["cancelled"]


async def test_a_send_whose_producer_closed_under_the_same_cancellation() -> None:
    handle = SendHandle()
    closed = ClientClosed("the producer was closed while the message was in flight")
    await _ends_cancelled(handle.wait, lambda: handle._set(None, closed))
    with pytest.raises(ClientClosed):  # outside a cancelled scope, the caller sees it
        await handle.wait()


async def test_a_request_whose_connection_closed_under_the_same_cancellation() -> None:
    client_end, _server_end = memory_stream_pair()
    async with Connection(client_end, label="mem") as conn:
        await _ends_cancelled(
            lambda: conn.request(Api.METADATA, b"q", timeout=5),
            lambda: conn._fail(ClientClosed("connection to mem closed")),
        )


async def test_a_fetch_whose_consumer_closed_under_the_same_cancellation() -> None:
    delivery = Delivery(manual_ack=False, max_unacked=100)
    delivery.start()
    await _ends_cancelled(lambda: delivery.next_batch(10, None), delivery.close)
    with pytest.raises(ClientClosed):
        await delivery.next_batch(10, None)


async def test_a_section_whose_request_was_cancelled_under_the_same_cancellation(
    anyio_backend: str,
) -> None:
    if anyio_backend != "asyncio":
        pytest.skip("ProduceMany's fan-in runs on asyncio only")
    answer = SectionAnswer(asyncio.get_running_loop().create_future(), "mem")
    closed = ClientClosed("the request to mem was cancelled")
    await _ends_cancelled(lambda: answer.wait(5), lambda: answer._resolve(None, closed))
