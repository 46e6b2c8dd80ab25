"""The ordered queue of a group member's appends to its log (the consumer group's
``__groups`` records, a share group's share-log records), sent a batch at a time.

Task safety: one event loop; :meth:`AppendQueue.put` from any task, :meth:`next_batch`
from the one task that sends.
"""

from __future__ import annotations

from typing import Generic, TypeVar

import anyio
import attrs

__all__ = ["AppendQueue"]

T = TypeVar("T")


@attrs.define(eq=False)
class AppendQueue(Generic[T]):
    """Records waiting to be appended, in order."""

    max_batch: int
    """Most records in one batch (one Produce request)."""
    _items: list[T] = attrs.field(factory=list, init=False)
    _ready: anyio.Event = attrs.field(factory=anyio.Event, init=False)

    def put(self, item: T) -> None:
        """Queue ``item`` after the ones queued before."""
        self._items.append(item)
        self._ready.set()

    async def next_batch(self) -> list[T]:
        """The oldest ``max_batch`` items at most (at least one: waits for it), taken off
        the queue."""
        while not self._items:
            self._ready = anyio.Event()
            await self._ready.wait()
        batch = self._items[: self.max_batch]
        del self._items[: len(batch)]
        return batch
