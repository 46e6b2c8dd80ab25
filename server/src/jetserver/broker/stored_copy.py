"""The NATS copy of a Produce message its partition leader already stored.

When the server that receives a Produce request leads the partition, it appends the
messages directly (no round trip through NATS) and still publishes them to the stream's
subject for live NATS subscribers. Those copies carry the header
``Jet-Stored: <stream> <partition>``; a replica of that partition leading now or later
never stores a copy so marked, so nothing is stored twice. Other streams the subject feeds
store the copy as any other message (spec/envelope.md, "Produce through a server").

Stream names hold no spaces (``[A-Za-z0-9_.-]``), so the value is unambiguous.
"""

from __future__ import annotations

from collections.abc import Sequence

from jetsdk.codec.envelope import COOKIE
from jetserver.broker.nats_port import SkipMarked

STORED_HEADER = "Jet-Stored"
"""Header on the NATS copy of a message stored directly by its partition's leader."""
_STORED_LOWER = STORED_HEADER.lower()


def stored_value(stream: str, partition: int) -> bytes:
    """The header's value for ``stream``/``partition``."""
    return f"{stream} {partition}".encode()


def stored_header_block(stream: str, partition: int) -> bytes:
    """The whole NATS header block (``NATS/1.0`` line to the blank line) of a stored copy."""
    return b"NATS/1.0\r\n%s: %s\r\n\r\n" % (STORED_HEADER.encode(), stored_value(stream, partition))


def stored_skip(stream: str, partition: int) -> SkipMarked:
    """The subscription filter that drops this partition's stored copies before parsing
    (exact header bytes as :func:`stored_header_block` writes them, an envelope payload);
    :func:`is_stored_copy` applies the full rule (any case) to what gets through."""
    line = b"\r\n%s: %s\r\n" % (STORED_HEADER.encode(), stored_value(stream, partition))
    return SkipMarked(line, COOKIE)


def is_stored_copy(headers: Sequence[tuple[str, bytes]], value: bytes) -> bool:
    """True if ``headers`` (NATS header lines) mark the message as stored by the leader of
    the partition whose :func:`stored_value` is ``value``."""
    return any(got == value and name.lower() == _STORED_LOWER for name, got in headers)
