"""An event that costs almost nothing until someone waits on it.

An ``anyio.Event`` on asyncio holds an ``asyncio.Event`` and its waiter deque: about
1.2 KB. A partition replica has several events that are seldom waited on (room in the
ingest queue, HW moves for parked fetches, replica news, its own stop); with thousands of
idle partitions they were a quarter of the server's memory per partition. A
:class:`LazyEvent` is a flag until someone waits; a waiter then parks on a bare asyncio
future (about 0.3 KB with its entry in the waiter table, against 1.5 KB for an
``anyio.Event`` with its ``asyncio.Event``, deque and waiter future: an idle partition's
sequencer waits all the time, issue 34).
"""

from __future__ import annotations

import asyncio

__all__ = ["LazyEvent"]


class LazyEvent:
    """``anyio.Event``'s interface (set, is_set, wait); waiters park on bare futures.

    Task safety: one event loop thread, like ``anyio.Event``. asyncio only (the server's
    event loop): a cancelled task (anyio cancel scopes included) cancels the future it
    waits on.
    """

    __slots__ = ("_futures", "_set")

    def __init__(self) -> None:
        self._futures: asyncio.Future[bool] | dict[asyncio.Future[bool], None] | None = None
        """Waiters of :meth:`wait` and :meth:`wait_within`: the one waiter's future, or
        (more than one) a table of them in arrival order. One waiter is the common case
        (an idle partition's sequencer waits all the time: a table was 224 more bytes
        per partition, issue 34)."""
        self._set = False

    def set(self) -> None:
        """Set the flag and wake every waiter (idempotent), in the order they came."""
        self._set = True
        futures, self._futures = self._futures, None
        if futures is None:
            return
        if isinstance(futures, dict):
            for future in futures:
                if not future.done():
                    future.set_result(True)
        elif not futures.done():
            futures.set_result(True)

    async def wait_within(
        self, seconds: float, loop: asyncio.AbstractEventLoop | None = None
    ) -> bool:
        """Wait until set, at most ``seconds``: True if it is set (at once, without
        yielding, if it already is), False on the timeout.

        A bare asyncio future with a timer: anyio's ``move_on_after`` around :meth:`wait`
        cost 17-29 us on the dev VM against 11 us for ``asyncio.timeout`` and less for
        this, on every parked Fetch. asyncio only (the server's event loop). ``loop``: the
        running loop if the caller knows it (get_running_loop calls getpid on 3.11)."""
        if self._set:
            return True
        if loop is None:
            loop = asyncio.get_running_loop()
        future: asyncio.Future[bool] = loop.create_future()
        self._add(future)
        timer = loop.call_later(seconds, _expire, future)
        try:
            return await future
        finally:
            timer.cancel()
            self._remove(future)

    def has_waiters(self) -> bool:
        """True if a :meth:`wait` or :meth:`wait_within` is parked on this event."""
        return self._futures is not None

    def is_set(self) -> bool:
        """True once :meth:`set` was called."""
        return self._set

    async def wait(self, loop: asyncio.AbstractEventLoop | None = None) -> None:
        """Return once the event is set (at once, after a checkpoint, if it already is).
        ``loop``: the running loop if the caller knows it (as :meth:`wait_within`)."""
        if self._set:
            await asyncio.sleep(0)  # the checkpoint (asyncio only: no backend look-up)
            return
        if loop is None:
            loop = asyncio.get_running_loop()
        future: asyncio.Future[bool] = loop.create_future()
        self._add(future)
        try:
            await future
        finally:
            self._remove(future)

    def _add(self, future: asyncio.Future[bool]) -> None:
        futures = self._futures
        if futures is None:
            self._futures = future
        elif isinstance(futures, dict):
            futures[future] = None
        else:
            self._futures = {futures: None, future: None}

    def _remove(self, future: asyncio.Future[bool]) -> None:
        futures = self._futures
        if futures is future:
            self._futures = None
        elif isinstance(futures, dict):
            futures.pop(future, None)


def _expire(future: asyncio.Future[bool]) -> None:
    if not future.done():
        future.set_result(False)
