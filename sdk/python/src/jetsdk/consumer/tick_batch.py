"""Items added during one pass of the event loop, handled together by one task.

The group side of a consumer gets its partitions' starts, revocations and losses one call
at a time from the group runtime, which reports a whole assignment change in one pass; the
callbacks (``on_assigned``, ``on_revoked``, ``on_lost``) and the offset look-ups want them
as one batch. :class:`TickBatch` holds that pattern once: the first :meth:`~TickBatch.add`
starts a task that lets the loop run once (the rest of the pass's items join) and then
hands every item added so far to the handler.

Task safety: one event loop; no locks.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar

import anyio.abc
import anyio.lowlevel

T = TypeVar("T")


class TickBatch(Generic[T]):
    """Items handled a batch at a time, a batch per pass of the event loop."""

    __slots__ = ("_handle", "_items")

    def __init__(self, handle: Callable[[list[T]], Awaitable[None]]) -> None:
        self._handle = handle
        self._items: list[T] = []

    def __bool__(self) -> bool:
        """True while items wait for their batch."""
        return bool(self._items)

    def add(self, item: T, tg: anyio.abc.TaskGroup | None) -> None:
        """Queue ``item``; the first of a batch starts its handling in ``tg``."""
        self._items.append(item)
        if len(self._items) == 1:
            assert tg is not None
            tg.start_soon(self._after_this_pass)

    async def _after_this_pass(self) -> None:
        await anyio.lowlevel.checkpoint()  # the rest of this pass's items join the batch
        await self.run_now()

    async def run_now(self) -> None:
        """Hand the items queued so far to the handler (nothing if there are none)."""
        batch, self._items = self._items, []
        if batch:
            await self._handle(batch)
