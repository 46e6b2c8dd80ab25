# generated — do not edit: made by tools/gen_sync.py from jetsdk/consumer/share.py

"""Blocking :class:`ShareConsumer` (generated from :mod:`jetsdk.consumer.share`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import TracebackType
from typing import Any

from jetsdk._sync_support import SyncWrapper
from jetsdk.consumer.share import ShareConsumer as _AsyncShareConsumer
from jetsdk.consumer.share_message import ShareMessage
from jetsdk.errors import ClientClosed
from jetsdk.share.member import ShareMember
from jetsdk.sync.client import Client


class ShareConsumer(SyncWrapper):
    """A member of share group ``group`` on ``stream`` (see the module docstring).

    Args:
        ack_deadline: seconds a member holds what it acquired before it goes to another
            member (extend with ``msg.in_progress()``).
        max_deliveries: deliveries before a message is dead-lettered.
        dead_letter_stream: where dead letters go (default ``<group>-dlq``). Created if
            missing, with one partition and the share log's replication factor unless
            ``dead_letter_options`` say otherwise; an existing stream is used with its own
            settings (refused if compacted: ``InvalidArgument`` with ``field`` ``compact``).
        dead_letter_options: :meth:`Client.create_stream` settings for creating the
            dead-letter stream (``replication_factor``, ``retention_max_age``, ...).
        batch: most offsets acquired at once (one range).
        max_held: ranges acquired ahead of the application.
        ack_interval: how long outcomes wait to be batched into settle records.
        partitions: the partitions to consume (default: all).

    Blocking version of :class:`jetsdk.consumer.share.ShareConsumer`
    (generated); every call runs in the client's private event-loop thread. Thread-safe.
    """

    def __init__(
        self,
        client: Client,
        stream: str,
        group: str = "workers",
        *,
        ack_deadline: float = 30.0,
        max_deliveries: int = 5,
        dead_letter_stream: str | None = None,
        dead_letter_options: Mapping[str, Any] | None = None,
        batch: int = 200,
        max_held: int = 4,
        ack_interval: float = 0.02,
        partitions: list[int] | None = None,
    ) -> None:
        self._async: _AsyncShareConsumer | None = None
        self._factory: Callable[[], _AsyncShareConsumer] = lambda: _AsyncShareConsumer(
            client._obj,
            stream,
            group,
            ack_deadline=ack_deadline,
            max_deliveries=max_deliveries,
            dead_letter_stream=dead_letter_stream,
            dead_letter_options=dead_letter_options,
            batch=batch,
            max_held=max_held,
            ack_interval=ack_interval,
            partitions=partitions,
        )
        self._owner = client

    @property
    def _obj(self) -> _AsyncShareConsumer:
        if self._async is None:
            raise ClientClosed("use ShareConsumer in a `with` block (or call open() first)")
        return self._async

    def open(self) -> ShareConsumer:
        """Start the ShareConsumer (what entering ``with`` does); see :meth:`close`."""
        if self._async is not None:
            raise ClientClosed("ShareConsumer is already open")
        self._async = self._enter_async(self._owner._check(), self._factory)
        return self

    def close(self) -> None:
        """Close the ShareConsumer (what leaving ``with`` does); idempotent."""
        self.__exit__(None, None, None)

    def __enter__(self) -> ShareConsumer:
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

    @property
    def member(self) -> ShareMember:
        """The pure member (its ``view`` is the group state as this member knows it)."""
        return self._obj.member

    def __iter__(self) -> ShareConsumer:
        return self

    def __next__(self) -> ShareMessage:
        return self._next(self._obj)

    def next(self, timeout: float | None = None) -> ShareMessage | None:
        """The next message, or None after ``timeout`` seconds (None: wait) or once closed."""
        return self._run(self._obj.next, timeout)

    def fetch(self, max_records: int = 500, timeout: float | None = None) -> list[ShareMessage]:
        """Up to ``max_records`` messages: those ready now, else waits up to ``timeout``
        seconds (None: until there is one) for the first; empty after the timeout or once
        closed. Each message counts as a delivery: hand it on, or ``nack()`` it.
        """
        return self._run(self._obj.fetch, max_records, timeout)

    def flush(self, timeout: float = 30.0) -> None:
        """Wait until every outcome queued so far is stored in the share log and this
        member's :attr:`member` view has read it back.

        Raises:
            TimeoutError: not within ``timeout`` seconds.
        """
        self._run(self._obj.flush, timeout)
