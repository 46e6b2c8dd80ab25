"""One call's write in a table's writer (:mod:`jetsdk.table.writes`), waiting for its
result or for its turn to gather a round. Task safety: the writer's event loop only."""

from __future__ import annotations

import asyncio

import anyio
import attrs

from jetsdk.codec.messages import ProduceMessage, ProduceResult
from jetsdk.errors import JetError

__all__ = ["QueuedWrite"]


@attrs.define(eq=False)
class QueuedWrite:
    """One call's message, waiting for its result or for its turn to start a round."""

    key: bytes
    expected: int | None
    message: ProduceMessage
    partition: int
    seq: int = -1
    _woken: bool = False
    _future: asyncio.Future[None] | None = None
    """What a waiting caller awaits under asyncio (a future: a tenth of an anyio event's
    cost, as :class:`jetsdk.connection.PendingResponse`); made only if it waits."""
    _event: anyio.Event | None = None
    """The same under another event loop (trio)."""
    result: ProduceResult | None = None
    error: BaseException | None = None
    sends: bool = False
    """Its caller gathers the next round (set before it is woken)."""
    retry_error: JetError | None = None
    """Why its last try must be repeated (raised if the tries run out)."""

    @property
    def done(self) -> bool:
        """Its outcome is known."""
        return self.result is not None or self.error is not None

    def wake(self) -> None:
        """Its result is known or its turn to gather came (the next :meth:`wait` returns)."""
        self._woken = True
        future = self._future
        if future is not None:
            if not future.done():
                future.set_result(None)
        elif self._event is not None:
            self._event.set()

    async def wait(self, loop: asyncio.AbstractEventLoop | None) -> None:
        """Return once :meth:`wake` was called since the last wait (cancellable).
        ``loop``: the running asyncio loop (None: another event loop, trio)."""
        if not self._woken:
            if loop is not None:
                self._future = loop.create_future()
                await self._future
            else:
                self._event = anyio.Event()
                await self._event.wait()
        self._woken = False
        self._future = self._event = None
