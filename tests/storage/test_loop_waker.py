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
