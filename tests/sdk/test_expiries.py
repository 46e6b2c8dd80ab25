"""The timeouts of the waits for answers share one loop timer on asyncio
(:mod:`jetsdk.expiries`): many waits arm one timer, not one each, and each wait still
ends at its own timeout, a shorter one queued later first."""

from __future__ import annotations

import asyncio

import pytest

from jetsdk.expiries import _LOOPS, COMPACT_MIN
from jetsdk.pending_stream import wait_future

pytestmark = pytest.mark.anyio


def _live_timers(loop: asyncio.AbstractEventLoop) -> int:
    scheduled: list[asyncio.TimerHandle] = loop._scheduled  # type: ignore[attr-defined]
    return len([handle for handle in scheduled if not handle.cancelled()])


async def test_many_waits_share_one_loop_timer_and_each_ends_on_time(anyio_backend: str) -> None:
    if anyio_backend != "asyncio":
        pytest.skip("the shared timer is asyncio's")
    loop = asyncio.get_running_loop()
    before = _live_timers(loop)
    futures: list[asyncio.Future[bool]] = [loop.create_future() for _ in range(50)]
    waits = [asyncio.ensure_future(wait_future(f, 30.0)) for f in futures]
    await asyncio.sleep(0)
    assert _live_timers(loop) - before <= 1  # before: one timer per wait (50)

    short: asyncio.Future[bool] = loop.create_future()
    start = loop.time()
    await asyncio.wait_for(wait_future(short, 0.05), 10)
    assert short.result() is False  # expired, at its own timeout
    assert loop.time() - start >= 0.05
    assert not any(f.done() for f in futures)  # the long waits go on

    for f in futures:
        f.set_result(True)
    await asyncio.wait_for(asyncio.gather(*waits), 10)
    assert all(f.result() for f in futures)

    # A wait of another timeout queued after them ends at its own time too.
    again: asyncio.Future[bool] = loop.create_future()
    await asyncio.wait_for(wait_future(again, 0.02), 10)
    assert again.result() is False


async def test_answered_waits_behind_a_lasting_one_do_not_pile_up(anyio_backend: str) -> None:
    if anyio_backend != "asyncio":
        pytest.skip("the shared timer is asyncio's")
    loop = asyncio.get_running_loop()
    timeout = 123.0  # a queue of its own
    lasting: asyncio.Future[bool] = loop.create_future()
    head = asyncio.ensure_future(wait_future(lasting, timeout))
    await asyncio.sleep(0)
    for _ in range(10 * COMPACT_MIN):  # each answered at once, behind the lasting wait
        future: asyncio.Future[bool] = loop.create_future()
        waiting = asyncio.ensure_future(wait_future(future, timeout))
        await asyncio.sleep(0)
        future.set_result(True)
        await waiting
    queued = len(_LOOPS[loop]._queues[timeout])
    assert queued <= 2 * COMPACT_MIN  # before compaction: 10 * COMPACT_MIN + 1
    lasting.set_result(True)
    await asyncio.wait_for(head, 10)
