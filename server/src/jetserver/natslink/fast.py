"""jet's read side of nats-py connections: the ingest hot path of every partition leader.

nats-py (asyncio) spends about 6 us of CPU per received message (a regex per control line,
bytearray churn, a generic ``_process_msg``, an ``asyncio.Queue`` hop per message), and its
parser and header code trust what a publisher sent: one malformed header block raised
``IndexError`` inside its read loop and stopped the connection for every stream until the
ping timeout (issue 31). Two pieces here:

- :class:`JetParser`: the object nats-py feeds each read. Every byte is parsed by jet's
  own sans-I/O reader (:mod:`jetserver.natsproto`); messages of direct subscriptions go
  to them at once, everything else to nats-py's ``_process_*`` handlers. No nats-py code
  parses what a publisher sent: header maps come from :func:`~jetserver.natsproto.header_map`.
  A malformed header block is counted, logged at a bounded rate, and its message
  delivered without headers (spec/envelope.md); nothing a message carries can stop the
  read loop.
- :class:`JetNatsClient`: a nats-py client whose callback subscriptions registered with
  :meth:`JetNatsClient.deliver_directly` skip the generic message processing and the
  ``asyncio.Queue``: messages go to a deque drained by one delivery task per subscription,
  which awaits the callback for each message in order (as nats-py does). Pending limits
  are kept: beyond them a message is dropped and reported as a slow consumer, as nats-py
  does. A subscription may also give a *sink*: a plain function that takes a message
  without headers at once (no ``Msg`` object, no task hop) or declines it; a declined
  message, and every later one until the deque is empty again, goes through the deque and
  the callback, so the order is kept. An idle subscription costs little: the deque and
  the task come with the first message that needs them, and
  :meth:`JetNatsClient.subscribe_direct` subscribes without nats-py's own task and queue.

Both rely on nats-py client internals (``_ps``, ``_subs``, ``_process_msg`` and the other
``_process_*`` handlers, ``_build_message``); :func:`fast_path_supported` checks they look
as expected, and :class:`JetNatsClient` behaves like nats-py's client when they do not
(then with nats-py's parser: the server logs this at start).

Task safety: event loop thread only (asyncio).
"""

from __future__ import annotations

import asyncio
import collections
import inspect
import logging
from typing import Any

import attrs
import nats.errors
from nats.aio import client as nats_client
from nats.aio.client import Client as NatsClient
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from nats.protocol import parser as nats_parser

from jetsdk.codec.nats_headers import parse_header_block
from jetserver.broker.nats_port import HeaderedMsg, MessageHandler, Sink, SkipMarked
from jetserver.natslink.read import JetParser
from jetserver.natsproto import header_block_ok, header_map

__all__ = ["JetNatsClient", "JetParser", "fast_path_supported"]

log = logging.getLogger(__name__)


_MAX_CACHED_SUBJECTS = 10_000


def fast_path_supported() -> bool:
    """True if this nats-py has the internals the fast paths use, as expected."""
    try:
        params = list(inspect.signature(NatsClient._process_msg).parameters)
        build = list(inspect.signature(NatsClient._build_message).parameters)
    except (AttributeError, TypeError, ValueError):
        return False
    return (
        params == ["self", "sid", "subject", "reply", "data", "headers"]
        and build[:6] == ["self", "sid", "subject", "reply", "data", "headers"]
        and hasattr(nats_parser.Parser, "reset")
        and all(
            hasattr(NatsClient, name)
            for name in ("_process_ping", "_process_pong", "_process_info", "_process_err")
        )
        and hasattr(NatsClient, "_process_headers")
        and hasattr(NatsClient, "_send_subscribe")
        and hasattr(Subscription, "_stop_processing")
    )


_SUPPORTED = fast_path_supported()


@attrs.frozen
class DirectDelivery:
    """Where a directly delivered subscription's messages go, and its pending limits."""

    handler: MessageHandler
    """Called with each message the sink does not take, in order."""
    max_msgs: int
    """Most messages waiting for the handler (nats-py's ``pending_msgs_limit``)."""
    max_bytes: int
    """Most bytes waiting for the handler (nats-py's ``pending_bytes_limit``)."""
    sink: Sink | None = None
    """Takes messages in the reader's callback when it can (None: all go to the handler)."""
    skip: SkipMarked | None = None
    """Drops the messages it matches before any parsing (None: none)."""


class _Direct:
    """Direct delivery for one subscription: a deque and the task that drains it."""

    __slots__ = (
        "busy",
        "handler",
        "max_bytes",
        "max_msgs",
        "nc",
        "pending_bytes",
        "queue",
        "sid",
        "sink",
        "skip",
        "task",
        "waiting",
        "wake",
    )

    def __init__(self, nc: JetNatsClient, sid: int, delivery: DirectDelivery) -> None:
        self.nc = nc
        self.sid = sid
        # Copied into slots: the per-message path reads them without a second lookup.
        self.handler = delivery.handler
        self.sink = delivery.sink
        self.skip = delivery.skip
        self.busy = False
        """The task is delivering a message (a later one must not overtake it by the sink)."""
        self.max_msgs = delivery.max_msgs
        self.max_bytes = delivery.max_bytes
        # The deque, the event and the task come with the first message the sink does not
        # take (about 2.5 KB together: most of an idle partition's subscription).
        self.queue: collections.deque[Msg] | None = None
        self.pending_bytes = 0
        self.wake: asyncio.Event | None = None
        self.waiting = False
        self.task: asyncio.Task[None] | None = None

    def full(self, size: int) -> bool:
        """True if a message of ``size`` bytes would pass the pending limits."""
        queue = self.queue
        if queue is None:
            return 0 < self.max_bytes < size
        return (self.max_msgs > 0 and len(queue) >= self.max_msgs) or (
            self.max_bytes > 0 and self.pending_bytes + size > self.max_bytes
        )

    def enqueue(self, msg: Msg, size: int) -> None:
        """Queue ``msg`` for the delivery task (started on the first message)."""
        queue = self.queue
        if queue is None:
            queue = self.queue = collections.deque()
            self.wake = asyncio.Event()
            self.task = asyncio.get_running_loop().create_task(self._run(queue, self.wake))
        queue.append(msg)
        self.pending_bytes += size
        if self.waiting and self.wake is not None:
            self.waiting = False
            self.wake.set()

    def push(self, subject: bytes, reply: bytes, data: bytes) -> None:
        """Queue one message without headers (or drop it as a slow consumer)."""
        nc = self.nc
        size = len(data)
        stats = nc.stats
        stats["in_msgs"] += 1
        stats["in_bytes"] += size
        if self.full(size):
            nc._jet_slow_consumer(self.sid, subject, reply)
            return
        names = nc._jet_subjects
        subject_text = names.get(subject)
        if subject_text is None:
            if len(names) >= _MAX_CACHED_SUBJECTS:
                names.clear()
            subject_text = names[subject] = subject.decode()
        reply_text = reply.decode() if reply else ""
        sink = self.sink
        if (
            sink is not None
            and not self.queue
            and not self.busy
            and sink(subject_text, reply_text, data)
        ):
            return
        self.enqueue(
            Msg(
                _client=nc,
                subject=subject_text,
                reply=reply_text,
                data=data,
                headers=None,
                _sid=self.sid,
            ),
            size,
        )

    def stop(self) -> None:
        if self.task is not None:
            self.task.cancel()
            self.task = None
        if self.queue is not None:
            self.queue.clear()
        self.pending_bytes = 0

    async def _run(self, queue: collections.deque[Msg], wake: asyncio.Event) -> None:
        handler = self.handler
        while True:
            if not queue:
                wake.clear()
                self.waiting = True
                try:
                    await wake.wait()
                finally:
                    self.waiting = False
                continue
            msg = queue.popleft()
            self.pending_bytes -= len(msg.data)
            self.busy = True
            try:
                await handler(msg)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # as nats-py: callback errors go to the error callback
                await self.nc._error_cb(exc)
            finally:
                self.busy = False


class _DirectSubscription(Subscription):
    """nats-py's subscription of a direct delivery: it starts no task of its own, and its
    ``asyncio.Queue`` (3 deques and an event: about 3 KB) is made only if nats-py's own
    code asks for it (it is never used while the direct delivery runs)."""

    @property
    def _pending_queue(self) -> asyncio.Queue[Msg]:
        queue: asyncio.Queue[Msg] | None = self.__dict__.get("_jet_queue")
        if queue is None:
            queue = self.__dict__["_jet_queue"] = asyncio.Queue(maxsize=self._pending_msgs_limit)
        return queue

    @_pending_queue.setter
    def _pending_queue(self, value: asyncio.Queue[Msg]) -> None:
        """nats-py's constructor makes a queue: dropped here, made again on first use."""


class JetNatsClient(NatsClient):
    """nats-py's client with :class:`JetParser` and direct delivery (when supported)."""

    def __init__(self) -> None:
        super().__init__()
        self._jet_direct: dict[int, _Direct] = {}
        self._jet_subjects: dict[bytes, str] = {}
        if _SUPPORTED:
            self._ps = JetParser(self)
        else:
            log.warning(
                "this nats-py lacks the internals of jet's NATS reader: ingest is slower, and "
                "a plain message keeps only the last value of a repeated header name"
            )

    def deliver_directly(self, sid: int, delivery: DirectDelivery) -> bool:
        """Deliver the messages of subscription ``sid`` to ``delivery.sink`` when it takes
        them, else to its handler through a deque and one task, instead of nats-py's queue
        (see the module docstring); messages that its ``skip`` matches are dropped first.
        Returns False (nothing changed) if this nats-py is not supported. Call
        :meth:`stop_direct` when unsubscribing."""
        if not _SUPPORTED:
            return False
        self.stop_direct(sid)
        self._jet_direct[sid] = _Direct(self, sid, delivery)
        return True

    async def subscribe_direct(
        self, subject: str, queue: str, delivery: DirectDelivery
    ) -> Subscription:
        """Subscribe with direct delivery (:meth:`deliver_directly`) from the first
        message on: as nats-py's ``subscribe(subject, queue, cb=delivery.handler, ...)`` but without
        its per-subscription task and ``asyncio.Queue`` (about 4 KB per subscription, most
        of an idle partition's memory with thousands of them). Where the fast path is not
        supported, nats-py's own subscribe.

        Raises:
            nats.errors.Error: as nats-py's subscribe (closed, draining, bad subject).
        """
        if not _SUPPORTED:
            return await self.subscribe(
                subject,
                queue=queue,
                cb=delivery.handler,
                pending_msgs_limit=delivery.max_msgs,
                pending_bytes_limit=delivery.max_bytes,
            )
        validate = getattr(nats_client, "_validate_subject", None)
        if validate is not None:
            validate(subject, strict=True)
        elif not subject:
            raise nats.errors.BadSubjectError
        if self.is_closed:
            raise nats.errors.ConnectionClosedError
        if self.is_draining:
            raise nats.errors.ConnectionDrainingError
        self._sid += 1
        sid = self._sid
        sub = _DirectSubscription(
            self,
            sid,
            subject,
            queue=queue,
            cb=delivery.handler,
            pending_msgs_limit=delivery.max_msgs,
            pending_bytes_limit=delivery.max_bytes,
        )
        self.deliver_directly(sid, delivery)
        self._subs[sid] = sub
        await self._send_subscribe(sub)
        return sub

    def stop_direct(self, sid: int) -> None:
        """End direct delivery for ``sid`` (messages not yet delivered are dropped)."""
        direct = self._jet_direct.pop(sid, None)
        if direct is not None:
            direct.stop()

    def stop_all_direct(self) -> None:
        """End every direct delivery (at close)."""
        for sid in list(self._jet_direct):
            self.stop_direct(sid)

    def _jet_slow_consumer(self, sid: int, subject: bytes, reply: bytes) -> None:
        """Report a dropped message as nats-py does (its error callback, as a task)."""
        sub = self._subs.get(sid)
        error = nats.errors.SlowConsumerError(
            subject=subject.decode(errors="replace"),
            reply=reply.decode(errors="replace"),
            sid=sid,
            sub=sub,  # type: ignore[arg-type]
        )
        asyncio.get_running_loop().create_task(self._jet_report(error))

    async def _jet_report(self, error: Exception) -> None:
        await self._error_cb(error)

    async def _process_msg(
        self, sid: int, subject: bytes, reply: bytes, data: bytes, headers: bytes
    ) -> None:
        # headers is None for MSG (nats-py's own annotation says bytes).
        direct = self._jet_direct.get(sid)
        if direct is None or sid not in self._subs:
            await super()._process_msg(sid, subject, reply, data, headers)
            return
        if headers and not header_block_ok(bytes(headers)):
            # Only through nats-py's own parser (JetParser drops these blocks itself).
            self._malformed(subject, len(headers))
            headers = None  # type: ignore[assignment]
        if not headers:
            direct.push(subject, reply, data)
            return
        size = len(data)
        if direct.skip is not None and direct.skip.matches(headers, data):
            self.stats["in_msgs"] += 1
            self.stats["in_bytes"] += size
            return
        stats: dict[str, Any] = self.stats
        stats["in_msgs"] += 1
        stats["in_bytes"] += size
        if direct.full(size):
            self._jet_slow_consumer(sid, subject, reply)
            return
        block = bytes(headers)
        lines = parse_header_block(block)
        direct.enqueue(
            HeaderedMsg(
                _client=self,
                subject=subject.decode(),
                reply=reply.decode() if reply else "",
                data=data,
                headers=header_map(block, lines),
                _sid=sid,
                header_lines=lines,
            ),
            size,
        )

    async def _process_headers(self, headers: bytes | None) -> dict[str, str] | None:
        """nats-py's header map of a message, read by :func:`~jetserver.natsproto.header_map`
        instead of nats-py's own code (which raised on malformed blocks, issue 31)."""
        if not headers:
            return None
        if not header_block_ok(bytes(headers)):
            self._malformed(b"", len(headers))
            return None
        return header_map(bytes(headers))

    def _malformed(self, subject: bytes, header_bytes: int) -> None:
        if isinstance(self._ps, JetParser):
            self._ps.malformed(subject, header_bytes)
