# generated — do not edit: made by tools/gen_sync.py from jetsdk/consumer/share_consumer.py

"""Blocking :class:`ShareConsumer` (generated from :mod:`jetsdk.consumer.share_consumer`)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from jetsdk._sync_support import SyncWrapper
from jetsdk.consumer.positions import StartPosition
from jetsdk.consumer.share_consumer import AckMode, LostCallback, ShareSettings
from jetsdk.consumer.share_consumer import ShareConsumer as _AsyncShareConsumer
from jetsdk.consumer.share_message import AcknowledgeType, ShareMessage
from jetsdk.message import Done
from jetsdk.share.state import ShareState
from jetsdk.sync.client import Client


class ShareConsumer(SyncWrapper[_AsyncShareConsumer]):
    """A member of share group ``group`` on ``stream`` (or ``streams``); see the module
    docstring.

    Blocking version of :class:`jetsdk.consumer.share_consumer.ShareConsumer` (generated): each
    method runs the async one it names, documented there, in the client's private
    event-loop thread. Thread-safe.
    """

    def __init__(
        self,
        client: Client,
        stream: str | None = None,
        *,
        group: str,
        streams: Sequence[str] | None = None,
        partitions: Iterable[int] | None = None,
        ack_deadline: float | None = None,
        max_deliveries: int | None = None,
        dead_letter_stream: str | None = None,
        dead_letter_options: Mapping[str, Any] | None = None,
        batch: int = 500,
        max_held: int = 16,
        ack_interval: float = 0.02,
        on_lost: LostCallback | None = None,
        acks: AckMode = "explicit",
        start: StartPosition | None = None,
    ) -> None:
        """Arguments as for :class:`jetsdk.consumer.share_consumer.ShareConsumer`."""
        self._factory = lambda: _AsyncShareConsumer(
            client._obj,
            stream,
            group=group,
            streams=streams,
            partitions=partitions,
            ack_deadline=ack_deadline,
            max_deliveries=max_deliveries,
            dead_letter_stream=dead_letter_stream,
            dead_letter_options=dead_letter_options,
            batch=batch,
            max_held=max_held,
            ack_interval=ack_interval,
            on_lost=on_lost,
            acks=acks,
            start=start,
        )
        self._owner = client

    @property
    def state(self) -> ShareState:
        """As :attr:`jetsdk.consumer.share_consumer.ShareConsumer.state`."""
        return self._obj.state

    @property
    def settings(self) -> ShareSettings:
        """As :attr:`jetsdk.consumer.share_consumer.ShareConsumer.settings`."""
        return self._obj.settings

    @property
    def given_back(self) -> int:
        """As :attr:`jetsdk.consumer.share_consumer.ShareConsumer.given_back`."""
        return self._obj.given_back

    def __iter__(self) -> ShareConsumer:
        return self

    def __next__(self) -> ShareMessage:
        """Blocking :meth:`jetsdk.consumer.share_consumer.ShareConsumer.__next__`."""
        return self._next(self._obj)

    def next(self, timeout: float | None = None) -> ShareMessage | None:
        """Blocking :meth:`jetsdk.consumer.share_consumer.ShareConsumer.next`."""
        return self._run(self._obj.next, timeout)

    def fetch(self, max_records: int = 500, timeout: float | None = None) -> list[ShareMessage]:
        """Blocking :meth:`jetsdk.consumer.share_consumer.ShareConsumer.fetch`."""
        return self._run(self._obj.fetch, max_records, timeout)

    def ack(self, message: ShareMessage, kind: AcknowledgeType | str = "accept") -> Done:
        """Blocking :meth:`jetsdk.consumer.share_consumer.ShareConsumer.ack`."""
        return self._run_sync(self._obj.ack, message, kind)

    def flush(self, timeout: float = 30.0) -> None:
        """Blocking :meth:`jetsdk.consumer.share_consumer.ShareConsumer.flush`."""
        self._run(self._obj.flush, timeout)
