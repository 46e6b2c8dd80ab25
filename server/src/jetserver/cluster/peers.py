"""Client-protocol connections from this server to the other servers of the cluster.

The control plane talks to other servers over the same client protocol the SDK speaks
(spec/protocol.md): forwarded CreateStream / DeleteStream to the metadata leader, reports of
a silent partition leader, liveness probes (Hello). :class:`PeerPool` keeps one multiplexed
:class:`jetsdk.connection.Connection` per address, opened on first use and reopened after
it breaks; every request is bounded in time.

Task safety: one event loop; any number of tasks may call :meth:`PeerPool.request_json`.
Reader tasks live in the task group given to :meth:`PeerPool.start`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import anyio
import anyio.abc
import attrs

from jetsdk._version import PROTOCOL_VERSION
from jetsdk.client_requests import decode_answer
from jetsdk.codec.frames import Api
from jetsdk.codec.messages import encode_json
from jetsdk.connection import Connection
from jetsdk.errors import JetConnectionError, JetError, Timeout
from jetsdk.open_connections import OpenConnections
from jetsdk.transport import parse_address
from jetserver.security.peer import PLAIN, PeerSecurity

DEFAULT_CONNECT_TIMEOUT_S = 2.0
"""Bound on connecting to a peer and getting its Hello answer."""
PEER_CLIENT_NAME = "jetserver-peer"
"""The ``client`` sent in Hello by server-to-server connections."""


@attrs.define(eq=False)
class PeerPool:
    """Connections to other servers, by client address (``host:port``)."""

    connect_timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S
    """Bound on connect + Hello."""
    security: PeerSecurity = PLAIN
    """TLS and the internal token for peer connections."""
    on_lost: Callable[[str], None] | None = None
    """Called with a peer's address when an open connection to it ends without this pool
    closing it (the peer closed it, or its process is gone: a kill -9 ends every
    connection to it at once), so that the liveness probes that server now."""
    _tg: anyio.abc.TaskGroup | None = None
    _pool: OpenConnections[str] = attrs.field(factory=OpenConnections)
    _closed: bool = False

    def start(self, tg: anyio.abc.TaskGroup) -> None:
        """Use ``tg`` for the connections' reader tasks."""
        self._tg = tg

    async def aclose(self) -> None:
        """Close every connection (idempotent)."""
        self._closed = True
        for conn in self._pool.take_all():
            await conn.aclose()

    async def _connection(self, address: str) -> Connection:
        if self._tg is None or self._closed:
            raise JetConnectionError("the peer pool is not running")
        tg = self._tg

        async def dial() -> Connection:
            try:
                target = parse_address(address)
            except JetError as exc:
                raise JetConnectionError(f"bad peer address {address!r}: {exc}") from exc
            stream = await self.security.dial(target, self.connect_timeout_s)
            conn = Connection(stream, label=address)
            await tg.start(self._run, conn, address)
            try:
                body = encode_json({"protocol": PROTOCOL_VERSION, "client": PEER_CLIENT_NAME})
                answer = await conn.request(Api.HELLO, body, timeout=self.connect_timeout_s)
                conn.server_info = decode_answer(answer)
                await self.security.authenticate(conn, self.connect_timeout_s)
            except BaseException:
                await conn.aclose()
                raise
            return conn

        return await self._pool.get(address, dial)

    async def _run(
        self,
        conn: Connection,
        address: str,
        *,
        task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
    ) -> None:
        """The connection's reader task; :attr:`on_lost` once it ends by the peer's doing."""
        await conn.run(task_status=task_status)
        if not self._closed and self._pool.stored(address) is conn and self.on_lost:
            self.on_lost(address)

    async def request(self, address: str, api: int, body: bytes, timeout_s: float) -> bytes:
        """Send one request to the server at ``address``; return the response body.

        Raises:
            JetError: the server's error, a Timeout, or JetConnectionError (the connection is
                reopened on the next call).
        """
        try:
            with anyio.fail_after(timeout_s + self.connect_timeout_s):
                conn = await self._connection(address)
                return await conn.request(api, body, timeout=timeout_s)
        except TimeoutError:
            raise Timeout(f"no answer from {address} within {timeout_s} s") from None

    async def request_json(
        self, address: str, api: int, request: dict[str, Any], timeout_s: float
    ) -> dict[str, Any]:
        """:meth:`request` with JSON bodies.

        Raises:
            JetError: as :meth:`request`; MalformedFrame for a body that is not JSON.
        """
        return decode_answer(await self.request(address, api, encode_json(request), timeout_s))

    async def hello(self, address: str, timeout_s: float) -> dict[str, Any]:
        """A Hello round trip (a liveness probe); returns the Hello answer."""
        return await self.request_json(
            address,
            Api.HELLO,
            {"protocol": PROTOCOL_VERSION, "client": PEER_CLIENT_NAME},
            timeout_s,
        )
