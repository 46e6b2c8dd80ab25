"""The linger of a table's readers: after an answer that caught its partition up, a reader
waits :attr:`Linger.seconds` before it asks again, or less if someone waits for the view
(:meth:`Linger.hurry`: ``Table.sync``, ``Table.wait_for``).

On asyncio a wait is a future and a ``call_later`` timer: an anyio ``move_on_after`` scope
around an event's wait (as before) ran about a thousand Python lines per update of 4 tables
racing on one counter, a fifth of their process's lines (the scope's deadline cancels the
task, and anyio delivers and then withdraws that cancellation over several loop turns).
Under another event loop (trio) the wait is that scope and an anyio event.
"""

from __future__ import annotations

import asyncio

import anyio
import attrs

from jetsdk.transport import running_asyncio_loop


@attrs.define(eq=False)
class Linger:
    """Waits of ``seconds`` each, all ended early by :meth:`hurry` (module docstring).
    Made in the event loop its waits run in."""

    seconds: float
    _loop: asyncio.AbstractEventLoop | None = attrs.field(factory=running_asyncio_loop)
    """The running asyncio loop (None: another event loop)."""
    _waiting: set[asyncio.Future[None]] = attrs.field(factory=set)
    """The futures of the waits under way (asyncio)."""
    _hurried: anyio.Event | None = None
    """What the waits under way wait for under another event loop (made by the first)."""

    async def wait(self) -> None:
        """Return after :attr:`seconds`, or once :meth:`hurry` is called (cancellable)."""
        loop = self._loop
        if loop is None:
            if self._hurried is None:
                self._hurried = anyio.Event()
            with anyio.move_on_after(self.seconds):
                await self._hurried.wait()
            return
        future: asyncio.Future[None] = loop.create_future()
        timer = loop.call_later(self.seconds, _end, future)
        self._waiting.add(future)
        try:
            await future
        finally:
            timer.cancel()
            self._waiting.discard(future)

    def hurry(self) -> None:
        """End every wait under way now."""
        for future in self._waiting:
            _end(future)
        if self._hurried is not None:
            self._hurried.set()
            self._hurried = None


def _end(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)
