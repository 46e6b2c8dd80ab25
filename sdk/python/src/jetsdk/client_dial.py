"""How a Client reaches servers: the server list, the dialer, Hello and authentication,
and the pool of open connections (one per server address)."""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Sequence
from ssl import SSLContext
from typing import Any

import anyio
import anyio.abc

from jetsdk._version import PROTOCOL_VERSION
from jetsdk.client_requests import decode_answer
from jetsdk.codec.frames import Api
from jetsdk.codec.messages import encode_json
from jetsdk.connection import Connection
from jetsdk.errors import InvalidArgument, JetConnectionError, JetError, UnsupportedApi
from jetsdk.metadata import ClusterMetadata
from jetsdk.open_connections import OpenConnections
from jetsdk.security import Credentials, authenticate, tls_context, tls_dialer
from jetsdk.transport import DEFAULT_PORT, Address, Dialer, parse_address, tcp_dialer

__all__ = [
    "DEFAULT_SERVERS",
    "ENV_SERVERS",
    "ConnectionPool",
    "choose_dialer",
    "configured_servers",
    "greet",
    "resolve_servers",
]

DEFAULT_SERVERS = (f"127.0.0.1:{DEFAULT_PORT}",)
"""Used when neither ``servers`` nor $JET_SERVERS is given."""
ENV_SERVERS = "JET_SERVERS"
"""Environment variable holding a comma-separated server list."""
ADDRESSES_CACHED = 4096
"""Most server addresses :func:`_listed_address` remembers parsed (least recently used
dropped first): a producer looks its leader's up for every batch it sends."""


@functools.lru_cache(maxsize=ADDRESSES_CACHED)
def _listed_address(text: str) -> Address:
    """:func:`parse_address` of an address the metadata lists, remembered."""
    return parse_address(text)


def configured_servers() -> str:
    """The server list a Client given none uses: $JET_SERVERS, else :data:`DEFAULT_SERVERS`
    (comma-separated)."""
    return os.environ.get(ENV_SERVERS) or ",".join(DEFAULT_SERVERS)


def resolve_servers(servers: str | Sequence[str] | None) -> list[Address]:
    """Parse a server list: a sequence, a comma-separated string, or None ($JET_SERVERS,
    then 127.0.0.1:9292).

    Raises:
        InvalidArgument: an empty list or a malformed address.
    """
    if servers is None:
        servers = configured_servers()
    if isinstance(servers, str):
        servers = servers.split(",")
    addresses = [parse_address(s) for s in servers if s.strip()]
    if not addresses:
        raise InvalidArgument("no servers given", details={"field": "servers"})
    return addresses


def choose_dialer(
    tls: SSLContext | bool | None,
    tls_ca: str | None,
    tls_cert: str | None,
    tls_key: str | None,
    server_hostname: str | None,
) -> Dialer:
    """Plain TCP, or TLS when any TLS option is given (see :class:`~jetsdk.client.Client`).

    Raises:
        InvalidArgument: unusable TLS files.
    """
    if isinstance(tls, SSLContext):
        return tls_dialer(tls, server_hostname)
    if tls or tls_ca or tls_cert or tls_key:
        return tls_dialer(tls_context(tls_ca, tls_cert, tls_key), server_hostname)
    return tcp_dialer


async def greet(
    conn: Connection,
    *,
    client_name: str,
    credentials: Credentials | None,
    timeout: float,
) -> tuple[dict[str, Any], str | None]:
    """Send Hello and authenticate when the server requires it and did not already (TLS
    identity). Returns the Hello answer and the identity given (None: none).

    Raises:
        JetConnectionError: no Hello answer. UnsupportedApi: another protocol version.
        Unauthenticated: the credentials were refused.
    """
    body = encode_json({"protocol": PROTOCOL_VERSION, "client": client_name})
    try:
        answer = await conn.request(Api.HELLO, body, timeout=timeout)
    except JetError as exc:
        if isinstance(exc, UnsupportedApi):
            raise
        raise JetConnectionError(f"no Hello answer from {conn.label}: {exc}") from exc
    hello = decode_answer(answer)
    if hello.get("protocol", PROTOCOL_VERSION) != PROTOCOL_VERSION:
        raise UnsupportedApi(
            f"{conn.label} speaks protocol {hello.get('protocol')}, not {PROTOCOL_VERSION}"
        )
    identity = hello.get("identity")
    if isinstance(identity, str):
        return hello, identity
    if hello.get("auth_required") is True and credentials is not None:
        return hello, await authenticate(conn, credentials, timeout)
    return hello, None


class ConnectionPool:
    """A Client's connections: at most one per server address, each greeted once.

    Task safety: one event loop; concurrent dials of one address share one connection.
    """

    def __init__(
        self,
        dialer: Dialer,
        connect_timeout: float,
        client_name: str,
        credentials: Credentials | None,
    ) -> None:
        self._dialer = dialer
        self._connect_timeout = connect_timeout
        self._client_name = client_name
        self._credentials = credentials
        self._pool: OpenConnections[Address] = OpenConnections()
        self.address_of_id: dict[str, Address] = {}
        """Server id -> the address its Hello answer came from (or the metadata lists)."""
        self.bootstrap: Connection | None = None
        """The connection admin requests go to (any reachable server)."""
        self.identity: str | None = None
        """The identity the last authenticated connection was given (None: none yet)."""

    def address_for(self, metadata: ClusterMetadata, server_id: str) -> Address | None:
        """Where server ``server_id`` listens: the metadata's address first (a server
        restarted on another port is listed there with its new address, while the id
        learned from Hello names the old one), else the one its Hello came from."""
        server = metadata.servers.get(server_id)
        if server is not None:
            return _listed_address(server.address)
        return self.address_of_id.get(server_id)

    def open_connection(self, address: Address) -> Connection | None:
        """The open connection to ``address`` if there is one (never dials)."""
        return self._pool.open(address)

    async def get(
        self, tg: anyio.abc.TaskGroup, address: Address, check_open: Callable[[], object]
    ) -> Connection:
        """The open connection to ``address``, dialed and greeted first if needed; its
        reader task runs in ``tg``. ``check_open`` raises once the client closed.

        Raises:
            JetConnectionError, UnsupportedApi, Unauthenticated.
        """
        conn = self._pool.open(address)
        if conn is not None:  # the common case: no dial closure made
            return conn

        async def dial() -> Connection:
            stream = await self._dialer(address, self._connect_timeout)
            conn = Connection(stream, label=str(address))
            await tg.start(conn.run)
            try:
                hello, identity = await greet(
                    conn,
                    client_name=self._client_name,
                    credentials=self._credentials,
                    timeout=self._connect_timeout,
                )
            except BaseException:
                await conn.aclose()
                raise
            check_open()
            conn.server_info = hello
            if identity is not None:
                self.identity = identity
            server_id = hello.get("server_id")
            if isinstance(server_id, str):
                self.address_of_id[server_id] = address
            return conn

        return await self._pool.get(address, dial)

    async def any(
        self,
        tg: anyio.abc.TaskGroup,
        candidates: Sequence[Address | str],
        check_open: Callable[[], object],
    ) -> Connection:
        """The bootstrap connection if open, else the first of ``candidates`` (addresses,
        or strings parsed as such: unparsable ones are skipped), then of every server
        address learned so far, that answers.

        Raises:
            JetConnectionError: none answered (every failure is named).
        """
        if self.bootstrap is not None and not self.bootstrap.closed:
            return self.bootstrap
        tried: list[Address] = []
        for candidate in [*candidates, *self.address_of_id.values()]:
            if isinstance(candidate, str):
                try:
                    candidate = parse_address(candidate)
                except InvalidArgument:
                    continue
            if candidate not in tried:
                tried.append(candidate)
        failures: list[str] = []
        for address in tried:
            try:
                conn = await self.get(tg, address, check_open)
            except (JetConnectionError, UnsupportedApi) as exc:
                failures.append(str(exc))
                continue
            self.bootstrap = conn
            return conn
        raise JetConnectionError("could not connect to any server: " + "; ".join(failures))

    async def close_all(self) -> None:
        """Close every connection (a later :meth:`get` dials again)."""
        connections = self._pool.take_all()
        self.bootstrap = None
        for conn in connections:
            await conn.aclose()
