"""Calls from worker threads run in the loop's reader callback of an eventfd
(jetserver.storage.loop_waker): in order, each once, one failing not stopping the rest."""

from __future__ import annotations

import asyncio
import logging
import threading

import anyio
import pytest

from jetserver.storage.loop_waker import waker_of

pytestmark = pytest.mark.anyio
WAIT = 10.0
LOOPS = [
    pytest.param(("asyncio", {"use_uvloop": False}), id="asyncio"),
    pytest.param(("asyncio", {"use_uvloop": True}), id="uvloop"),
]


@pytest.mark.parametrize("anyio_backend", LOOPS)
async def test_calls_from_a_thread_run_on_the_loop_in_order(
    caplog: pytest.LogCaptureFixture,
) -> None:
    loop = asyncio.get_running_loop()
    waker = waker_of(loop)
    assert waker is not None
    assert waker_of(loop) is waker  # one per loop
    ran: list[tuple[int, bool]] = []
    done = anyio.Event()

    def record(i: int) -> None:
        ran.append((i, threading.current_thread() is threading.main_thread()))
        if i == 1:
            raise RuntimeError("fails")
        if i == 39:
            done.set()

    def from_thread() -> None:
        for i in range(40):
            waker.call(record, i)

    with caplog.at_level(logging.ERROR, logger="jetserver.storage.loop_waker"):
        thread = threading.Thread(target=from_thread)
        thread.start()
        with anyio.fail_after(WAIT):
            await done.wait()
        thread.join(WAIT)
    assert ran == [(i, True) for i in range(40)]
    assert "a call from a worker thread failed" in caplog.text


@pytest.mark.parametrize("anyio_backend", LOOPS)
async def test_calls_from_threads_racing_the_loops_drain_are_never_lost() -> None:
    """Each thread waits for its call to run before it makes the next, so a wake-up lost
    (a thread that saw one pending when the loop had just read it) stops that thread.
    Before the fix the loop cleared its pending mark before reading the eventfd: a call
    made between the two wrote a wake-up that read consumed, the mark stayed set, and no
    later call woke the loop (all three threads stuck within ~100 calls each)."""
    loop = asyncio.get_running_loop()
    waker = waker_of(loop)
    assert waker is not None
    threads, calls = 3, 2000
    ran = [threading.Event() for _ in range(threads)]
    counts = [0] * threads
    lost: list[tuple[int, int]] = []

    def record(i: int) -> None:
        counts[i] += 1
        ran[i].set()

    def from_thread(i: int) -> None:
        for n in range(calls):
            ran[i].clear()
            waker.call(record, i)
            if not ran[i].wait(WAIT):
                lost.append((i, n))
                return

    workers = [threading.Thread(target=from_thread, args=(i,)) for i in range(threads)]
    for worker in workers:
        worker.start()
    with anyio.fail_after(WAIT * 3):
        while any(worker.is_alive() for worker in workers):  # noqa: ASYNC110 - threads
            await anyio.sleep(0.01)
    assert lost == []
    assert counts == [calls] * threads
