# generated — do not edit: made by tools/gen_sync.py from jetsdk/client.py

"""Blocking :class:`Client` (generated from :mod:`jetsdk.client`)."""

from __future__ import annotations

from collections.abc import Sequence
from ssl import SSLContext
from typing import Any

from jetsdk._sync_support import SyncWrapper
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

    Blocking version of :class:`jetsdk.client.Client` (generated): each
    method runs the async one it names, documented there, in the client's private
    event-loop thread. Thread-safe.
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
        """Arguments as for :class:`jetsdk.client.Client`.

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

    @property
    def server_info(self) -> dict[str, Any]:
        """As :attr:`jetsdk.client.Client.server_info`."""
        return self._obj.server_info

    @property
    def identity(self) -> str | None:
        """As :attr:`jetsdk.client.Client.identity`."""
        return self._obj.identity

    @property
    def max_message_bytes(self) -> int:
        """As :attr:`jetsdk.client.Client.max_message_bytes`."""
        return self._obj.max_message_bytes

    @property
    def max_frame_bytes(self) -> int:
        """As :attr:`jetsdk.client.Client.max_frame_bytes`."""
        return self._obj.max_frame_bytes

    def refresh_metadata(self) -> ClusterMetadata:
        """Blocking :meth:`jetsdk.client.Client.refresh_metadata`."""
        return self._run(self._obj.refresh_metadata)

    def metadata(self, *, refresh: bool = False) -> ClusterMetadata:
        """Blocking :meth:`jetsdk.client.Client.metadata`."""
        return self._run(self._obj.metadata, refresh=refresh)

    def stream_info(self, name: str, *, refresh: bool = False) -> StreamInfo:
        """Blocking :meth:`jetsdk.client.Client.stream_info`."""
        return self._run(self._obj.stream_info, name, refresh=refresh)

    def partition_info(self, stream: str, partition: int) -> PartitionInfo:
        """Blocking :meth:`jetsdk.client.Client.partition_info`."""
        return self._run(self._obj.partition_info, stream, partition)

    def streams_for_subject(self, subject: str) -> list[tuple[StreamInfo, int]]:
        """Blocking :meth:`jetsdk.client.Client.streams_for_subject`."""
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
        """Blocking :meth:`jetsdk.client.Client.create_stream`."""
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
        """Blocking :meth:`jetsdk.client.Client.delete_stream`."""
        self._run(self._obj.delete_stream, name)

    def update_stream(self, name: str, **settings: Any) -> StreamInfo:
        """Blocking :meth:`jetsdk.client.Client.update_stream`."""
        return self._run(self._obj.update_stream, name, **settings)

    def purge_stream(
        self,
        name: str,
        partition: int | None = None,
        before: int | None = None,
    ) -> dict[int, int]:
        """Blocking :meth:`jetsdk.client.Client.purge_stream`."""
        return self._run(self._obj.purge_stream, name, partition, before)

    def list_streams(self, *, include_internal: bool = False) -> list[StreamInfo]:
        """Blocking :meth:`jetsdk.client.Client.list_streams`."""
        return self._run(self._obj.list_streams, include_internal=include_internal)

    def describe_stream(self, name: str) -> StreamInfo:
        """Blocking :meth:`jetsdk.client.Client.describe_stream`."""
        return self._run(self._obj.describe_stream, name)

    def list_offsets(
        self,
        stream: str,
        partition: int = 0,
        position: OffsetPosition = "latest",
    ) -> OffsetInfo:
        """Blocking :meth:`jetsdk.client.Client.list_offsets`."""
        return self._run(self._obj.list_offsets, stream, partition, position)
