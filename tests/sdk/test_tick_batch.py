"""TickBatch: the items added during one pass of the event loop are handled as one batch."""

from __future__ import annotations

import anyio
import anyio.lowlevel
import pytest

from jetsdk.consumer.tick_batch import TickBatch

pytestmark = pytest.mark.anyio

BOUND_S = 5.0


async def test_items_added_in_one_pass_make_one_batch_and_later_ones_the_next() -> None:
    batches: list[list[int]] = []
    handled = anyio.Event()

    async def handle(batch: list[int]) -> None:
        batches.append(batch)
        handled.set()

    tick = TickBatch(handle)
    with anyio.fail_after(BOUND_S):
        async with anyio.create_task_group() as tg:
            for i in range(3):
                tick.add(i, tg)
            assert tick  # queued, not handled before the loop has run once
            assert batches == []
            await handled.wait()
            handled = anyio.Event()
            tick.add(3, tg)
            await handled.wait()
    assert batches == [[0, 1, 2], [3]]
    assert not tick


async def test_run_now_hands_over_the_queue_and_the_started_task_finds_it_empty() -> None:
    batches: list[list[str]] = []

    async def handle(batch: list[str]) -> None:
        batches.append(batch)

    tick = TickBatch(handle)
    with anyio.fail_after(BOUND_S):
        async with anyio.create_task_group() as tg:
            tick.add("a", tg)
            await tick.run_now()
            assert batches == [["a"]]
    assert batches == [["a"]]  # the task the add started handled nothing more
    await tick.run_now()
    assert batches == [["a"]]
