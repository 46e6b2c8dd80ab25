"""The partition replicas' ``run`` coroutines, as plain asyncio tasks under one guard.

Every open partition replica runs one long-lived coroutine (its sequencer waits there
while the partition is idle). Spawned in an anyio task group, such a task cost about
3.5 KB (anyio's handle, wrapper coroutine, task state and its weak-table entry, the
done callback's closure) against 0.8 KB for the asyncio task itself: a fifth of an idle
partition's memory (issue 34: 50,000 partitions on one server at 12 KB each).

:class:`ReplicaTasks` keeps them as plain asyncio tasks and keeps the structure a task
group gives: its :meth:`guard` runs as one task of the server's task group, and

* a replica's ``run`` that raises fails the guard with that error, so the server's task
  group fails as it did when the replica ran in it;
* when the guard ends (the server's task group is cancelled or failed), it asks every
  replica still running to stop without draining and waits for their ``run`` to close
  the logs (bounded by :data:`STOP_BOUND_S`; then they are cancelled), as cancelling them
  in the task group did: their shielded ending flushed and closed their logs.

A clean stop (``StreamManager.stop``) stops and awaits every replica first, so the guard
then finds nothing left to stop.

Task safety: event loop thread only (asyncio: the server's loop).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Coroutine
from typing import Any

import anyio

from jetserver.broker.lifecycle import Lifecycle
from jetserver.broker.part_tasks import task_error
from jetserver.infra.lazy_event import LazyEvent

log = logging.getLogger(__name__)

STOP_BOUND_S = 60.0
"""How long the guard's end waits for the replicas to close their logs before it cancels
them."""

__all__ = ["ReplicaTasks"]


class ReplicaTasks:
    """Plain asyncio tasks of the replicas' ``run``, under one guard task (see above)."""

    __slots__ = ("_failed", "_failure", "_tasks")

    def __init__(self) -> None:
        self._tasks: dict[asyncio.Task[None], Callable[[], None]] = {}
        """Running tasks, each with the function that asks its replica to stop."""
        self._failure: BaseException | None = None
        self._failed = LazyEvent()

    def __len__(self) -> int:
        return len(self._tasks)

    async def start(
        self, run: Coroutine[Any, Any, None], life: Lifecycle, stop: Callable[[], None]
    ) -> None:
        """Run ``run`` (a replica's ``run()``, whose state is ``life``) in a plain task;
        return once it runs (``life.run_started`` set, ``life.tg`` open) or ended.
        ``stop`` asks that replica to end without draining (at the guard's end).

        Raises:
            Exception: what ``run`` raised before it ran, as anyio's ``start`` raised it
                (the guard does not see it).
        """
        task = asyncio.get_running_loop().create_task(run)
        self._tasks[task] = stop
        await life.run_started.wait()
        if life.tg is None and not task.done():
            await asyncio.wait([task])  # it ended before it ran: its error is raised here
        if task.done():
            self._tasks.pop(task, None)
            exc = task_error(task)
            if exc is not None:
                raise exc
            return
        task.add_done_callback(self._ended)

    def _ended(self, task: asyncio.Task[None]) -> None:
        self._tasks.pop(task, None)
        exc = task_error(task)
        if exc is not None and self._failure is None:
            self._failure = exc
            self._failed.set()

    async def guard(self) -> None:
        """Run in the server's task group until it ends: fail with the first error of a
        replica's ``run``; at the end stop and await the replicas still running."""
        try:
            await self._failed.wait()
            assert self._failure is not None
            raise self._failure
        finally:
            with anyio.CancelScope(shield=True):
                await self._stop_all()

    async def _stop_all(self) -> None:
        tasks = list(self._tasks.items())
        if not tasks:
            return
        for _task, stop in tasks:
            stop()
        _done, left = await asyncio.wait([task for task, _stop in tasks], timeout=STOP_BOUND_S)
        if left:
            log.error(
                "replicas did not stop in time; cancelling them",
                extra={"replicas": len(left), "bound_s": STOP_BOUND_S},
            )
            for task in left:
                task.cancel()
            with contextlib.suppress(Exception):
                await asyncio.wait(left)
