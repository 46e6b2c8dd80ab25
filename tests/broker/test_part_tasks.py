"""A partition replica's tasks without a task group held while idle (issue 34): cancelled
through their own cancel scopes (a shielded part finishes) and awaited at the end of
``run``; a task's error stops the replica and is raised by ``run`` once it ended."""

from __future__ import annotations

import anyio
import pytest

from jetserver.broker.part_tasks import PartTasks

pytestmark = pytest.mark.anyio

BOUND_S = 10.0


async def test_close_cancels_each_task_through_its_scope_and_waits_for_shielded_parts() -> None:
    tasks = PartTasks(on_failure=lambda: None)
    finished: list[str] = []
    started = anyio.Event()

    async def flusher() -> None:
        try:
            started.set()
            await anyio.sleep_forever()
        finally:
            with anyio.CancelScope(shield=True):
                await anyio.sleep(0.02)  # a flush in progress must complete
                finished.append("flusher")

    async def fetcher(name: str) -> None:
        try:
            await anyio.sleep_forever()
        finally:
            finished.append(name)

    with anyio.fail_after(BOUND_S):
        assert len(tasks) == 0
        tasks.start_soon(flusher)
        tasks.start_soon(fetcher, "fetcher")
        assert len(tasks) == 2
        await started.wait()
        await tasks.close()
    assert sorted(finished) == ["fetcher", "flusher"]
    assert len(tasks) == 0
    tasks.raise_failure()  # nothing failed: no error


async def test_a_failed_task_stops_the_replica_and_its_error_is_raised_after_close() -> None:
    stops: list[int] = []
    stopped = anyio.Event()

    def stop() -> None:
        stops.append(1)
        stopped.set()

    tasks = PartTasks(on_failure=stop)
    ended = anyio.Event()

    async def broken() -> None:
        raise RuntimeError("flusher bug")

    async def other() -> None:
        try:
            await anyio.sleep_forever()
        finally:
            ended.set()

    with anyio.fail_after(BOUND_S):
        tasks.start_soon(other)
        tasks.start_soon(broken)
        await stopped.wait()
        assert not ended.is_set()  # the others run on until close (the end of run)
        await tasks.close()
    assert ended.is_set()
    assert stops == [1]
    with pytest.raises(RuntimeError, match=r"^flusher bug$"):
        tasks.raise_failure()
