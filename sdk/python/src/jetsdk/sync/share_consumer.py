# generated — do not edit: made by tools/gen_sync.py from jetsdk/consumer/share_consumer.py

"""Blocking :class:`ShareConsumer` (generated from :mod:`jetsdk.consumer.share_consumer`)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from jetsdk._sync_support import Forwarded, SyncWrapper
from jetsdk.consumer.positions import StartPosition
from jetsdk.consumer.share_consumer import AckMode, LostCallback
from jetsdk.consumer.share_consumer import ShareConsumer as _AsyncShareConsumer
from jetsdk.consumer.share_message import AcknowledgeType, ShareMessage
from jetsdk.message import Done
from jetsdk.sync.client import Client


class ShareConsumer(SyncWrapper[_AsyncShareConsumer]):
    """A member of share group ``group`` on ``stream`` (or ``streams``); see the module
    docstring.

    Args:
        stream: the stream to consume (or use ``streams``).
        group: the share group (required: unrelated applications must not share one).
        streams: several streams to consume from one group.
        partitions: with one stream, the partitions to consume (default: all).
        ack_deadline: seconds a member holds what it acquired before it goes to another
            member (extend with ``msg.in_progress()``). A group setting: the first member
            stores its value (default 30 s) in the share log; a member that gives another
            value is told (a warning) and uses the group's (see :attr:`settings`).
        max_deliveries: deliveries before a message is dead-lettered; a group setting like
            ``ack_deadline`` (default 5).
        dead_letter_stream: where dead letters go (default ``<group>-dlq``). Created if
            missing, with one partition and the share log's replication factor unless
            ``dead_letter_options`` say otherwise; an existing stream is used with its own
            settings (refused if compacted: ``InvalidArgument`` with ``field`` ``compact``).
        dead_letter_options: :meth:`Client.create_stream` settings for creating the
            dead-letter stream (``replication_factor``, ``retention_max_age``, ...).
        batch: most offsets acquired at once (one range).
        max_held: most ranges acquired ahead of the application (the application's measured
            rate bounds what it acquires too: only what it can be handed before the lease
            runs out, and what it takes in a few claim cycles).
        ack_interval: how long outcomes wait to be batched into settle records.
        on_lost: called (on the consumer's event loop, from its reader task) with the
            outcomes the share log ignored because the lease had moved to another member
            first (a late ``ack`` after the deadline: that message was or will be handed
            to another member).
        start: where a **new** group starts on each partition (stored in its share log by
            its first member; ignored for a group that has settings): ``"earliest"``
            (default: offset 0), ``"latest"``, ``"new-only"``, an offset, a ``datetime`` or
            a :class:`~jetsdk.consumer.positions.StartAt`, as for :class:`Consumer`.
        acks: ``"explicit"`` (default: settle each message) or ``"implicit"`` (as Kafka's
            implicit acknowledgement: the messages of one ``next()``/``fetch()`` not settled
            otherwise are acked when the application asks for more, and on close).

    Blocking version of :class:`jetsdk.consumer.share_consumer.ShareConsumer`
    (generated); every call runs in the client's private event-loop thread. Thread-safe.
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

    state = Forwarded(_AsyncShareConsumer.state)
    """The group's state as this member knows it (its view of the share log; read it,
    do not change it).
    """

    settings = Forwarded(_AsyncShareConsumer.settings)
    """The group's settings (from its share log once read; this member's before)."""

    given_back = Forwarded(_AsyncShareConsumer.given_back)
    """Messages this member acquired and gave back without handing them out (paced out,
    at a lease's stop point, or on close): their delivery was not counted.
    """

    def __iter__(self) -> ShareConsumer:
        return self

    def __next__(self) -> ShareMessage:
        return self._next(self._obj)

    def next(self, timeout: float | None = None) -> ShareMessage | None:
        """The next message, or None after ``timeout`` seconds (None: wait) or once closed."""
        return self._run(self._obj.next, timeout)

    def fetch(self, max_records: int = 500, timeout: float | None = None) -> list[ShareMessage]:
        """Up to ``max_records`` messages: those ready now, else waits up to ``timeout``
        seconds (None: until there is one; 0: do not wait) for the first; empty after the
        timeout or once closed. Each message counts as a delivery: settle each one.
        """
        return self._run(self._obj.fetch, max_records, timeout)

    def ack(self, message: ShareMessage, kind: AcknowledgeType | str = "accept") -> Done:
        """Acknowledge ``message`` with ``kind`` (the same as ``message.ack(kind)``)."""
        return self._run_sync(self._obj.ack, message, kind)

    def flush(self, timeout: float = 30.0) -> None:
        """Wait until every outcome queued so far is stored in the share log and this
        member's :attr:`state` has read it back.

        Raises:
            TimeoutError: not within ``timeout`` seconds.
        """
        self._run(self._obj.flush, timeout)
