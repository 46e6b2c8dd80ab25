"""What applications get back: consumed :class:`Message`\\ s and produce :class:`Ack`\\ s."""

from __future__ import annotations

from collections.abc import Generator, Mapping, Sequence
from datetime import UTC, datetime
from typing import Protocol

import attrs

from jetsdk.codec.record import Record
from jetsdk.codec.slots import slot_setters

__all__ = [
    "DONE",
    "TIMESTAMP_HEADER",
    "Ack",
    "Acker",
    "Done",
    "Headers",
    "HeadersInput",
    "Message",
    "RecordView",
    "normalize_headers",
]

TIMESTAMP_HEADER = "Jet-Timestamp"
"""The header that carries a producer's own timestamp (``send(timestamp=...)``), ns since the
epoch in decimal; stored as an ordinary header (spec/protocol.md §6)."""


class Done:
    """What the ack methods of :class:`Message` and ``ShareMessage`` return: the outcome is
    queued (they never block), and the value may be awaited, at no cost, so both
    ``msg.ack()`` and ``await msg.ack()`` read right in async code. To wait until outcomes
    are stored, use the consumer's ``commit()`` or ``flush()``."""

    __slots__ = ()

    def __await__(self) -> Generator[None, None, None]:
        return
        yield  # a generator that finishes at once

    def __repr__(self) -> str:
        return "DONE"


DONE = Done()
"""The one :class:`Done` value."""

Headers = tuple[tuple[str, bytes], ...]
"""Ordered (name, value) pairs; names may repeat."""

HeadersInput = Mapping[str, bytes | str] | Sequence[tuple[str, bytes | str]]
"""Headers as callers may give them: a mapping, or a sequence of (name, value) pairs (names
may repeat); str values are encoded as UTF-8."""


def normalize_headers(headers: HeadersInput | None) -> Headers:
    """Turn caller-supplied headers into :data:`Headers`.

    Raises:
        TypeError: a name that is not a str or a value that is neither bytes nor str.
    """
    if not headers:
        return ()
    pairs = headers.items() if isinstance(headers, Mapping) else headers
    out: list[tuple[str, bytes]] = []
    for name, value in pairs:
        if not isinstance(name, str):
            raise TypeError(f"header name must be str, not {type(name).__name__}")
        if isinstance(value, str):
            out.append((name, value.encode()))
        elif isinstance(value, bytes | bytearray | memoryview):
            out.append((name, bytes(value)))
        else:
            raise TypeError(f"header {name!r} value must be bytes or str")
    return tuple(out)


class Acker(Protocol):
    """Whoever handed a :class:`Message` out and takes its acknowledgement back."""

    def ack_offset(self, offset: int) -> None:
        """The message at ``offset`` has been processed."""
        ...

    @property
    def stale(self) -> bool:
        """True once the partition run the message came from ended (revoked, lost, seek,
        closed): a message still buffered by the sync API is then not handed out."""
        ...


@attrs.frozen
class Ack:
    """The outcome of a successful send."""

    stream: str
    """Stream the message was stored in."""
    partition: int
    """Partition number."""
    offset: int
    """Offset assigned to the message; -1 with ack policy NONE."""
    timestamp: int
    """Stored timestamp, ns since the epoch; -1 with ack policy NONE."""


class RecordView:
    """Read-through properties of a consumed record held in ``self.record`` (shared by
    :class:`Message` and :class:`~jetsdk.consumer.share_message.ShareMessage`)."""

    __slots__ = ()
    record: Record

    @property
    def offset(self) -> int:
        """Offset within the partition."""
        return self.record.offset

    @property
    def timestamp(self) -> int:
        """Server-assigned time, ns since the epoch."""
        return self.record.timestamp

    @property
    def key(self) -> bytes | None:
        """The key, or None."""
        return self.record.key

    @property
    def value(self) -> bytes:
        """The payload."""
        return self.record.value

    @property
    def headers(self) -> Headers:
        """Ordered (name, value) pairs."""
        return self.record.headers

    @property
    def subject(self) -> str:
        """NATS subject the message arrived on."""
        return self.record.subject

    @property
    def reply(self) -> str:
        """NATS reply subject of a plain message ("" if none)."""
        return self.record.reply

    @property
    def datetime(self) -> datetime:
        """The timestamp as an aware UTC datetime (microsecond precision)."""
        return datetime.fromtimestamp(self.record.timestamp / 1e9, tz=UTC)

    @property
    def producer_timestamp(self) -> int | None:
        """The time its producer gave it (``send(timestamp=...)``, header
        ``Jet-Timestamp``), ns since the epoch; None if it gave none (or not a number).
        :attr:`timestamp` stays the server's."""
        for name, value in self.record.headers:
            if name == TIMESTAMP_HEADER:
                text = value.strip()
                if text[:1] == b"-":
                    text = text[1:]
                return int(value) if text.isdigit() and len(text) <= 19 else None
        return None

    def header(self, name: str) -> bytes | None:
        """The first value of header ``name``, or None."""
        for key, value in self.record.headers:
            if key == name:
                return value
        return None


@attrs.frozen(slots=True, repr=False)
class Message(RecordView):
    """A consumed message: the stored record plus where it came from.

    The record fields (offset, timestamp, key, value, headers, subject, reply) are
    read-through properties, so building a Message costs one small object per record.
    """

    stream: str
    """Stream name."""
    partition: int
    """Partition number."""
    record: Record
    """The decoded record (all stored fields, including producer id and sequence)."""
    delivery_count: int = 1
    """How many times this message has been handed to an application of its consumer group,
    this time included, as far as the group log tells (1 for a consumer without a group).

    Precisely: 1 + the earlier deliveries recorded in the group log. A delivery is recorded
    when its owner commits afterwards (auto-commit, :meth:`Consumer.commit`, the release on
    revoke, the leave on close) while the message is still un-acknowledged. So the count is
    exact across graceful hand-overs and restarts, and a **lower bound** otherwise: deliveries
    by an owner that crashed, or lost its partition by lease or session expiry, before its
    next commit are not counted (a message that crashes its consumer every time before the
    next auto-commit keeps coming back with the same count), and a commit whose progress
    exceeds the 4096-byte metadata limit drops the counts of its highest ranges (those
    messages come back with count 1). It never over-counts. spec/groups.md §7.1."""
    _acker: Acker | None = attrs.field(default=None, eq=False, repr=False)

    def ack(self) -> Done:
        """Mark this message processed (per-message acks, out of order allowed).

        Thread-safe: may be called from any thread, also from the threads of the sync API.
        Acking twice, or after the partition moved to another consumer, does nothing.
        Returns :data:`DONE` (awaitable, like ``ShareMessage.ack()``).
        """
        if self._acker is not None:
            self._acker.ack_offset(self.record.offset)
        return DONE

    @property
    def stale(self) -> bool:
        """True once its consumer moved on from the partition run this message came from
        (the partition was revoked, lost or sought, or the consumer closed)."""
        return self._acker is not None and self._acker.stale

    def __repr__(self) -> str:
        r = self.record
        value = r.value if len(r.value) <= 64 else r.value[:64] + b"..."
        return (
            f"Message(stream={self.stream!r}, partition={self.partition}, offset={r.offset}, "
            f"timestamp={r.timestamp}, key={r.key!r}, value={value!r}, headers={r.headers!r})"
        )


_set_stream, _set_partition, _set_record, _set_count, _set_acker = slot_setters(
    Message, "stream", "partition", "record", "delivery_count", "_acker"
)
_new_object = object.__new__


def new_message(
    stream: str, partition: int, record: Record, delivery_count: int, acker: Acker | None
) -> Message:
    """``Message(stream, partition, record, delivery_count, acker)`` setting its slots
    directly (:mod:`jetsdk.codec.slots`): the consumer's per-record hot path."""
    message: Message = _new_object(Message)
    _set_stream(message, stream)
    _set_partition(message, partition)
    _set_record(message, record)
    _set_count(message, delivery_count)
    _set_acker(message, acker)
    return message
