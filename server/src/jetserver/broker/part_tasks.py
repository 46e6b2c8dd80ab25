"""The tasks a partition replica's parts start while its ``run`` runs: the flusher, the
role's task (a leader's ISR loop, a follower's fetcher), a leadership renewal.

They ran in an anyio task group that ``run`` held open: about 1.2 KB per partition (the
group, its cancel scope, three sets and anyio's state of the host task), held by every
idle partition, most of which never start one (issue 34: 50,000 partitions on one server
at 12 KB each). :class:`PartTasks` costs a small object until its first task, and keeps
what the task group gave:

* each task runs in an anyio cancel scope of its own; :meth:`close` (the end of ``run``)
  cancels those scopes, so shielded parts of a task (a flush, a delivery) finish, and
  waits for every task to end, as leaving the task group did;
* a task that raises asks the replica to stop (``on_failure``), and ``run`` raises that
  error once it ended (:meth:`raise_failure`), as the task group raised it from ``run``;
  the server's task group then fails with it (:mod:`jetserver.broker.replica_tasks`).

Task safety: event loop thread only (asyncio: the server's loop).
"""

from __future__ import annotations

import asyncio
import types
from collections.abc import Awaitable, Callable
from typing import Any, cast

import anyio

__all__ = ["PartTasks", "task_error"]


def task_error(task: asyncio.Task[None]) -> BaseException | None:
    """What a finished task raised: None if it returned or was cancelled."""
    return None if task.cancelled() else task.exception()


class PartTasks:
    """A partition replica's tasks while its ``run`` runs (see the module docstring)."""

    __slots__ = ("_failure", "_on_failure", "_tasks")

    def __init__(self, on_failure: Callable[[], None]) -> None:
        self._on_failure = on_failure
        """Asks the replica to stop (a task failed)."""
        self._tasks: dict[asyncio.Task[None], anyio.CancelScope] | None = None
        """Running tasks and their cancel scopes (made with the first task)."""
        self._failure: BaseException | None = None

    def __len__(self) -> int:
        return 0 if self._tasks is None else len(self._tasks)

    def start_soon(self, fn: Callable[..., Awaitable[Any]], *args: Any) -> None:
        """Run ``fn(*args)`` in a task of its own until it returns or :meth:`close`."""
        scope = anyio.CancelScope()

        async def body() -> None:
            with scope:
                await fn(*args)

        coro = cast("types.CoroutineType[Any, Any, None]", body())
        coro.__qualname__ = getattr(fn, "__qualname__", coro.__qualname__)  # task dumps
        task = asyncio.get_running_loop().create_task(coro)
        tasks = self._tasks
        if tasks is None:
            tasks = self._tasks = {}
        tasks[task] = scope
        task.add_done_callback(self._ended)

    def _ended(self, task: asyncio.Task[None]) -> None:
        if self._tasks is not None:
            self._tasks.pop(task, None)
        exc = task_error(task)
        if exc is not None and self._failure is None:
            self._failure = exc
            self._on_failure()

    async def close(self) -> None:
        """Cancel every task through its cancel scope and wait until all have ended (also
        the ones their ending starts)."""
        while self._tasks:
            running = list(self._tasks.items())
            for _task, scope in running:
                scope.cancel()
            await asyncio.wait([task for task, _scope in running])

    def raise_failure(self) -> None:
        """Raise the first error a task raised, if any (after :meth:`close`)."""
        if self._failure is not None:
            raise self._failure
