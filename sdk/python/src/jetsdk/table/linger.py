"""The linger of a table's readers: after an answer that caught its partition up, a reader
waits :attr:`Linger.seconds` before it asks again, or less if someone waits for the view
(:meth:`Linger.hurry`: ``Table.sync``, ``Table.wait_for``).

On asyncio a wait is a future and a ``call_later`` timer: an anyio ``move_on_after`` scope
around an event's wait (as before) ran about a thousand Python lines per update of 4 tables
racing on one counter, a fifth of their process's lines (the scope's deadline cancels the
task, and anyio delivers and then withdraws that cancellation over several loop turns).
Under another event loop (trio) the wait is that scope and an anyio event.

While the table's compare-and-sets race (:meth:`Linger.raced`: a ``Table.modify`` try was
refused within the last :data:`RACING_WINDOW_S`), a wait lasts :data:`RACING_FACTOR` times
as long: the racing writers build on the values their refusals carry and on their own
answers, not on the view, and each Fetch answer costs the server and this process about
as much as a compare-and-set try (4 tables racing on one counter, 400 updates, load 9-13:
linger 20 ms took 0.34-0.50 answers per won update, 100 ms 0.06-0.13, and the CPU per
update of the client, 866 -> 536 us, and of the server, 1,350 -> 1,050 us, fell with them).
A watcher of a racing table sees its changes up to that much later; ``Table.sync`` and
``Table.wait_for`` still end a wait at once.
"""

from __future__ import annotations

import asyncio
import time

import anyio
import attrs

from jetsdk.transport import running_asyncio_loop

RACING_FACTOR = 5
"""A wait while compare-and-sets race lasts this many times :attr:`Linger.seconds`."""
RACING_WINDOW_S = 1.0
"""How long after a refused ``modify`` try the table's compare-and-sets count as racing."""


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
    _racing_until: float = 0.0
    """Until when (``time.monotonic``) compare-and-sets count as racing (:meth:`raced`)."""
    hurries: int = 0
    """:meth:`hurry` calls so far (a reader reads it before its Fetch: :meth:`wait`)."""

    def raced(self) -> None:
        """A compare-and-set try of the table was refused: waits starting within
        :data:`RACING_WINDOW_S` last :data:`RACING_FACTOR` times as long."""
        self._racing_until = time.monotonic() + RACING_WINDOW_S

    async def wait(self, since: int | None = None) -> None:
        """Return after :attr:`seconds` (longer while compare-and-sets race: :meth:`raced`),
        or once :meth:`hurry` is called (cancellable); at once if it was called since
        :attr:`hurries` was ``since`` (a reader's Fetch was under way when someone began
        to wait for the view: its answer may predate what they wait for)."""
        if since is not None and since != self.hurries:
            return
        seconds = self.seconds
        if self._racing_until and time.monotonic() < self._racing_until:
            seconds *= RACING_FACTOR
        loop = self._loop
        if loop is None:
            if self._hurried is None:
                self._hurried = anyio.Event()
            with anyio.move_on_after(seconds):
                await self._hurried.wait()
            return
        future: asyncio.Future[None] = loop.create_future()
        timer = loop.call_later(seconds, _end, future)
        self._waiting.add(future)
        try:
            await future
        finally:
            timer.cancel()
            self._waiting.discard(future)

    def hurry(self) -> None:
        """End every wait under way now (and the next of a reader whose Fetch is under
        way: :meth:`wait`'s ``since``)."""
        self.hurries += 1
        for future in self._waiting:
            _end(future)
        if self._hurried is not None:
            self._hurried.set()
            self._hurried = None


def _end(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)
