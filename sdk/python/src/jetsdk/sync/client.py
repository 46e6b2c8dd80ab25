# generated — do not edit: made by tools/gen_sync.py from jetsdk/client.py

"""Blocking :class:`Client` (generated from :mod:`jetsdk.client`)."""

from __future__ import annotations

from collections.abc import Sequence
from ssl import SSLContext
from typing import Any

from jetsdk._sync_support import Forwarded, SyncWrapper
from jetsdk._version import __version__
from jetsdk.client import DEFAULT_CONNECT_TIMEOUT, DEFAULT_REQUEST_TIMEOUT
from jetsdk.client import Client as _AsyncClient
from jetsdk.client_requests import Durability, OffsetPosition
from jetsdk.metadata import ClusterMetadata, OffsetInfo, PartitionInfo, StreamInfo
from jetsdk.retry import DEFAULT_RETRY, RetryPolicy
from jetsdk.security import Credentials
from jetsdk.transport import Dialer


class Client(SyncWrapper[_AsyncClient]):
    """A connection to a jet cluster. Use as ``with Client(...) as client:``.

    Blocking version of :class:`jetsdk.client.Client`
    (generated); every call runs in the client's private event-loop thread. Thread-safe.
    """

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
        backend: str = "asyncio",
    ) -> None:
        """Configure a client; it connects in ``__enter__``.

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

        backend: the anyio backend of the private loop thread (``"asyncio"`` or ``"trio"``).
        """
        self._factory = lambda: _AsyncClient(
            servers,
            connect_timeout=connect_timeout,
            request_timeout=request_timeout,
            retry=retry,
            dialer=dialer,
            client_name=client_name,
            tls=tls,
            tls_ca=tls_ca,
            tls_cert=tls_cert,
            tls_key=tls_key,
            server_hostname=server_hostname,
            credentials=credentials,
            token=token,
            user=user,
            password=password,
        )
        self._backend = backend

    server_info = Forwarded(_AsyncClient.server_info)
    """The Hello answer of the server this client bootstrapped from."""

    identity = Forwarded(_AsyncClient.identity)
    """The identity the last authenticated connection was given (None: none yet)."""

    max_message_bytes = Forwarded(_AsyncClient.max_message_bytes)
    """The server's message size limit (from Hello; the default if unknown)."""

    max_frame_bytes = Forwarded(_AsyncClient.max_frame_bytes)
    """The server's frame limit (from Hello; the default if unknown)."""

    def refresh_metadata(self) -> ClusterMetadata:
        """Fetch the full metadata now (concurrent callers share one request)."""
        return self._run(self._obj.refresh_metadata)

    def metadata(self, *, refresh: bool = False) -> ClusterMetadata:
        """The cached metadata (fetched first if stale, missing, or ``refresh``)."""
        return self._run(self._obj.metadata, refresh=refresh)

    def stream_info(self, name: str, *, refresh: bool = False) -> StreamInfo:
        """A stream's metadata from the cache (refreshed once if the stream is missing).
        With ``refresh``: fresh, with each partition's ``hw``, ``leo``, ``log_start``,
        ``size_bytes`` and ``segments`` as its leader describes them (None if it has no
        leader or its leader does not answer at once).

        Raises:
            StreamNotFound: no such stream.
        """
        return self._run(self._obj.stream_info, name, refresh=refresh)

    def partition_info(self, stream: str, partition: int) -> PartitionInfo:
        """A partition's metadata from the cache.

        Raises:
            StreamNotFound, PartitionNotFound: no such stream or partition.
        """
        return self._run(self._obj.partition_info, stream, partition)

    def streams_for_subject(self, subject: str) -> list[tuple[StreamInfo, int]]:
        """Every (stream, partition) whose partition subject matches the literal ``subject``,
        ordered by stream name.
        """
        return self._run(self._obj.streams_for_subject, subject)

    def create_stream(
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
        return self._run(
            self._obj.create_stream,
            name,
            subject,
            partitions=partitions,
            replication_factor=replication_factor,
            compact=compact,
            group=group,
            retention_max_age=retention_max_age,
            retention_max_bytes=retention_max_bytes,
            retention_max_messages=retention_max_messages,
            segment_max_bytes=segment_max_bytes,
            segment_max_age=segment_max_age,
            delete_retention=delete_retention,
            max_message_bytes=max_message_bytes,
            min_isr=min_isr,
            durability=durability,
            duplicate_window=duplicate_window,
            no_nats_copies=no_nats_copies,
            exist_ok=exist_ok,
        )

    def delete_stream(self, name: str) -> None:
        """Delete a stream and its data.

        Raises:
            StreamNotFound: no such stream.
        """
        self._run(self._obj.delete_stream, name)

    def update_stream(self, name: str, **settings: Any) -> StreamInfo:
        """Change an existing stream's retention, segment, ``max_message_bytes`` and
        ``no_nats_copies`` settings (names of :meth:`create_stream`; None lifts a
        retention limit, or gives back the server's message limit); every replica applies
        them. Raises InvalidArgument for a fixed (``partitions``...), unknown or bad
        setting.
        """
        return self._run(self._obj.update_stream, name, **settings)

    def purge_stream(
        self,
        name: str,
        partition: int | None = None,
        before: int | None = None,
    ) -> dict[int, int]:
        """Drop ``partition``'s records (None: every partition's) below offset ``before``
        (None: all committed ones) on every replica; return {partition: log start now}.
        Raises OffsetOutOfRange if ``before`` is above the high watermark.
        """
        return self._run(self._obj.purge_stream, name, partition, before)

    def list_streams(self, *, include_internal: bool = False) -> list[StreamInfo]:
        """Every stream, ordered by name (fresh metadata); internal streams (``__groups``,
        ``__share.*``: :attr:`StreamInfo.internal`) only with ``include_internal``.
        """
        return self._run(self._obj.list_streams, include_internal=include_internal)

    def describe_stream(self, name: str) -> StreamInfo:
        """A stream with per-partition ``hw``, ``leo``, ``log_start``, ``size_bytes``,
        ``segments`` (as seen by the answering server).

        Raises:
            StreamNotFound: no such stream.
        """
        return self._run(self._obj.describe_stream, name)

    def list_offsets(
        self,
        stream: str,
        partition: int = 0,
        position: OffsetPosition = "latest",
    ) -> OffsetInfo:
        """Resolve a position to an offset on the partition leader.

        Args:
            position: ``"earliest"`` (log start), ``"latest"`` (the high watermark: the next
                offset a committed message gets), or a time (a datetime, or an int of ns
                since the epoch): the first offset stored at or after it, else the HW.

        Raises:
            JetError: StreamNotFound, PartitionNotFound or InvalidArgument (a bad position).
        """
        return self._run(self._obj.list_offsets, stream, partition, position)
