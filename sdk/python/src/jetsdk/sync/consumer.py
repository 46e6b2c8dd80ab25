# generated — do not edit: made by tools/gen_sync.py from jetsdk/consumer/consumer.py

"""Blocking :class:`Consumer` (generated from :mod:`jetsdk.consumer.consumer`)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from types import TracebackType

from jetsdk._sync_support import SyncWrapper
from jetsdk.consumer.consumer import DEFAULT_FETCH_MAX_BYTES, DEFAULT_FETCH_MAX_WAIT
from jetsdk.consumer.consumer import Consumer as _AsyncConsumer
from jetsdk.consumer.positions import ResetPolicy, StartPosition
from jetsdk.errors import ClientClosed
from jetsdk.message import Message
from jetsdk.sync.client import Client


class Consumer(SyncWrapper):
    """Reads one stream's partitions in offset order. Use as ``with Consumer(...)``.

    Blocking version of :class:`jetsdk.consumer.consumer.Consumer`
    (generated); every call runs in the client's private event-loop thread. Thread-safe.
    """

    def __init__(
        self,
        client: Client,
        stream: str,
        *,
        partitions: Iterable[int] | None = None,
        start: StartPosition = "earliest",
        reset: ResetPolicy = "earliest",
        max_bytes: int = DEFAULT_FETCH_MAX_BYTES,
        max_wait: float = DEFAULT_FETCH_MAX_WAIT,
    ) -> None:
        """Configure a consumer; it resolves positions and starts fetching in ``__enter__``.

        Args:
            client: an entered :class:`~jetsdk.client.Client`.
            stream: the stream to read.
            partitions: partition numbers to read (default: all).
            start: where to start: ``"earliest"``, ``"latest"``, ``"new-only"``, an offset
                (int), a datetime, or a :class:`~jetsdk.consumer.positions.StartAt`.
            reset: what to do with an out-of-range offset: ``"earliest"``, ``"latest"`` or
                ``"raise"``.
            max_bytes: soft bound on one Fetch response's record bytes.
            max_wait: long-poll wait of one Fetch, seconds.

        Raises:
            InvalidArgument: a bad start or reset value.
        """
        self._async: _AsyncConsumer | None = None
        self._factory: Callable[[], _AsyncConsumer] = lambda: _AsyncConsumer(
            client._obj,
            stream,
            partitions=partitions,
            start=start,
            reset=reset,
            max_bytes=max_bytes,
            max_wait=max_wait,
        )
        self._owner = client

    @property
    def _obj(self) -> _AsyncConsumer:
        if self._async is None:
            raise ClientClosed("use Consumer in a `with` block (or call open() first)")
        return self._async

    def open(self) -> Consumer:
        """Start the Consumer (what entering ``with`` does); see :meth:`close`."""
        if self._async is not None:
            raise ClientClosed("Consumer is already open")
        self._async = self._enter_async(self._owner._check(), self._factory)
        return self

    def close(self) -> None:
        """Close the Consumer (what leaving ``with`` does); idempotent."""
        self.__exit__(None, None, None)

    def __enter__(self) -> Consumer:
        return self.open()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        try:
            self._exit_async(exc_type, exc, tb)
        finally:
            self._portal = None
            self._async = None

    def assignment(self) -> tuple[int, ...]:
        """The partitions this consumer reads, ascending."""
        return self._run_sync(self._obj.assignment)

    def position(self, partition: int) -> int:
        """The next offset the application will receive from ``partition``.

        Raises:
            PartitionNotFound: the partition is not assigned.
        """
        return self._run_sync(self._obj.position, partition)

    def high_watermark(self, partition: int) -> int | None:
        """The partition's high watermark as of the last fetch (None before any)."""
        return self._run_sync(self._obj.high_watermark, partition)

    def lag(self, partition: int) -> int | None:
        """Committed messages not yet received: HW minus position (None before a fetch)."""
        return self._run_sync(self._obj.lag, partition)

    def seek(self, partition: int, offset: int) -> None:
        """Continue ``partition`` from ``offset``; prefetched messages are discarded.

        Raises:
            PartitionNotFound: the partition is not assigned.
            ValueError: a negative offset.
        """
        self._run_sync(self._obj.seek, partition, offset)

    def seek_to(self, partition: int, start: StartPosition) -> int:
        """Resolve a start position (as in the constructor) and :meth:`seek` there;
        return the offset.
        """
        return self._run(self._obj.seek_to, partition, start)

    def __iter__(self) -> Consumer:
        return self

    def __next__(self) -> Message:
        """The next message (waits as long as needed).

        Raises:
            JetError: a non-retriable error of a partition's fetcher.
            StopIteration: the consumer is closed.
        """
        return self._next(self._obj)

    def fetch(self, max_records: int = 500, timeout: float | None = None) -> list[Message]:
        """Up to ``max_records`` messages: what is already here, or the first batch to
        arrive within ``timeout`` seconds (None: wait as long as needed; 0: do not wait).

        Returns an empty list if nothing arrived in time.

        Raises:
            JetError: a non-retriable error of a partition's fetcher.
            ClientClosed: the consumer is closed.
        """
        return self._run(self._obj.fetch, max_records, timeout)
