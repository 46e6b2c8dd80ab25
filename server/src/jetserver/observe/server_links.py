"""One long-lived client per server for the sampler of ``jet top`` and ``jet console``.

The sampler asks every server directly each second; a fresh client each time opened a new
connection to every server about once a second per tool (issue 35). A :class:`ServerLinks`
keeps one :class:`jetsdk.Client` per server address for its whole life instead (the client
reconnects by itself after the server comes back). A Client must be exited by the task
that entered it, so each one lives in a task of its own, in the links' background tasks.

Task safety: one event loop; use :meth:`ServerLinks.get` from any task.
"""

from __future__ import annotations

from collections.abc import Callable

from jetsdk import Client, JetError
from jetsdk.background import BackgroundTasks
from jetserver.observe.held import Held


class ServerLinks:
    """Clients by server address, opened on first use and kept (see the module doc)."""

    def __init__(self, open_client: Callable[[str], Client]) -> None:
        self._open_client = open_client
        self._links: dict[str, Held[Client]] = {}
        self._background = BackgroundTasks()
        self.opened = 0
        """Clients opened so far (each one connection to its server)."""

    async def __aenter__(self) -> ServerLinks:
        await self._background.open()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self._background.close()

    async def get(self, address: str) -> Client:
        """The client of ``address`` (opening it if it is not open; bound the wait with a
        cancel scope).

        Raises:
            JetError, OSError: it could not be opened (tried again at the next call).
        """
        if not self._background.is_open:
            raise RuntimeError("use ServerLinks inside `async with`")
        link = self._links.get(address)
        if link is None or link.ended:
            link = self._links[address] = Held()
            self._background.group.start_soon(self._hold, address, link)
        await link.ready.wait()
        if link.value is None:
            raise link.error or JetError(f"the client of {address} is closed")
        return link.value

    def keep_only(self, addresses: set[str]) -> None:
        """Close the clients of servers no longer listed."""
        for address in list(self._links):
            if address not in addresses:
                self._links.pop(address).closing.set()

    async def _hold(self, address: str, link: Held[Client]) -> None:
        self.opened += 1
        await link.run(lambda: self._open_client(address), (JetError, OSError))
