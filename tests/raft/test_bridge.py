"""Thread-to-event-loop bridge: wake-ups from a foreign thread, change-notifying cells."""

from __future__ import annotations

import threading
from collections import deque

import anyio
import anyio.lowlevel
import pytest

from jetserver.raft.bridge import Cell, ThreadWaker

pytestmark = pytest.mark.anyio

WAIT_S = 5.0


async def test_wake_from_a_thread_delivers_everything_queued_before_it() -> None:
    waker = ThreadWaker()
    items: deque[int] = deque()
    total = 2000
    done = threading.Event()

    def producer() -> None:
        for i in range(total):
            items.append(i)
            waker.wake()
        done.set()

    seen: list[int] = []
    thread = threading.Thread(target=producer)
    with anyio.fail_after(WAIT_S):
        thread.start()
        while len(seen) < total:
            await waker.wait()
            while items:
                seen.append(items.popleft())
    thread.join(WAIT_S)
    assert seen == list(range(total))
    assert done.is_set()
    waker.close()


async def test_many_wakes_coalesce_and_wait_returns_once() -> None:
    waker = ThreadWaker()
    for _ in range(10_000):  # more than the socket buffer holds: extra wakes are dropped
        waker.wake()
    with anyio.fail_after(WAIT_S):
        await waker.wait()
    with anyio.move_on_after(0.05) as scope:
        await waker.wait()
    assert scope.cancelled_caught
    waker.close()


async def test_wake_after_close_is_a_no_op_and_wait_raises() -> None:
    waker = ThreadWaker()
    waker.close()
    waker.wake()
    waker.close()
    with pytest.raises(anyio.ClosedResourceError):
        await waker.wait()


async def test_cell_watchers_see_the_latest_value() -> None:
    cell = Cell(0)
    seen: list[int] = []

    async def watcher(task_status: anyio.abc.TaskStatus[None]) -> None:
        task_status.started()
        async for value in cell.watch():
            seen.append(value)
            if value == 3:
                return

    with anyio.fail_after(WAIT_S):
        async with anyio.create_task_group() as tg:
            await tg.start(watcher)
            cell.set(1)
            cell.set(2)  # coalesced with 1: the watcher has not run in between
            await anyio.lowlevel.checkpoint()
            cell.set(3)
    assert seen[0] == 0
    assert seen[-1] == 3
    assert seen == sorted(set(seen))
    assert cell.version == 3


async def test_wait_changed_returns_at_once_if_already_changed() -> None:
    cell = Cell("a")
    version = cell.version
    cell.set("b")
    with anyio.fail_after(WAIT_S):
        assert await cell.wait_changed(version) == "b"
