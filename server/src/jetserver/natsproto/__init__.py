"""The NATS client protocol, sans I/O: what a NATS server sends to a client, parsed.

:class:`~jetserver.natsproto.reader.NatsReader` takes the bytes a connection read and
returns events (:mod:`~jetserver.natsproto.events`); it never touches a socket and never
raises on what a *publisher* controls (subjects, reply subjects, header blocks, payloads).
Only a stream no NATS server would send (unknown operation, broken framing, an
over-limit line or size) raises :class:`~jetserver.natsproto.errors.NatsProtocolError`,
after which the connection must be dropped. Header blocks are judged by
:mod:`~jetserver.natsproto.headers`.
"""

from jetserver.natsproto.errors import NatsProtocolError
from jetserver.natsproto.events import Err, Event, Info, Message, Ok, Ping, PlainMessage, Pong
from jetserver.natsproto.headers import header_block_ok, header_map
from jetserver.natsproto.reader import (
    DEFAULT_MAX_MESSAGE_BYTES,
    MAX_CONTROL_LINE_BYTES,
    NatsReader,
)

__all__ = [
    "DEFAULT_MAX_MESSAGE_BYTES",
    "MAX_CONTROL_LINE_BYTES",
    "Err",
    "Event",
    "Info",
    "Message",
    "NatsProtocolError",
    "NatsReader",
    "Ok",
    "Ping",
    "PlainMessage",
    "Pong",
    "header_block_ok",
    "header_map",
]
