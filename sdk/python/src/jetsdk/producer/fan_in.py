"""Batches of many partitions to one server in one request (Kafka's ``drain`` per node).

A producer's partition senders each have a Produce request body ready for the partition's
leader. :class:`FanIn` collects the bodies submitted for the same connection during one
event-loop turn and, at the end of the turn, sends them as ONE ProduceMany request
(spec/protocol.md, "17 ProduceMany"), bounded by the server's frame limit and
:data:`~jetsdk.codec.produce_many.MAX_PRODUCE_SECTIONS`; a body alone goes as the Produce
request it is. Each submitter gets a :class:`SectionAnswer` that ends with its section's
Produce response body or its section's error, so each partition's sender keeps its own
ordering, sequences and retries (it retries its section only).

Only where the server's Hello lists ProduceMany (``apis``) and on asyncio; elsewhere
:meth:`FanIn.submit` answers None and the sender sends its Produce request itself.

Task safety: one asyncio event loop.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence

import anyio.lowlevel

from jetsdk.codec.errors import CodecError
from jetsdk.codec.frames import FRAME_HEADER_SIZE, Api
from jetsdk.codec.limits import DEFAULT_MAX_FRAME_BYTES
from jetsdk.codec.messages import decode_error
from jetsdk.codec.produce_many import (
    MAX_PRODUCE_SECTIONS,
    produce_many_request_parts,
    produce_many_response_sections,
)
from jetsdk.connection import Connection, PendingResponse, RequestBody
from jetsdk.errors import ClientClosed, JetError, MalformedFrame, Timeout, error_from_body
from jetsdk.expiries import expire_after
from jetsdk.pending_stream import wait_future
from jetsdk.transport import running_asyncio_loop

__all__ = ["FanIn", "SectionAnswer", "serves_produce_many"]

log = logging.getLogger(__name__)

_SECTION_OVERHEAD = 4
"""Bytes a section adds to a ProduceMany body besides its Produce body (its length)."""


def serves_produce_many(conn: Connection) -> bool:
    """True if the server's Hello answer on ``conn`` lists ProduceMany."""
    apis = conn.server_info.get("apis")
    return isinstance(apis, list) and int(Api.PRODUCE_MANY) in apis


class SectionAnswer:
    """The answer to one submitted Produce body (as a connection's pending response)."""

    __slots__ = ("_body", "_error", "_expiry", "_future", "_on_done", "label")

    def __init__(
        self, future: asyncio.Future[bool], label: str, expiry: _Expiry | None = None
    ) -> None:
        self._future = future
        self._body: bytes | None = None
        self._error: JetError | None = None
        self._on_done: Callable[[object], None] | None = None
        self._expiry = expiry
        """The timer of its request's answers (None: an answer of its own, armed by
        :meth:`when_done`)."""
        self.label = label

    def _resolve(self, body: bytes | None, error: JetError | None) -> None:
        """The answer (both None: its wait timed out); the :meth:`when_done` callback runs
        from the loop, as a future's done callback would (not in the request's task: a
        handle's callback settled there would run in that task)."""
        future = self._future
        if future.done():
            return
        self._body, self._error = body, error
        future.set_result(True)
        on_done = self._on_done
        if on_done is not None:
            self._on_done = None
            future.get_loop().call_soon(on_done, future)

    @property
    def body_now(self) -> bytes | None:
        """The section's Produce response body if it arrived (None: not yet, or an error
        arrived)."""
        return self._body

    def _answered(self) -> None:
        """Its request was answered (or failed): its timer counts it."""
        expiry = self._expiry
        if expiry is not None:
            expiry.answered()

    def when_done(self, callback: Callable[[object], None], timeout: float) -> bool:
        """Have ``callback(future)`` called once the answer or an error arrived, or
        ``timeout`` seconds passed (:meth:`wait` then raises Timeout); True. The timeout
        is its request's one timer (:class:`_Expiry`), not a wait of its own."""
        future = self._future
        if future.done():
            future.get_loop().call_soon(callback, future)
            return True
        self._on_done = callback
        expiry = self._expiry
        if expiry is None:
            expiry = self._expiry = _Expiry(future.get_loop(), [self])
            expiry.timeout = timeout
            expiry.arm()
        elif timeout > expiry.timeout:
            expiry.timeout = timeout
        return True

    async def wait(self, timeout: float | None) -> bytes:
        """The section's Produce response body.

        Raises:
            Timeout: no answer within ``timeout`` seconds.
            JetError: the section's error, or the whole request's.
        """
        future = self._future
        if not future.done():
            await wait_future(future, timeout)
        if self._body is None and self._error is None:
            raise Timeout(f"no response to Produce from {self.label} within {timeout}s")
        if self._error is not None:
            # A caller cancelled in the same moment sees that (as PendingResponse.wait).
            await anyio.lowlevel.checkpoint_if_cancelled()
            raise self._error
        assert self._body is not None
        return self._body


class _Expiry:
    """The timeout of the answers of one loop turn's requests to a server: one timer
    (:func:`~jetsdk.expiries.expire_after`) for them all, armed once their bodies are
    cut, with the longest timeout their :meth:`SectionAnswer.when_done` asked for; when
    it fires, each answer not resolved yet is resolved as timed out. A wide producer's
    section registered a timer of its own each (about 20 Python lines and a future's
    done callback, then a loop handle to call it back, per partition per request)."""

    __slots__ = ("answers", "future", "requests", "timeout")

    def __init__(self, loop: asyncio.AbstractEventLoop, answers: list[SectionAnswer]) -> None:
        self.future: asyncio.Future[bool] = loop.create_future()
        self.answers = answers
        self.timeout = 0.0
        """Seconds the answers may take (0: nobody asked, nothing armed)."""
        self.requests = 0
        """Requests of these answers not answered yet (the timer is dropped at 0)."""

    def arm(self) -> None:
        """Start the timer, if an answer asked for one."""
        if self.timeout > 0:
            self.future.add_done_callback(self._expired)
            expire_after(self.future, self.timeout)

    def answered(self) -> None:
        """One of the requests was answered (or failed): at the last, drop the timer."""
        self.requests -= 1
        future = self.future
        if self.requests <= 0 and not future.done():
            future.remove_done_callback(self._expired)
            future.set_result(True)

    def _expired(self, _future: object) -> None:
        for answer in self.answers:
            answer._resolve(None, None)  # (one resolved already ignores it)


Cut = Callable[[SectionAnswer], "RequestBody | None"]
"""A partition's batch cut at the end of the turn: given the answer its request will get,
the request's body (None: nothing to send any more, its sender took it)."""


class _Group:
    """What was submitted for one connection in one loop turn."""

    __slots__ = ("answers", "bodies", "cuts", "expiry", "many", "timeout")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.bodies: list[RequestBody] = []
        self.answers: list[SectionAnswer] = []
        self.cuts: list[Cut] = []
        self.timeout = 0.0
        self.expiry = _Expiry(loop, self.answers)
        self.many = False
        """A body alone goes as a ProduceMany of one section too (:meth:`FanIn.defer`)."""


class FanIn:
    """Groups the Produce bodies of one producer by connection, per loop turn (module
    docstring)."""

    def __init__(self) -> None:
        self._open: dict[Connection, _Group] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._wrote_now: set[Connection] = set()
        """Connections a body was written to at once in this loop turn."""
        self._loop: asyncio.AbstractEventLoop | None = None
        """The asyncio loop it runs on, once known (on Python 3.11 each look-up of the
        running loop is a getpid system call: several a partition's batch)."""
        self.requests = 0
        """Requests sent (ProduceMany or Produce)."""
        self.sections = 0
        """Bodies sent in them."""

    def takes(self, conn: Connection) -> bool:
        """True if bodies for ``conn`` go through here (its server lists ProduceMany and
        this is asyncio)."""
        return not conn.closed and serves_produce_many(conn) and self.loop() is not None

    def loop(self) -> asyncio.AbstractEventLoop | None:
        """The running asyncio loop (None: another one, trio), looked up once."""
        loop = self._loop
        if loop is None:
            loop = self._loop = running_asyncio_loop()
        return loop

    def writes_now(self, conn: Connection) -> bool:
        """True if :meth:`submit` would write a body for ``conn`` at once, alone: nothing
        was submitted for it in this loop turn yet and it is free to write."""
        return conn not in self._open and conn not in self._wrote_now and conn.can_send_now

    def submit(
        self, conn: Connection, body: RequestBody, timeout: float
    ) -> PendingResponse | SectionAnswer | None:
        """Send Produce request ``body`` to ``conn``'s server with the other bodies of this
        loop turn; its answer. None (nothing sent) if the server does not list ProduceMany
        or this is not asyncio (:meth:`takes`): send it as a Produce request then.
        ``timeout``: seconds the answer may take.

        The first body of a loop turn for a connection free to write is written at once,
        alone, as a Produce request (the latency of a message sent to an idle producer
        does not wait for the end of the turn); the next ones of that turn go together at
        its end."""
        if not self.takes(conn):
            return None
        loop = self._loop
        assert loop is not None  # (takes held)
        if self.writes_now(conn):
            pending = self.write_now(conn, body, loop)
            if pending is not None:
                return pending
        group = self._group(conn, loop, timeout)
        answer = SectionAnswer(loop.create_future(), conn.label, group.expiry)
        group.bodies.append(body)
        group.answers.append(answer)
        return answer

    def write_now(
        self, conn: Connection, body: RequestBody, loop: asyncio.AbstractEventLoop
    ) -> PendingResponse | None:
        """:meth:`submit` of a body the caller knows is written at once (:meth:`takes` and
        :meth:`writes_now` held in this turn): its pending response, None if the
        connection did not take it (then :meth:`submit` it)."""
        pending = conn.send_nowait(Api.PRODUCE, body)
        if pending is not None:
            self.requests += 1
            self.sections += 1
            self._wrote_now.add(conn)
            loop.call_soon(self._wrote_now.discard, conn)
        return pending

    def defer(self, conn: Connection, cut: Cut, timeout: float, many: bool = False) -> None:
        """Have ``cut`` make a body for ``conn`` at the end of this loop turn, to go with
        the others (a partition's batch then holds every message queued in the turn).
        Only where :meth:`takes` holds. ``many``: if it goes alone, as a ProduceMany of
        one section rather than a Produce request (a table's round of puts to one
        partition: the server appends an ALL-acked section in one step,
        broker/produce_section.py)."""
        loop = self._loop
        assert loop is not None  # (takes held)
        group = self._group(conn, loop, timeout)
        group.cuts.append(cut)
        if many:
            group.many = True

    def _group(self, conn: Connection, loop: asyncio.AbstractEventLoop, timeout: float) -> _Group:
        group = self._open.get(conn)
        if group is None:
            group = self._open[conn] = _Group(loop)
            loop.call_soon(self._flush, conn, group)
        group.timeout = max(group.timeout, timeout)
        return group

    def _flush(self, conn: Connection, group: _Group) -> None:
        """Send ``group`` at the end of its loop turn: one request per
        :data:`MAX_PRODUCE_SECTIONS` sections or frame limit."""
        if self._open.get(conn) is group:
            del self._open[conn]
        bodies, answers, expiry = group.bodies, group.answers, group.expiry
        create_future, label = expiry.future.get_loop().create_future, conn.label
        for cut in group.cuts:
            answer = SectionAnswer(create_future(), label, expiry)
            body = cut(answer)
            if body is not None:
                bodies.append(body)
                answers.append(answer)
        limit = _limit(conn)
        requests = self.requests
        start, size = 0, 4
        many = group.many
        for i, body in enumerate(bodies):
            added = _length(body) + _SECTION_OVERHEAD
            if i > start and (i - start >= MAX_PRODUCE_SECTIONS or size + added > limit):
                self._send_soon(conn, bodies[start:i], answers[start:i], group.timeout, many)
                start, size = i, 4
            size += added
        if start < len(bodies):
            self._send_soon(conn, bodies[start:], answers[start:], group.timeout, many)
        expiry.requests = self.requests - requests
        expiry.arm()

    def _send_soon(
        self,
        conn: Connection,
        bodies: list[RequestBody],
        answers: list[SectionAnswer],
        timeout: float,
        many: bool = False,
    ) -> None:
        self.requests += 1
        self.sections += len(bodies)
        body: RequestBody
        if len(bodies) == 1 and not many:
            api, body = Api.PRODUCE, bodies[0]
        else:
            # In parts: large sections are written after the frame header as they are.
            api, body = Api.PRODUCE_MANY, produce_many_request_parts(bodies)
        task = (
            answers[0]._future.get_loop().create_task(self._send(conn, api, body, answers, timeout))
        )
        self._tasks.add(task)  # held until it ends: the loop keeps only weak references
        task.add_done_callback(self._tasks.discard)

    async def _send(
        self,
        conn: Connection,
        api: int,
        body: RequestBody,
        answers: list[SectionAnswer],
        timeout: float,
    ) -> None:
        try:
            pending = conn.send_nowait(api, body)
            if pending is None:
                pending = await conn.send(api, body)
            answer = await pending.wait(timeout)
        except JetError as exc:
            for section in answers:
                section._resolve(None, exc)
            answers[0]._answered()
            return
        except BaseException:  # cancelled (the loop closes): nobody gets an answer
            error = ClientClosed(f"the request to {conn.label} was cancelled")
            for section in answers:
                section._resolve(None, error)
            answers[0]._answered()
            raise
        if api == Api.PRODUCE:
            answers[0]._resolve(answer, None)
        else:
            _distribute(conn.label, answer, answers)
        answers[0]._answered()


def _length(body: RequestBody) -> int:
    """Bytes of a Produce body, whole or in parts."""
    return len(body) if isinstance(body, bytes) else sum(map(len, body))


def _distribute(label: str, answer: bytes, answers: Sequence[SectionAnswer]) -> None:
    """Hand each section of a ProduceMany response to its submitter."""
    try:
        sections = produce_many_response_sections(answer)
        if len(sections) != len(answers):
            raise CodecError(f"{len(sections)} sections answer {len(answers)}")
    except CodecError as exc:
        error = MalformedFrame(f"bad ProduceMany response from {label}: {exc}")
        for pending in answers:
            pending._resolve(None, error)
        return
    for pending, (code, body) in zip(answers, sections, strict=True):
        if code == 0:
            pending._resolve(body, None)
            continue
        try:
            pending._resolve(None, error_from_body(decode_error(body)))
        except CodecError as exc:
            pending._resolve(None, MalformedFrame(f"undecodable section error from {label}: {exc}"))


def _limit(conn: Connection) -> int:
    """Most body bytes of one request to ``conn``'s server (its frame limit)."""
    value = conn.server_info.get("max_frame_bytes")
    frame_limit = value if isinstance(value, int) and value > 0 else DEFAULT_MAX_FRAME_BYTES
    return frame_limit - FRAME_HEADER_SIZE
