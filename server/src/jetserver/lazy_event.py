"""An event that costs almost nothing until someone waits on it.

An ``anyio.Event`` on asyncio holds an ``asyncio.Event`` and its waiter deque: about
1.2 KB. A partition replica has several events that are seldom waited on (room in the
ingest queue, HW moves for parked fetches, replica news, its own stop); with thousands of
idle partitions they were a quarter of the server's memory per partition. A
:class:`LazyEvent` is a flag until the first :meth:`wait`, which creates the real event.
"""

from __future__ import annotations

import anyio
import anyio.lowlevel

__all__ = ["LazyEvent"]


class LazyEvent:
    """``anyio.Event``'s interface (set, is_set, wait), allocated on the first wait.

    Task safety: one event loop thread, like ``anyio.Event``.
    """

    __slots__ = ("_event", "_set")

    def __init__(self) -> None:
        self._event: anyio.Event | None = None
        self._set = False

    def set(self) -> None:
        """Set the flag and wake every waiter (idempotent)."""
        self._set = True
        if self._event is not None:
            self._event.set()

    def is_set(self) -> bool:
        """True once :meth:`set` was called."""
        return self._set

    async def wait(self) -> None:
        """Return once the event is set (at once, after a checkpoint, if it already is)."""
        if self._set:
            await anyio.lowlevel.checkpoint()
            return
        if self._event is None:
            self._event = anyio.Event()
        await self._event.wait()
