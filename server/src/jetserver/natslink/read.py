"""The read side of jet's nats-py connections: every byte parsed by jet's own reader.

:class:`JetParser` is the parser object nats-py's client feeds each read (its ``_ps``).
Jet's sans-I/O reader (:mod:`jetserver.natsproto`) parses the bytes; this dispatches the
events: messages of direct subscriptions (:mod:`jetserver.natslink.fast`) straight to them,
everything else to nats-py's ``_process_*`` handlers. :class:`SkipMarked` drops a direct
subscription's stored copies before any further work.

Task safety: event loop thread only (asyncio).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any, Protocol

import nats.errors
from nats.protocol import parser as nats_parser

from jetserver.broker.nats_port import SkipMarked
from jetserver.logs import fields
from jetserver.natsproto import (
    Err,
    Event,
    Info,
    Message,
    NatsProtocolError,
    NatsReader,
    Ping,
    Pong,
)

log = logging.getLogger(__name__)

MALFORMED_LOG_INTERVAL_S = 10.0
"""At most one warning per this many seconds about malformed header blocks (each counted)."""


class DirectDelivery(Protocol):
    """What :class:`JetParser` uses of a direct subscription (``natslink.fast._Direct``)."""

    skip: SkipMarked | None
    """Drops the stored copies it matches, if set."""

    def push(self, subject: bytes, reply: bytes, data: bytes) -> None:
        """Deliver one message without headers."""


def _no_push(subject: bytes, reply: bytes, data: bytes) -> None:
    raise AssertionError("no direct subscription yet")  # last_sid is -1 until one is set


class JetParser(nats_parser.Parser):
    """The read side of a connection: :class:`~jetserver.natsproto.NatsReader` parses
    every byte the NATS server sends; this dispatches its events to the client (direct
    subscriptions at once, everything else through nats-py's ``_process_*`` handlers).

    nats-py calls :meth:`parse` with each read and :meth:`reset` on reconnect (the reader
    starts afresh). A malformed header block (``headers_ok`` False) is counted
    (:attr:`malformed_headers`), logged at most once per :data:`MALFORMED_LOG_INTERVAL_S`,
    and its message delivered without headers (spec/envelope.md, "Malformed header
    blocks"). A handler raising is logged and the next message handled: nothing a message
    carries can stop the read loop. A stream the reader cannot parse
    (:class:`~jetserver.natsproto.NatsProtocolError`) becomes nats-py's
    ``ProtocolError``, on which nats-py reconnects at once."""

    reader: NatsReader
    malformed_headers: int = 0
    """Messages whose header block was malformed (delivered without headers)."""
    handler_errors: int = 0
    """Messages whose delivery raised (logged, skipped)."""

    def __init__(self, nc: Any = None) -> None:
        self._malformed_log = _Throttle(MALFORMED_LOG_INTERVAL_S)
        self._error_log = _Throttle(MALFORMED_LOG_INTERVAL_S)
        super().__init__(nc)

    def reset(self) -> None:
        """Forget any partial operation (a new connection)."""
        super().reset()
        self.reader = NatsReader()

    async def parse(self, data: bytes = b"") -> None:
        """Parse ``data`` (what the last read returned) and dispatch what it completes.

        Raises:
            nats.errors.ProtocolError: the stream cannot be parsed (nats-py reconnects).
        """
        try:
            events = self.reader.feed(data)
        except NatsProtocolError as exc:
            await self._dispatch(exc.events_before)
            log.warning("nats protocol error; reconnecting", extra=fields(error=str(exc)))
            raise nats.errors.ProtocolError(str(exc)) from exc
        await self._dispatch(events)

    async def _dispatch(self, events: list[Event]) -> None:
        nc = self.nc
        directs: dict[int, DirectDelivery] = getattr(nc, "_jet_direct", {})
        subs = nc._subs
        # The direct subscription of the previous MSG (runs of one sid are the common
        # case); forgotten after any await, which may unsubscribe.
        last_sid = -1
        push: Callable[[bytes, bytes, bytes], None] = _no_push
        for event in events:
            try:
                if type(event) is tuple:
                    subject, sid, reply, payload = event
                    if sid == last_sid:
                        push(subject, reply, payload)
                        continue
                    direct = directs.get(sid)
                    if direct is not None and sid in subs:
                        last_sid, push = sid, direct.push
                        push(subject, reply, payload)
                        continue
                    last_sid = -1
                    await nc._process_msg(sid, subject, reply, payload, None)
                    continue
                last_sid = -1
                if isinstance(event, Message):
                    await self._headered(event, directs)
                elif isinstance(event, Ping):
                    await nc._process_ping()
                elif isinstance(event, Pong):
                    await nc._process_pong()
                elif isinstance(event, Info):
                    await nc._process_info(event.info)
                elif isinstance(event, Err):
                    # nats-py matches lower-case texts ("stale connection", ...).
                    await nc._process_err(f"'{event.message}'".lower())
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                last_sid = -1
                self.handler_errors += 1
                skipped = self._error_log.ready()
                if skipped is not None:
                    log.exception(
                        "nats message handling failed; next message",
                        extra=fields(error=f"{type(exc).__name__}: {exc}", unlogged_before=skipped),
                    )

    async def _headered(self, msg: Message, directs: dict[int, DirectDelivery]) -> None:
        """An HMSG: a malformed block is dropped (the message goes on without headers);
        a stored copy a direct subscription's :class:`SkipMarked` matches is dropped."""
        nc = self.nc
        sid = msg.sid
        if not msg.headers_ok:
            self.malformed(msg.subject, len(msg.headers))
            await nc._process_msg(sid, msg.subject, msg.reply, msg.payload, None)
            return
        direct = directs.get(sid)
        skip = direct.skip if direct is not None and sid in nc._subs else None
        if skip is not None and skip.matches(msg.headers, msg.payload):
            nc.stats["in_msgs"] += 1
            nc.stats["in_bytes"] += len(msg.payload)
            return
        await nc._process_msg(sid, msg.subject, msg.reply, msg.payload, msg.headers)

    def malformed(self, subject: bytes, header_bytes: int) -> None:
        """Count (and log, at most once per interval) a malformed header block."""
        self.malformed_headers += 1
        skipped = self._malformed_log.ready()
        if skipped is None:
            return
        log.warning(
            "nats message with a malformed header block: delivered without headers",
            extra=fields(
                subject=subject.decode(errors="replace"),
                header_bytes=header_bytes,
                unlogged_before=skipped,
                total=self.malformed_headers,
            ),
        )


class _Throttle:
    """Lets a log line through at most once per ``interval_s`` seconds."""

    __slots__ = ("_at", "_skipped", "interval_s")

    def __init__(self, interval_s: float) -> None:
        self.interval_s = interval_s
        self._at = -interval_s
        self._skipped = 0

    def ready(self) -> int | None:
        """How many were held back since the last one let through, or None (hold this
        one back too)."""
        now = time.monotonic()
        if now - self._at < self.interval_s:
            self._skipped += 1
            return None
        skipped, self._skipped, self._at = self._skipped, 0, now
        return skipped
