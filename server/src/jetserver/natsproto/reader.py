"""The read side of a NATS client connection, sans I/O (h11 style).

:meth:`NatsReader.feed` takes what a read returned and gives back the events it completed,
in order; an operation cut between reads waits in the reader for the rest. It reads what a
NATS server sends a client: ``MSG``, ``HMSG``, ``PING``, ``PONG``, ``INFO``, ``+OK`` and
``-ERR`` (operation names in any case, arguments split by any run of spaces or tabs).

What a publisher controls (subject, reply, header block, payload) is framed by the server
with exact byte counts, so no content of it can make the reader raise or lose its place. A
malformed header block gives a :class:`~.events.Message` with ``headers_ok`` False and the
block's bytes kept. Only a stream no NATS server sends raises
:class:`~.errors.NatsProtocolError`; the reader then stays broken (every later ``feed``
raises the same error) and the connection must be replaced.

Limits are named constants (:data:`MAX_CONTROL_LINE_BYTES`) or constructor arguments
(``max_message_bytes``). Memory: a pending partial operation only (a message's bytes until
its last byte arrives, joined once).

Task safety: one reader per connection, one task.
"""

from __future__ import annotations

from typing import Any

import orjson

from jetserver.natsproto.errors import NatsProtocolError
from jetserver.natsproto.events import OK, PING, PONG, Err, Event, Info, Message
from jetserver.natsproto.headers import header_block_ok

MAX_CONTROL_LINE_BYTES = 1 << 20
"""The longest control line (``MSG`` arguments, ``INFO`` JSON, ``-ERR`` text) accepted, CRLF
excluded. NATS servers limit what clients send to 4 KiB by default, but ``INFO`` grows with
a cluster's URLs; beyond this the stream is broken."""
DEFAULT_MAX_MESSAGE_BYTES = 64 << 20
"""The largest ``MSG``/``HMSG`` size accepted by default (NATS's own hard ceiling for
``max_payload`` is 64 MiB)."""
_MAX_SIZE_DIGITS = 12
"""Longer size fields are refused before converting them (no huge integer parsing)."""

_CRLF = b"\r\n"
_MSG = b"MSG "
_HMSG = b"HMSG "


class NatsReader:
    """Parses what a NATS server sends a client into events (see the module docstring).

    Args:
        max_message_bytes: the largest message (header block and payload) accepted.
    """

    __slots__ = (
        "_error",
        "_have",
        "_last_sid",
        "_last_sid_raw",
        "_need",
        "_offset",
        "_pending",
        "max_message_bytes",
    )

    def __init__(self, max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES) -> None:
        self.max_message_bytes = max_message_bytes
        """The largest message accepted (a bigger one is a protocol error)."""
        self._pending: list[bytes] = []
        self._have = 0
        self._need = 0
        """Bytes ``_pending`` must hold before parsing again (0: nothing pending)."""
        self._offset = 0
        """Stream offset of the first pending byte (for error messages)."""
        self._error: NatsProtocolError | None = None
        self._last_sid_raw = b""
        self._last_sid = 0

    @property
    def buffered(self) -> int:
        """Bytes of a partial operation waiting for the rest."""
        return self._have

    def feed(self, data: bytes) -> list[Event]:
        """The events completed by ``data`` (the next bytes of the stream), in order.

        Raises:
            NatsProtocolError: the stream is broken (see the module docstring); its
                ``events_before`` holds the events completed before the bad operation.
        """
        if self._error is not None:
            raise self._error
        if self._need:
            self._pending.append(data)
            self._have += len(data)
            if self._have < self._need:
                return []
            data = b"".join(self._pending)
        self._pending = []
        self._need = self._have = 0
        events: list[Event] = []
        try:
            pos = self._parse(data, events)
        except NatsProtocolError as exc:
            exc.events_before = events
            self._error = exc
            raise
        rest = len(data) - pos
        self._offset += pos
        if rest:
            self._pending = [data[pos:] if pos else data]
            self._have = rest
        return events

    def _fail(self, reason: str, pos: int) -> NatsProtocolError:
        return NatsProtocolError(reason, self._offset + pos)

    def _parse(self, data: bytes, events: list[Event]) -> int:
        """Appends the complete operations of ``data`` to ``events``; returns where the
        first incomplete one starts (setting ``_need``), or ``len(data)``."""
        # The hot path of every partition leader's ingest: runs of ``MSG`` inline, with
        # locals and the subscription id converted once per run of one sid; every other
        # operation through a method.
        n = len(data)
        pos = 0
        find = data.find
        startswith = data.startswith
        append = events.append
        max_message = self.max_message_bytes
        last_sid_raw = self._last_sid_raw
        last_sid = self._last_sid
        try:
            while pos < n:
                end = find(_CRLF, pos)
                if end < 0:
                    if n - pos > MAX_CONTROL_LINE_BYTES:
                        raise self._fail("control line over MAX_CONTROL_LINE_BYTES", pos)
                    self._need = n - pos + 1
                    return pos
                # (A complete MSG line is not held to MAX_CONTROL_LINE_BYTES: it buffers
                # nothing more, and its size is checked.)
                if not startswith(_MSG, pos):
                    done = self._other(data, pos, end, events)
                    if done < 0:
                        return pos
                    pos = done
                    continue
                args = data[pos + 4 : end].split()
                if len(args) == 3:
                    subject, sid_raw, size_raw = args
                    reply = b""
                elif len(args) == 4:
                    subject, sid_raw, reply, size_raw = args
                else:
                    raise self._fail("malformed MSG arguments", pos)
                try:
                    # int() reads bytes; it also takes a sign or "_", harmless here (the
                    # size is checked, and the CRLF after the payload).
                    size = int(size_raw)
                except ValueError:
                    size = -1
                if not 0 <= size <= max_message:
                    raise self._fail("malformed MSG size or over max_message_bytes", pos)
                start = end + 2
                stop = start + size
                if stop + 2 > n:
                    self._need = stop + 2 - pos
                    return pos
                if data[stop + 1] != 10 or data[stop] != 13:
                    raise self._fail("message not followed by CRLF", pos)
                if sid_raw != last_sid_raw:
                    if len(sid_raw) > _MAX_SIZE_DIGITS or not sid_raw.isdigit():
                        raise self._fail("malformed MSG sid", pos)
                    last_sid = int(sid_raw)
                    last_sid_raw = sid_raw
                append((subject, last_sid, reply, data[start:stop]))
                pos = stop + 2
            return pos
        finally:
            self._last_sid_raw = last_sid_raw
            self._last_sid = last_sid

    def _other(self, data: bytes, pos: int, end: int, events: list[Event]) -> int:
        """Parses the operation whose control line is ``data[pos:end]`` (any but an
        upper-case ``MSG``); returns the position after it, or -1 if it is a message whose
        bytes have not all arrived (``_need`` set)."""
        if end - pos > MAX_CONTROL_LINE_BYTES:
            raise self._fail("control line over MAX_CONTROL_LINE_BYTES", pos)
        if data.startswith(_HMSG, pos):
            op = b"HMSG"
            args = data[pos + 5 : end].split()
        else:
            words = data[pos:end].split(None, 1)
            op = words[0].upper() if words else b""
            rest = words[1] if len(words) > 1 else b""
            if op != b"MSG" and op != b"HMSG":
                events.append(self._control(op, rest, pos))
                return end + 2
            args = rest.split()
        # MSG <subject> <sid> [reply] <size>
        # HMSG <subject> <sid> [reply] <header size> <size>
        headered = op == b"HMSG"
        count = len(args) - headered
        if count not in (3, 4):
            raise self._fail(f"malformed {op.decode()} arguments", pos)
        for number in (args[1], args[-1], args[-2]) if headered else (args[1], args[-1]):
            if len(number) > _MAX_SIZE_DIGITS or not number.isdigit():
                raise self._fail(f"malformed {op.decode()} sid or size", pos)
        size = int(args[-1])
        if size > self.max_message_bytes:
            raise self._fail("message over max_message_bytes", pos)
        start = end + 2
        stop = start + size
        if stop + 2 > len(data):
            self._need = stop + 2 - pos
            return -1
        if not data.startswith(_CRLF, stop):
            raise self._fail("message not followed by CRLF", pos)
        reply = args[2] if count == 4 else b""
        sid = int(args[1])
        if not headered:
            events.append((args[0], sid, reply, data[start:stop]))
            return stop + 2
        split = start + int(args[-2])
        if split > stop:
            raise self._fail("HMSG header size over its total size", pos)
        block = data[start:split]
        events.append(Message(args[0], sid, reply, data[split:stop], block, header_block_ok(block)))
        return stop + 2

    def _control(self, op: bytes, rest: bytes, pos: int) -> Event:
        """The event of a control operation other than MSG/HMSG."""
        if op in (b"PING", b"PONG", b"+OK"):
            if rest.strip():
                raise self._fail(f"unexpected arguments after {op.decode()}", pos)
            return PING if op == b"PING" else PONG if op == b"PONG" else OK
        if op == b"-ERR":
            text = rest.strip()
            if len(text) >= 2 and text[:1] == b"'" and text[-1:] == b"'":
                text = text[1:-1]
            return Err(text.decode(errors="replace"))
        if op == b"INFO":
            try:
                info: Any = orjson.loads(rest)
            except orjson.JSONDecodeError:
                info = None
            if not isinstance(info, dict):
                raise self._fail("INFO is not a JSON object", pos)
            return Info(info)
        shown = op[:16].decode(errors="replace")
        raise self._fail(f"unknown operation {shown!r}", pos)
