"""Connections by address: at most one open per address, dialed at most once at a time.

The SDK client's connections (:mod:`jetsdk.client_dial`) and the server's connections to its
peers (``jetserver.cluster.peers``) both keep one connection per address and let concurrent
callers share one dial: the first caller dials (and greets) under the address's lock, the
others wait for it and take its connection. :class:`OpenConnections` holds that pattern once;
what a dial does (TLS, Hello, authentication) stays with its caller.

Task safety: one event loop.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Hashable
from typing import Generic, TypeVar

import anyio

from jetsdk.connection import Connection

K = TypeVar("K", bound=Hashable)


class OpenConnections(Generic[K]):
    """Open connections by key (an address), one dial per key at a time."""

    __slots__ = ("_connections", "_locks")

    def __init__(self) -> None:
        self._connections: dict[K, Connection] = {}
        self._locks: dict[K, anyio.Lock] = {}

    def open(self, key: K) -> Connection | None:
        """The open connection for ``key`` if there is one (never dials)."""
        conn = self._connections.get(key)
        return conn if conn is not None and not conn.closed else None

    def stored(self, key: K) -> Connection | None:
        """The connection last stored for ``key``, open or not."""
        return self._connections.get(key)

    async def get(self, key: K, dial: Callable[[], Awaitable[Connection]]) -> Connection:
        """The open connection for ``key``; else ``dial()``'s, stored once it returns
        (concurrent callers for one key wait for one dial). What ``dial`` raises propagates
        and nothing is stored."""
        conn = self.open(key)
        if conn is not None:
            return conn
        async with self._locks.setdefault(key, anyio.Lock()):
            conn = self.open(key)
            if conn is None:
                conn = await dial()
                self._connections[key] = conn
            return conn

    def take_all(self) -> list[Connection]:
        """Every stored connection, forgotten here (for the caller to close)."""
        connections, self._connections = list(self._connections.values()), {}
        return connections
