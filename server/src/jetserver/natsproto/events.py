"""What :class:`~jetserver.natsproto.reader.NatsReader` returns: one event per operation."""

from __future__ import annotations

from typing import Any

import attrs

PlainMessage = tuple[bytes, int, bytes, bytes]
"""A ``MSG`` (a message without headers): ``(subject, sid, reply, payload)``, the subject
it was published to, the subscription it was delivered for, the reply subject (empty if
none) and the payload. A plain tuple because it is the ingest hot path: made once per
message, about 5 times cheaper than an attrs instance (tools/bench_nats_reader.py)."""


@attrs.frozen
class Message:
    """An ``HMSG``: one message with a header block, of a subscription."""

    subject: bytes
    """The subject it was published to (the server checked its form)."""
    sid: int
    """The subscription it was delivered for."""
    reply: bytes
    """The reply subject (empty if none)."""
    payload: bytes
    """The payload: every byte after the header block."""
    headers: bytes
    """The header block exactly as sent."""
    headers_ok: bool
    """False if ``headers`` is not a well-formed block (:func:`~.headers.header_block_ok`):
    the publisher's bytes are kept here, and the reader of them decides (jet stores the
    message without headers, spec/envelope.md)."""


@attrs.frozen
class Ping:
    """``PING``: the server checks we are alive; answer ``PONG``."""


@attrs.frozen
class Pong:
    """``PONG``: the answer to one of our ``PING`` operations, in order."""


@attrs.frozen
class Ok:
    """``+OK`` (verbose mode acknowledgement)."""


@attrs.frozen
class Info:
    """``INFO``: the server's information (a JSON object), sent again when it changes."""

    info: dict[str, Any]
    """The decoded JSON object."""


@attrs.frozen
class Err:
    """``-ERR``: a protocol error or refusal reported by the server."""

    message: str
    """The text between the quotes, as sent (case kept)."""


Event = PlainMessage | Message | Ping | Pong | Ok | Info | Err
"""Every event :class:`~jetserver.natsproto.reader.NatsReader` returns."""

PING = Ping()
PONG = Pong()
OK = Ok()
