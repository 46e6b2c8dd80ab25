"""What the broker needs of NATS: the port the broker owns and the server's link implements.

The broker subscribes partitions and ack inboxes, publishes acks and the NATS copies of
directly stored records, and flushes, through :class:`NatsPort`; it imports nothing of the
NATS link itself. :class:`~jetserver.natslink.link.NatsLink` (the server's two nats-py
connections, a layer above) is the implementation; tests may pass any object with these
members. The values both sides exchange live here too: the error :class:`NatsUnavailable`,
the stored-copy filter :class:`SkipMarked`, and a received message's header lines as sent
(:class:`HeaderedMsg`, :func:`header_lines`).

Task safety: event loop thread only (asyncio), as the link.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

from nats.aio.msg import Msg

from jetsdk.codec.transcode import EnvelopeBytes
from jetserver.errors import JetServerError

__all__ = [
    "HeaderedMsg",
    "MessageHandler",
    "NatsPort",
    "NatsSubscription",
    "NatsUnavailable",
    "Sink",
    "SkipMarked",
    "header_lines",
]

MessageHandler = Callable[[Msg], Awaitable[None]]
"""Called for each message of a subscription, one at a time, in arrival order."""
Sink = Callable[[str, str, bytes], bool]
"""Takes ``(subject, reply, data)`` of a message without headers now and returns True, or
returns False to have it delivered through the callback (e.g. while its queue is full)."""


SUBSCRIBE_CONFIRM_TIMEOUT_S = 5.0
"""Bound on confirming a new NATS subscription (a flush: one PING round trip to nats-server)."""


class NatsUnavailable(JetServerError):
    """The NATS link is down (not connected yet, reconnecting or closed)."""


class SkipMarked:
    """Drops messages whose header block holds ``header`` (exact bytes, e.g. one whole
    ``\r\nName: value\r\n`` line) and whose payload starts with ``prefix``, before any
    parsing or delivery; counts them."""

    __slots__ = ("count", "header", "prefix")

    def __init__(self, header: bytes, prefix: bytes = b"") -> None:
        self.header = header
        self.prefix = prefix
        self.count = 0
        """Messages dropped."""

    def matches(self, headers: bytes, payload: bytes) -> bool:
        """True (and counted) if the message is to be dropped."""
        if self.header in headers and payload.startswith(self.prefix):
            self.count += 1
            return True
        return False


@dataclass
class HeaderedMsg(Msg):
    """A message of a direct subscription with its header lines as sent (order, repeats
    and case: :func:`~jetsdk.codec.nats_headers.parse_header_block`); ``headers`` is
    nats-py's map of the same block (the last value of a repeated name)."""

    header_lines: tuple[tuple[str, bytes], ...] = ()


def header_lines(msg: Msg) -> tuple[tuple[str, bytes], ...]:
    """A message's NATS header lines: as sent for a :class:`HeaderedMsg`, else from
    nats-py's header map (one value per name)."""
    if isinstance(msg, HeaderedMsg):
        return msg.header_lines
    if not msg.headers:
        return ()
    return tuple((k, v.encode()) for k, v in msg.headers.items())


class NatsSubscription(Protocol):
    """A live subscription of the port."""

    async def unsubscribe(self) -> None:
        """Stop the subscription (messages already queued are dropped)."""


class NatsPort(Protocol):
    """The broker's view of the server's NATS connections (implemented by
    :class:`jetserver.natslink.link.NatsLink`, whose docstrings say more)."""

    @property
    def connected(self) -> bool:
        """True while the link is up."""

    @property
    def max_payload(self) -> int:
        """The NATS server's max_payload (0 if unknown)."""

    async def subscribe(
        self,
        subject: str,
        handler: MessageHandler,
        *,
        queue: str = "",
        sink: Sink | None = None,
        skip: SkipMarked | None = None,
        ingest_owner: object | None = None,
    ) -> NatsSubscription:
        """Subscribe with a callback; ``ingest_owner``: a partition's ingest subscription.

        Raises:
            NatsUnavailable: the link is closed.
        """

    def echo_needed(self, subjects: Iterable[str], owner: object) -> bool:
        """True if another ingest subscription of this server than ``owner``'s matches one
        of ``subjects``."""

    async def publish_many(
        self, messages: Sequence[tuple[str, EnvelopeBytes]], header_block: bytes = b""
    ) -> int:
        """Queue messages in order; returns how many leading ones were queued."""

    async def publish_stored_copies(
        self, messages: Sequence[tuple[str, EnvelopeBytes]], header_block: bytes, owner: object
    ) -> int:
        """Queue the NATS copies of records ``owner`` stored directly (not echoed back to
        this server unless another ingest subscription here wants one)."""

    def send_stored_copy(
        self, subject: str, payload: EnvelopeBytes, header_block: bytes, owner: object
    ) -> bool:
        """One such copy written now if nothing is pending before it; False: not done."""

    def unstored_copy_room(self, size: int) -> bool:
        """Whether :meth:`queue_unstored_copy` of ``size`` bytes (payload and subject)
        would queue it now."""

    def queue_unstored_copy(self, subject: str, payload: EnvelopeBytes) -> bool:
        """:meth:`publish_unstored_copies` of one unmarked copy, queued with no wait if the
        pending buffer takes it (written at the end of the loop turn); False: not done."""

    async def publish_unstored_copies(
        self,
        messages: Sequence[tuple[str, EnvelopeBytes]],
        header_block: bytes = b"",
        within_s: float | None = None,
    ) -> int:
        """Queue copies of directly appended messages not marked stored (with
        ``header_block``: sequence marks), not echoed back here; waiting for NATS to take
        what is pending (a full pending buffer) at most ``within_s`` (None: no bound)."""

    async def flush(self, timeout_s: float, *, ingest: bool = False) -> None:
        """Wait until NATS has received everything published so far.

        Raises:
            NatsUnavailable: the link is down or the round trip timed out.
        """

    def new_inbox(self) -> str:
        """A unique inbox subject prefix."""
