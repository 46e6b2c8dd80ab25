"""The client: connections to the cluster, the metadata cache, admin calls, request routing.

Usage::

    async with Client(["127.0.0.1:9292"]) as client:
        await client.create_stream("orders", "orders", partitions=3)
        for info in await client.list_streams():
            print(info.name, info.partition_count)

A Client connects to the first reachable server in ``servers`` (sending Hello), keeps a
metadata cache (streams, partitions, leaders, server addresses) and routes partition
requests (Produce, Fetch, ListOffsets) to the partition's leader, opening one connection per
server as needed (at the address the metadata lists for the leader's id). A ``NotLeader``,
a lost connection or an ``Unavailable`` server refreshes the metadata and the request is
retried with bounded exponential backoff (:class:`~jetsdk.retry.RetryPolicy`), so requests
follow a partition leader that moved after a failure. Connections that break are reopened
on next use; the bootstrap connection moves to any server the metadata lists.

Admin requests (CreateStream, DeleteStream) go to any server, which forwards them to the
metadata leader of a cluster; each carries an ``op_id`` kept across the client's retries, so
a retry after a lost answer is applied at most once.

All background work (one reader task per connection) runs in a task group owned by the
``async with`` block; nothing starts before ``__aenter__`` and nothing outlives
``__aexit__``.

Task safety: one event loop; any number of tasks (producers, consumers, admin calls) may
share one Client. For threads, use :mod:`jetsdk.sync`.
"""

from __future__ import annotations

import random
from collections.abc import Awaitable, Callable, Sequence
from ssl import SSLContext
from typing import Any, TypeVar
from uuid import uuid4

import anyio
import anyio.abc

from jetsdk._version import __version__
from jetsdk.background import BackgroundTasks
from jetsdk.client_dial import (
    DEFAULT_SERVERS,
    ENV_SERVERS,
    ConnectionPool,
    choose_dialer,
    resolve_servers,
)
from jetsdk.client_metadata import MetadataCache
from jetsdk.client_requests import (
    CREATE_OPTIONS,
    Durability,
    OffsetPosition,
    create_stream_body,
    datetime_to_ns,
    decode_answer,
    decode_fetch_answer,
    decode_produce_answer,
    list_offsets_body,
    parse_answer,
    parse_create_answer,
    partitions_matching,
)
from jetsdk.codec.fetch_messages import FetchRequest, FetchResponseHeader, encode_fetch_request
from jetsdk.codec.frames import Api
from jetsdk.codec.limits import DEFAULT_MAX_FRAME_BYTES, DEFAULT_MAX_MESSAGE_BYTES
from jetsdk.codec.messages import ProduceRequest, ProduceResult, encode_json, encode_produce_request
from jetsdk.connection import Connection, PendingResponse, RequestBody
from jetsdk.describe import describe_at_leaders
from jetsdk.errors import (
    ClientClosed,
    JetError,
    PartitionNotFound,
    StreamNotFound,
    Unavailable,
)
from jetsdk.metadata import ClusterMetadata, OffsetInfo, PartitionInfo, StreamInfo
from jetsdk.retry import DEFAULT_RETRY, RetryPolicy, is_retriable, retry_calls
from jetsdk.security import Credentials
from jetsdk.stream_admin import purge_body, update_body
from jetsdk.transport import Address, Dialer

__all__ = [
    "DEFAULT_CONNECT_TIMEOUT",
    "DEFAULT_REQUEST_TIMEOUT",
    "DEFAULT_SERVERS",
    "ENV_SERVERS",
    "Client",
    "OffsetPosition",
    "datetime_to_ns",
    "resolve_servers",
]

_T = TypeVar("_T")

DEFAULT_CONNECT_TIMEOUT = 5.0
"""Seconds to connect and get the Hello answer from one server."""
DEFAULT_REQUEST_TIMEOUT = 30.0
"""Seconds to wait for a response (a Fetch adds its own long-poll wait on top)."""


class Client:
    """A connection to a jet cluster. Use as ``async with Client(...) as client:``."""

    def __init__(
        self,
        servers: str | Sequence[str] | None = None,
        *,
        connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
        request_timeout: float = DEFAULT_REQUEST_TIMEOUT,
        retry: RetryPolicy = DEFAULT_RETRY,
        dialer: Dialer | None = None,
        client_name: str = f"jetsdk/{__version__}",
        tls: SSLContext | bool | None = None,
        tls_ca: str | None = None,
        tls_cert: str | None = None,
        tls_key: str | None = None,
        server_hostname: str | None = None,
        credentials: Credentials | None = None,
        token: str | None = None,
        user: str | None = None,
        password: str | None = None,
    ) -> None:
        """Configure a client; it connects in ``__aenter__``.

        Args:
            servers: bootstrap servers (``"host:port"`` strings or one comma-separated
                string); default $JET_SERVERS, then ``127.0.0.1:9292``.
            connect_timeout: seconds to connect to one server and get its Hello answer.
            request_timeout: seconds to wait for any response.
            retry: retry policy for retriable errors.
            dialer: opens byte streams (tests pass :meth:`jetsdk.memory.MemoryNetwork.dial`);
                default plain TCP, or TLS when a TLS option is given.
            client_name: sent in Hello.
            tls: an ``SSLContext`` to connect with TLS, or True for a default context
                (built from ``tls_ca``/``tls_cert``/``tls_key`` if given).
            tls_ca: PEM file, the CA bundle to verify servers with (turns TLS on).
            tls_cert: PEM file, the client certificate to present (turns TLS on).
            tls_key: PEM file, the client certificate's key (turns TLS on).
            server_hostname: name checked against server certificates (default: the host
                of each address).
            credentials: what to authenticate with when a server requires it (or pass
                ``token``, or ``user`` and ``password``).

        Raises:
            InvalidArgument: a malformed server address, unusable TLS files, or conflicting
                credentials.
        """
        self._bootstrap_addresses = resolve_servers(servers)
        if credentials is None and (token is not None or user is not None or password):
            credentials = Credentials(token=token, user=user, password=password)
        self.credentials = credentials
        if dialer is None:
            dialer = choose_dialer(tls, tls_ca, tls_cert, tls_key, server_hostname)
        self.connect_timeout = connect_timeout
        self.request_timeout = request_timeout
        self.retry = retry
        self._pool = ConnectionPool(dialer, connect_timeout, client_name, credentials)
        self._tg: anyio.abc.TaskGroup | None = None
        self._closed = False
        self._read_replica: dict[tuple[str, int], str] = {}
        self.metadata_cache = MetadataCache(self._pool)
        """The metadata requests are routed by (a producer keeps its leader look-ups
        while its epoch stays: :class:`~jetsdk.client_metadata.PartitionLeaders`)."""
        self._metadata_lock: anyio.Lock | None = None
        self._background = BackgroundTasks()

    # -- lifecycle ------------------------------------------------------------------------

    async def __aenter__(self) -> Client:
        if self._tg is not None or self._closed:
            raise ClientClosed("a Client can be entered once")
        self._metadata_lock = anyio.Lock()
        self._tg = await self._background.open()
        try:
            await self._any_connection()
        except BaseException:
            self._closed = self.metadata_cache.closed = True
            await self._pool.close_all()
            await self._background.close()
            raise
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        self._closed = self.metadata_cache.closed = True
        await self._pool.close_all()
        await self._background.close()
        return None

    @property
    def server_info(self) -> dict[str, Any]:
        """The Hello answer of the server this client bootstrapped from."""
        bootstrap = self._pool.bootstrap
        return dict(bootstrap.server_info) if bootstrap else {}

    @property
    def identity(self) -> str | None:
        """The identity the last authenticated connection was given (None: none yet)."""
        return self._pool.identity

    @property
    def max_message_bytes(self) -> int:
        """The server's message size limit (from Hello; the default if unknown)."""
        value = self.server_info.get("max_message_bytes")
        return value if isinstance(value, int) else DEFAULT_MAX_MESSAGE_BYTES

    @property
    def max_frame_bytes(self) -> int:
        """The server's frame limit (from Hello; the default if unknown)."""
        value = self.server_info.get("max_frame_bytes")
        return value if isinstance(value, int) else DEFAULT_MAX_FRAME_BYTES

    # -- connections ----------------------------------------------------------------------

    def _check_open(self) -> anyio.abc.TaskGroup:
        if self._closed:
            raise ClientClosed("the client is closed")
        if self._tg is None:
            raise ClientClosed("use the client inside `async with Client(...) as client:`")
        return self._tg

    async def _connection(self, address: Address) -> Connection:
        return await self._pool.get(self._check_open(), address, self._check_open)

    async def _any_connection(self) -> Connection:
        """The bootstrap connection: any reachable server."""
        listed = [server.address for server in self.metadata_cache.metadata.servers.values()]
        return await self._pool.any(
            self._check_open(), [*self._bootstrap_addresses, *listed], self._check_open
        )

    async def _server_connection(self, server_id: str) -> Connection:
        address = self._pool.address_for(self.metadata_cache.metadata, server_id)
        if address is None:
            self.metadata_cache.mark_stale()
            raise Unavailable(f"server {server_id!r} is not in the metadata")
        return await self._connection(address)

    async def _retrying(
        self,
        attempt: Callable[[], Awaitable[_T]],
        *,
        retry_if: Callable[[JetError], bool] = is_retriable,
    ) -> _T:
        return await retry_calls(
            attempt,
            self.retry,
            retry_if=lambda exc: retry_if(exc) and not self._closed,
            on_metadata_stale=self.metadata_cache.mark_stale,
        )

    async def request_any(self, api: int, body: bytes, *, timeout: float | None = None) -> bytes:
        """Send a request to any server (admin APIs), retrying retriable errors.

        Raises:
            JetError: the server's error, or JetConnectionError if no server is reachable.
        """

        async def attempt() -> bytes:
            conn = await self._any_connection()
            return await conn.request(api, body, timeout=timeout or self.request_timeout)

        return await self._retrying(attempt)

    # -- metadata -------------------------------------------------------------------------

    async def refresh_metadata(self) -> ClusterMetadata:
        """Fetch the full metadata now (concurrent callers share one request)."""
        self._check_open()
        assert self._metadata_lock is not None
        cache = self.metadata_cache
        version = cache.version
        async with self._metadata_lock:
            if cache.version == version:
                answer = await self.request_any(Api.METADATA, encode_json({"streams": None}))
                cache.install(parse_answer(ClusterMetadata.from_json, answer))
        return cache.metadata

    async def metadata(self, *, refresh: bool = False) -> ClusterMetadata:
        """The cached metadata (fetched first if stale, missing, or ``refresh``)."""
        if refresh or self.metadata_cache.stale:
            return await self.refresh_metadata()
        return self.metadata_cache.metadata

    async def stream_info(self, name: str, *, refresh: bool = False) -> StreamInfo:
        """A stream's metadata from the cache (refreshed once if the stream is missing).
        With ``refresh``: fresh, with each partition's ``hw``, ``leo``, ``log_start``,
        ``size_bytes`` and ``segments`` as its leader describes them (None if it has no
        leader or its leader does not answer at once).

        Raises:
            StreamNotFound: no such stream.
        """
        meta = await self.metadata(refresh=refresh)
        info = meta.streams.get(name)
        if info is None and not refresh:
            meta = await self.refresh_metadata()
            info = meta.streams.get(name)
        if info is None:
            raise StreamNotFound(f"stream {name!r} does not exist", details={"stream": name})
        if refresh:
            info = await describe_at_leaders(info, self._server_connection, self.connect_timeout)
        return info

    async def partition_info(self, stream: str, partition: int) -> PartitionInfo:
        """A partition's metadata from the cache.

        Raises:
            StreamNotFound, PartitionNotFound: no such stream or partition.
        """
        info = await self.stream_info(stream)
        part = info.partition(partition)
        if part is None:
            raise PartitionNotFound(
                f"stream {stream!r} has no partition {partition}",
                details={"stream": stream, "partition": partition},
            )
        return part

    async def streams_for_subject(self, subject: str) -> list[tuple[StreamInfo, int]]:
        """Every (stream, partition) whose partition subject matches the literal ``subject``,
        ordered by stream name."""
        return partitions_matching(await self.metadata(refresh=True), subject)

    # -- partition routing ----------------------------------------------------------------

    async def leader_connection(self, stream: str, partition: int) -> Connection:
        """The connection to the partition's leader (metadata refreshed if stale).

        Raises:
            JetError: StreamNotFound, PartitionNotFound, Unavailable (no leader) or
                JetConnectionError.
        """
        part = await self.partition_info(stream, partition)
        if part.leader is None:
            self.metadata_cache.mark_stale()
            raise Unavailable(f"partition {stream}/{partition} has no leader")
        return await self._server_connection(part.leader)

    def leader_connection_now(self, stream: str, partition: int) -> Connection | None:
        """The open connection to the partition's leader, if the cached metadata (not
        stale) names one and a connection to it is open; None otherwise (then
        :meth:`leader_connection`, which may refresh and dial). Never waits."""
        return self.metadata_cache.leader_connection_now(stream, partition)

    async def replica_connection(self, stream: str, partition: int) -> Connection:
        """A connection to an in-sync follower of the partition (read replicas), or to its
        leader if the ISR holds no follower. The follower is picked at random once per
        partition and kept until a fetch from it fails.

        Raises:
            JetError: StreamNotFound, PartitionNotFound, Unavailable or JetConnectionError.
        """
        part = await self.partition_info(stream, partition)
        followers = [r for r in part.isr if r != part.leader]
        key = (stream, partition)
        chosen = self._read_replica.get(key)
        if chosen not in followers:
            if not followers:
                self._read_replica.pop(key, None)
                return await self.leader_connection(stream, partition)
            chosen = random.choice(followers)
            self._read_replica[key] = chosen
        return await self._server_connection(chosen)

    async def send_to_leader(
        self, stream: str, partition: int, api: int, body: bytes
    ) -> PendingResponse:
        """Write a request to the partition leader without waiting (no retries).

        Two calls from one task reach the leader in call order (same connection).
        """
        conn = await self.leader_connection(stream, partition)
        return await conn.send(api, body)

    async def request_leader(
        self,
        stream: str,
        partition: int,
        api: int,
        body: RequestBody,
        *,
        timeout: float | None = None,
        retry_if: Callable[[JetError], bool] = is_retriable,
    ) -> bytes:
        """Send a request (``body`` whole or in parts) to the partition leader, retrying per
        ``retry_if`` (after a metadata refresh when the leader may have moved).

        Raises:
            JetError: the last error once retries are exhausted or it is not retriable.
        """

        async def attempt() -> bytes:
            conn = await self.leader_connection(stream, partition)
            return await conn.request(api, body, timeout=timeout or self.request_timeout)

        return await self._retrying(attempt, retry_if=retry_if)

    async def produce(
        self,
        request: ProduceRequest,
        *,
        timeout: float | None = None,
        retry_if: Callable[[JetError], bool] = is_retriable,
    ) -> list[ProduceResult]:
        """Send one Produce request to the leader; return one result per message.

        The server's own ``timeout_ms`` is in the request; ``timeout`` bounds the wait for
        the response (default: that plus the client's request timeout).
        """
        body = encode_produce_request(request)
        wait = timeout if timeout is not None else request.timeout_ms / 1000 + self.request_timeout
        answer = await self.request_leader(
            request.stream, request.partition, Api.PRODUCE, body, timeout=wait, retry_if=retry_if
        )
        return decode_produce_answer(
            answer, len(request.messages), request.current_values, request.latest_values
        )

    async def fetch(
        self,
        stream: str,
        partition: int,
        offset: int,
        *,
        max_bytes: int,
        max_wait: float,
        read_replicas: bool = False,
    ) -> tuple[FetchResponseHeader, memoryview]:
        """One Fetch (long poll) from the partition leader, retrying retriable errors.

        With ``read_replicas``, from an in-sync follower instead (see
        :meth:`replica_connection`): it serves committed records too, up to its own high
        watermark, which lags the leader's slightly (spec/cluster.md, "Read replicas").

        Returns the response header and the raw record bytes (decode them with
        :func:`jetsdk.codec.record.iter_records`).

        Raises:
            OffsetOutOfRange: ``offset`` is below the log start or above the HW (the error's
                ``log_start`` and ``hw`` say where the log is).
            JetError: other errors.
        """
        wait_ms = max(0, int(max_wait * 1000))
        body = encode_fetch_request(FetchRequest(stream, partition, offset, max_bytes, wait_ms))
        wait = max_wait + self.request_timeout

        async def attempt() -> tuple[FetchResponseHeader, memoryview]:
            if not read_replicas:
                conn = await self.leader_connection(stream, partition)
                answer = await conn.request_buffer(Api.FETCH, body, timeout=wait)
            else:
                conn = await self.replica_connection(stream, partition)
                try:
                    answer = await conn.request_buffer(Api.FETCH, body, timeout=wait)
                except JetError:
                    self._read_replica.pop((stream, partition), None)  # pick again
                    raise
            return decode_fetch_answer(answer, stream, partition, offset)

        return await self._retrying(attempt)

    # -- admin ----------------------------------------------------------------------------

    async def create_stream(
        self,
        name: str,
        subject: str | None = None,
        *,
        partitions: int = 1,
        replication_factor: int = 1,
        compact: bool = False,
        group: str | None = None,
        retention_max_age: float | None = None,
        retention_max_bytes: int | None = None,
        retention_max_messages: int | None = None,
        segment_max_bytes: int | None = None,
        segment_max_age: float | None = None,
        delete_retention: float | None = None,
        max_message_bytes: int | None = None,
        min_isr: int | None = None,
        durability: Durability | None = None,
        duplicate_window: float | None = None,
        no_nats_copies: bool = False,
        exist_ok: bool = True,
    ) -> StreamInfo:
        """Create a stream listening on ``subject`` (default: the name).

        Creating a stream that exists with the same settings succeeds (idempotent) unless
        ``exist_ok`` is False. Durations are float seconds; None leaves the server default.
        ``min_isr``: fewest in-sync replicas for an ALL ack (default 2 when the replication
        factor is 3 or more, else 1). ``durability``: ``"flushed"`` (default: an ALL ack
        means fsynced on every in-sync replica), ``"replicated"`` (fsynced on the leader,
        written on the followers) or ``"written"`` (replication factor 1 only: committed
        and visible once written, before the fsync, like Kafka's and JetStream's defaults;
        a power loss or a failed fsync can lose the last milliseconds of acknowledged
        records); see spec/cluster.md, "Durability". ``duplicate_window``: how long a plain
        NATS message's ``Nats-Msg-Id`` is remembered for deduplication (default 120 s).
        ``no_nats_copies`` (replication factor 1, no ``group``): the records the server
        stores from jet Produce requests (this SDK's producers) are not also published to
        NATS, so plain NATS subscribers and other streams on the subject do not see them
        (for streams read through jet only; spec/protocol.md §6).

        Raises:
            StreamExists: the name exists with other settings (or at all, if not exist_ok).
            InvalidArgument: a bad name, subject or option (``field``), found here or by the server.
        """
        options = {k: v for k, v in locals().items() if k in CREATE_OPTIONS}
        body = create_stream_body(name, subject, **options)
        answer = await self.request_any(Api.CREATE_STREAM, body)
        self.metadata_cache.mark_stale()
        return parse_create_answer(name, answer, exist_ok=exist_ok)

    async def delete_stream(self, name: str) -> None:
        """Delete a stream and its data.

        Raises:
            StreamNotFound: no such stream.
        """
        body = encode_json({"op_id": uuid4().hex, "name": name})
        await self.request_any(Api.DELETE_STREAM, body)
        self.metadata_cache.mark_stale()

    async def update_stream(self, name: str, **settings: Any) -> StreamInfo:
        """Change an existing stream's retention, segment, ``max_message_bytes`` and
        ``no_nats_copies`` settings (names of :meth:`create_stream`; None lifts a
        retention limit, or gives back the server's message limit); every replica applies
        them. Raises InvalidArgument for a fixed (``partitions``...), unknown or bad
        setting."""
        answer = await self.request_any(Api.UPDATE_STREAM, update_body(name, settings))
        self.metadata_cache.mark_stale()
        return parse_create_answer(name, answer, exist_ok=True)

    async def purge_stream(
        self, name: str, partition: int | None = None, before: int | None = None
    ) -> dict[int, int]:
        """Drop ``partition``'s records (None: every partition's) below offset ``before``
        (None: all committed ones) on every replica; return {partition: log start now}.
        Raises OffsetOutOfRange if ``before`` is above the high watermark."""
        count = (await self.stream_info(name)).partition_count
        out: dict[int, int] = {}
        for p in range(count) if partition is None else [partition]:
            body = purge_body(name, p, before)
            answer = await self.request_leader(name, p, Api.PURGE_STREAM, body)
            out[p] = int(decode_answer(answer)["log_start"])
        return out

    async def list_streams(self, *, include_internal: bool = False) -> list[StreamInfo]:
        """Every stream, ordered by name (fresh metadata); internal streams (``__groups``,
        ``__share.*``: :attr:`StreamInfo.internal`) only with ``include_internal``."""
        streams = (await self.refresh_metadata()).streams
        return [s for _, s in sorted(streams.items()) if include_internal or not s.internal]

    async def describe_stream(self, name: str) -> StreamInfo:
        """A stream with per-partition ``hw``, ``leo``, ``log_start``, ``size_bytes``,
        ``segments`` (as seen by the answering server).

        Raises:
            StreamNotFound: no such stream.
        """
        answer = await self.request_any(Api.DESCRIBE_STREAM, encode_json({"name": name}))
        return parse_answer(StreamInfo.from_json, answer)

    async def list_offsets(
        self, stream: str, partition: int = 0, position: OffsetPosition = "latest"
    ) -> OffsetInfo:
        """Resolve a position to an offset on the partition leader.

        Args:
            position: ``"earliest"`` (log start), ``"latest"`` (the high watermark: the next
                offset a committed message gets), or a time (a datetime, or an int of ns
                since the epoch): the first offset stored at or after it, else the HW.

        Raises:
            JetError: StreamNotFound, PartitionNotFound or InvalidArgument (a bad position).
        """
        body = list_offsets_body(stream, partition, position)
        answer = await self.request_leader(stream, partition, Api.LIST_OFFSETS, body)
        return parse_answer(OffsetInfo.from_json, answer)
