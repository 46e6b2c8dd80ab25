"""A task group owned by an object that is itself an async context manager.

Client, Producer, Consumer, Connection, and the server's MetadataRaft and ServerLinks run
background tasks for as long as they are entered: the group is entered in their
``__aenter__`` and cancelled and left in their ``__aexit__``. :class:`BackgroundTasks`
holds that pattern in one place, so none of them calls a task group's dunder methods by
hand.

Task safety: one event loop; ``open`` and ``close`` are called by the owner's enter and
exit, in the same task (anyio requires a task group to be left by the task that entered it).
"""

from __future__ import annotations

import anyio
import anyio.abc


class BackgroundTasks:
    """Background tasks that live from :meth:`open` to :meth:`close`."""

    __slots__ = ("_tg",)

    def __init__(self) -> None:
        self._tg: anyio.abc.TaskGroup | None = None

    @property
    def group(self) -> anyio.abc.TaskGroup:
        """The open task group (RuntimeError before :meth:`open`)."""
        if self._tg is None:
            raise RuntimeError("the background tasks are not open")
        return self._tg

    @property
    def is_open(self) -> bool:
        """True between :meth:`open` and :meth:`close`."""
        return self._tg is not None

    async def open(self) -> anyio.abc.TaskGroup:
        """Enter a new task group and return it."""
        if self._tg is not None:
            raise RuntimeError("the background tasks are already open")
        tg = anyio.create_task_group()
        await tg.__aenter__()
        self._tg = tg
        return tg

    async def close(self) -> None:
        """Cancel every task and leave the group (idempotent). The tasks never raise: an
        exception of the owner's body propagates unwrapped."""
        tg, self._tg = self._tg, None
        if tg is None:
            return
        tg.cancel_scope.cancel()
        await tg.__aexit__(None, None, None)
