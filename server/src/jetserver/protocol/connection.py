"""One client connection: read frames, run requests concurrently, write responses.

- Pipelining: every request runs in its own (asyncio) task; at most
  ``max_inflight_per_connection`` at once (reading pauses beyond that, so a client cannot
  queue unbounded work). A FetchStream request's task writes its replies one after the
  other (:attr:`Reply.then`) and is one request in flight until the last.
- Responses are written whole under a lock, each within ``write_timeout_s``; a client that
  does not read is disconnected.
- A length prefix over the limit gets FRAME_TOO_LARGE (correlation id 0), an undecodable
  frame or body gets MALFORMED_FRAME; then the connection is closed.
- A frame that started arriving must complete within ``read_timeout_s``; a connection with
  nothing in flight and no request for ``idle_timeout_s`` is closed.

Task safety: one :class:`AcceptedConnection` per socket, owned by the listener's task group. The
server runs on asyncio (or uvloop) only: nats-py needs it.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections.abc import Coroutine
from typing import Any

import anyio
import attrs

from jetsdk.codec.error_codes import ErrorCode
from jetsdk.codec.errors import CodecError
from jetsdk.codec.frames import (
    FLAG_ERROR,
    FLAG_RESPONSE,
    Api,
    Frame,
    FrameDecoder,
    FrameTooLarge,
)
from jetserver.config.server import LimitsConfig
from jetserver.infra import hops
from jetserver.logs import fields
from jetserver.protocol import stream_control
from jetserver.protocol.held import HELD_REPLY, HOLD, HeldRequest, Resumed
from jetserver.protocol.reply import ANSWER_NOW, AnswerAtOnce, Handler, Reply, error_reply
from jetserver.protocol.reply_send import send_at_once, send_rest
from jetserver.protocol.socket_io import RECV_BYTES, SocketIO
from jetserver.protocol.stream_control import StreamControl
from jetserver.storage import ReadSlice

log = logging.getLogger(__name__)

__all__ = ["ANSWER_NOW", "AcceptedConnection", "Handler", "Reply", "error_reply"]

_API_NAMES: dict[int, str] = {
    Api.PRODUCE: "produce",
    Api.FETCH: "fetch",
    Api.FETCH_STREAM: "fetch_stream",
    Api.REPLICA_FETCH: "replica_fetch",
}
"""Hop names of the APIs on a message's path (jetserver.infra.hops)."""

_ERROR_FLAGS = FLAG_RESPONSE | FLAG_ERROR
# Plain ints: an enum member's look-up costs ~170 ns on Python 3.11 (five per request).
_PRODUCE = int(Api.PRODUCE)
_PRODUCE_MANY = int(Api.PRODUCE_MANY)
_FETCH_STREAM = int(Api.FETCH_STREAM)
_STREAM_CONTROLS = stream_control.APIS  # CancelFetchStream, FetchStreamCredit
_REPLICA_FETCH = int(Api.REPLICA_FETCH)
HEAD_READ_BYTES = 4096
"""Bytes asked for by the read after a frame's body was read in place (one of RECV_BYTES
took the next's header and first 256 KiB, then copied them); later reads ask RECV_BYTES."""
READ_IN_PLACE_MIN_BYTES = 64 * 1024
"""A request frame's body of at least this many bytes not all received at once is received
in place, into a buffer of its size (FrameDecoder ``readinto_min``): no join of the chunks
(about 0.2-0.35 CPU ms per MiB of Produce requests)."""
_CANCEL_WAIT_S = 5.0
"""Bound on in-flight requests finishing their cancellation when a connection ends."""
_CLOSE_NOTICE_TIMEOUT_S = 1.0
"""Bound on writing the last error frame before closing a misbehaving connection."""


@attrs.define(eq=False)
class AcceptedConnection:
    """Serves one client socket until it closes, misbehaves, times out or the server stops."""

    io: SocketIO
    """The socket."""
    handler: Handler
    """Request handler."""
    limits: LimitsConfig
    """Frame size, in-flight, timeouts."""
    sendfile_min_bytes: int = 1
    """Fetch records of at least this size go out with os.sendfile, smaller ones with
    pread + one sendmsg (config ``fetch.io``)."""
    # asyncio's lock and a counter: anyio's lock and semaphore look up the task's cancel
    # scopes on every acquire, even when free (a fifth of the per-request calls, cProfile).
    _write_lock: asyncio.Lock = attrs.field(factory=asyncio.Lock)
    _writers: int = 0
    """Replies holding :attr:`_write_lock` or waiting for it (and the closing notice): a
    reply is sent without the lock only when there are none."""
    _tail: memoryview | None = None
    """What the socket did not take of a response written by :meth:`write_now`: sent
    first by the next holder of :attr:`_write_lock` (counted in :attr:`_writers`)."""
    _inflight: int = 0
    _slot_freed: asyncio.Event | None = None
    _last_activity: float = attrs.field(factory=time.monotonic)
    _closing: bool = False
    _scope: anyio.CancelScope | None = None
    _tasks: set[asyncio.Task[None]] = attrs.field(factory=set)
    _streaming: set[asyncio.Task[None]] = attrs.field(factory=set)
    """Requests writing their replies after the first (FetchStream)."""
    _stream_controls: dict[int, StreamControl] = attrs.field(factory=dict)
    """The FetchStream requests in flight by correlation id: what ends or tops up each."""
    _corked: list[bytes] | None = None  # write_now's frames held for one send (_cork)
    _uncork_soon: asyncio.Handle | None = None  # the next turn's _uncork of the last _cork
    _ended: bool = False
    """No more requests will be read (the peer closed its side, or the connection fails)."""
    _loop: asyncio.AbstractEventLoop | None = None
    """The loop serving this connection (:meth:`serve`; get_running_loop: a getpid, 3.11)."""
    requests: int = 0
    """Requests received."""
    _decoder: FrameDecoder | None = None
    """The read loop's decoder, while requests may start in the reader callback."""
    at_once: AnswerAtOnce | None = None
    """Answers the common Produce request in the reader callback, with no task
    (:meth:`_answer_at_once`); None: every request in its task."""
    _afters: set[asyncio.Future[None]] = attrs.field(factory=set)
    """The after-work of requests answered in the reader callback (held until done)."""
    held: set[HeldRequest] = attrs.field(factory=set)  # in flight with no task (held.py)

    async def serve(self) -> None:
        """Run until the connection ends; never raises (errors are logged)."""
        self._loop = asyncio.get_running_loop()
        try:
            with anyio.CancelScope() as scope:
                self._scope = scope
                await self._read_loop()
                # Peer closed its side or we stopped reading: let in-flight requests finish
                # (but streams: their remaining answers have nobody to read them).
                self._ended = True
                if self._closing:
                    self._cancel_requests()
                for task in self._streaming:
                    task.cancel()
                while self._tasks:
                    await asyncio.wait(list(self._tasks))
        except Exception as exc:  # one client must never take the server down
            log.debug("connection error", extra=fields(peer=self.io.peer, error=repr(exc)))
        finally:
            self._cancel_requests()
            if self._tasks:  # let them see their cancellation before the socket goes
                with anyio.CancelScope(shield=True), anyio.move_on_after(_CANCEL_WAIT_S):
                    await asyncio.wait(list(self._tasks))
            self._closing = True  # (an answer from a commit after this: nobody to read it)
            self.io.close()

    def _spawn(self, run: Coroutine[Any, Any, None]) -> None:
        """Run a request (or a write) in a plain task: a fifth of an anyio task's cost."""
        task = self._loop.create_task(run)  # type: ignore[union-attr]
        self._tasks.add(task)
        task.add_done_callback(self._request_done)

    def _request_over(self) -> None:  # (a request's count in flight)
        self._inflight -= 1
        self._last_activity = time.monotonic()
        if self._slot_freed is not None:
            self._slot_freed.set()

    def _request_done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.debug(
                "request failed; closing connection",
                extra=fields(peer=self.io.peer, error=repr(task.exception())),
            )
            self._shutdown()

    def _cancel_requests(self) -> None:
        for task in self._tasks:
            task.cancel()
        for held in list(self.held):
            held.cancel()

    def held_end(self, held: HeldRequest, reply: Resumed | None) -> None:
        """:meth:`HeldSide.held_end` (its count in flight: its task's, taken over)."""
        self.held.discard(held)
        if reply is not None:  # (closing: its write finds the connection closed)
            return self._spawn(self._run_request(held.frame, reply))
        self._request_over()
        if self._tail is not None and not self._closing:
            self._write_tail_soon()  # (the rest of its answer)

    def _take_whole(self, data: bytes) -> bool:
        """What the reader callback received while the read loop waits: a request frame
        alone in its read, nothing buffered before it (a request at light load), starts
        its task here, in the callback, not from the read loop's next step (a loop turn
        and the read loop's ~80 Python lines per request); a ProduceMany's first step (its
        section tasks made) runs before a later read's callback. False: the read loop
        takes the bytes (part or several frames, a response, the limit reached, closing)."""
        decoder = self._decoder
        if (
            decoder is None
            or self._closing
            or self._inflight >= self.limits.max_inflight_per_connection
        ):
            return False
        parts = decoder.whole_frame(data)
        if parts is None:
            return False
        api, flags, cid, body = parts
        if flags & FLAG_RESPONSE:
            return False
        if hops.ENABLED:
            hops.mark("read")
        self.requests += 1
        self._last_activity = time.monotonic()
        if (
            api == _PRODUCE
            and self.at_once is not None
            and self._inflight == len(self._streaming)  # (answers in order: none before)
            and not self._writers
            and self._corked is None
            and self._answer_at_once(cid, body)
        ):
            return True
        self._inflight += 1
        self._spawn(self._run_request(Frame(api, flags, cid, body)))
        return True

    def _answer_at_once(self, correlation_id: int, body: bytes) -> bool:
        """A Produce request answered in the reader callback by :attr:`at_once` (no task)
        while no other request is in flight (but FetchStreams past their first answer:
        no earlier answer to overtake); its answer and those its commit pushes here in
        one send (as :meth:`_cork`'s). False: nothing done, its task serves it."""
        assert self.at_once is not None
        if hops.ENABLED:
            hops.mark("req.produce")
        self._corked = corked = []
        self._inflight += 1  # (until its answer: one from its commit comes later)
        try:
            served = self.at_once(correlation_id, body, self._answer_later)
        except Exception as exc:  # (as a request task's failure)
            log.debug("request failed; closing connection", extra=fields(error=repr(exc)))
            self._shutdown()
            served = None
        self._corked = None
        self._inflight -= served is None or bool(served[0])
        if served is not None and served[0]:
            corked.append(served[0])
            if hops.ENABLED:
                hops.mark("resp.produce")
        if corked:
            self._send_held(corked, own_tail=True)
        if served is None:
            return self._closing
        after = served[1]
        if after is not None:  # (not the connection's: its close does not cancel it)
            task = asyncio.ensure_future(after(), loop=self._loop)
            self._afters.add(task)
            task.add_done_callback(self._after_done)
        return True

    def _answer_later(self, frame: bytes) -> None:
        """The answer of a request :meth:`_answer_at_once` left in flight, from its commit:
        corked, what the commit pushes here too (a consumer's records) goes with it."""
        self._request_over()
        if self._corked is None:  # (the uncork: before the loop polls again, uvloop)
            self._cork(own_tail=True)
        self._send_held([frame], own_tail=True)

    def _after_done(self, task: asyncio.Future[None]) -> None:
        self._afters.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.warning(
                "work after a response failed",
                extra=fields(peer=self.io.peer, api=_PRODUCE, error=repr(task.exception())),
            )

    async def _read_loop(self) -> None:
        decoder = FrameDecoder(self.limits.max_frame_bytes, readinto_min=READ_IN_PLACE_MIN_BYTES)
        if type(self.io) is SocketIO:  # not TLS: its reader callback receives ciphertext
            self._decoder = decoder
            self.io.sink = self._take_whole
        try:
            await self._read_frames(decoder)
        finally:
            self.io.sink = self._decoder = None

    async def _read_frames(self, decoder: FrameDecoder) -> None:
        frame_started: float | None = None
        read_bytes = RECV_BYTES
        while not self._closing:
            now = time.monotonic()
            if decoder.buffered_bytes:
                if frame_started is None:
                    frame_started = now
                timeout = frame_started + self.limits.read_timeout_s - now
            else:
                frame_started = None
                timeout = self._last_activity + self.limits.idle_timeout_s - now
            # Under load the next request is often there already: recv_within returns it
            # without a timed wait then. A large frame's body is received in place.
            target = decoder.read_target()
            received: bytes | int | None = (
                await self.io.recv_within(max(timeout, 0.0), read_bytes)
                if target is None
                else await self.io.recv_into_within(target, max(timeout, 0.0))
            )
            read_bytes = RECV_BYTES if target is None else HEAD_READ_BYTES
            timed_out = received is None
            data = received or b""
            if timed_out:
                if decoder.buffered_bytes:
                    await self._fail(
                        ErrorCode.MALFORMED_FRAME,
                        f"incomplete frame: {decoder.buffered_bytes} bytes received, the rest "
                        f"did not arrive within {self.limits.read_timeout_s} s",
                    )
                    return
                if self._inflight > 0:
                    self._last_activity = time.monotonic()
                    continue
                if time.monotonic() - self._last_activity >= self.limits.idle_timeout_s:
                    log.debug("idle connection closed", extra=fields(peer=self.io.peer))
                    self._closing = True
                    return
                continue
            if not data:
                if decoder.buffered_bytes:
                    log.debug(
                        "connection closed mid-frame",
                        extra=fields(peer=self.io.peer, buffered=decoder.buffered_bytes),
                    )
                return
            if hops.ENABLED:
                hops.mark("read")
            if isinstance(data, int):
                decoder.filled(data)
            else:
                decoder.feed(data)
            while True:
                try:
                    frame = decoder.next_frame()
                except FrameTooLarge as exc:
                    await self._fail(
                        ErrorCode.FRAME_TOO_LARGE,
                        str(exc),
                        {"max_frame_bytes": exc.limit},
                    )
                    return
                except CodecError as exc:
                    await self._fail(ErrorCode.MALFORMED_FRAME, f"malformed frame: {exc}")
                    return
                if frame is None:
                    break
                more = decoder.buffered_bytes  # only this loop feeds the decoder
                now = time.monotonic()
                frame_started = now if more else None
                self.requests += 1
                self._last_activity = now
                if frame.is_response:
                    await self._fail(
                        ErrorCode.MALFORMED_FRAME,
                        "a client must send requests, not response frames",
                        correlation_id=frame.correlation_id,
                        api=frame.api,
                    )
                    return
                while self._inflight >= self.limits.max_inflight_per_connection:
                    self._slot_freed = asyncio.Event()
                    await self._slot_freed.wait()
                self._inflight += 1
                self._spawn(self._run_request(frame))
                if frame.api == Api.PRODUCE_MANY:
                    # Its first step starts a task per section, and each section enters
                    # its partition in its task's first step: let them start before the
                    # next request's task does, so that requests pipelined on this
                    # connection are appended to a partition in the order received.
                    await asyncio.sleep(0)
                if not more:
                    break  # (no next_frame call to find nothing)

    async def _run_request(self, frame: Frame, resumed: Resumed | None = None) -> None:
        reply: Reply | None = None  # (resumed: a held request's, protocol/held.py)
        try:
            if hops.ENABLED and resumed is None:
                hops.mark(f"req.{_API_NAMES.get(frame.api, str(frame.api))}")
            api = frame.api
            if api == _FETCH_STREAM:
                control = self._stream_controls[frame.correlation_id] = StreamControl()
                stream_control.CURRENT.set(control)
                ANSWER_NOW.set(functools.partial(self.write_now, hop="resp.fetch_stream"))
                reply = await self.handler(frame)
            elif api in _STREAM_CONTROLS:
                reply = stream_control.control_stream(frame, self._stream_controls)
            else:
                corked = api == _PRODUCE and self._cork()
                if api == _PRODUCE:
                    ANSWER_NOW.set(self.write_now)
                elif api == _REPLICA_FETCH and resumed is None:  # its wait with no task
                    HOLD.set(HeldRequest(frame, self))
                reply = await (self.handler(frame) if resumed is None else resumed)
                if corked:  # (a later request's cancelled too: this uncork sends its frames)
                    soon = self._uncork_soon
                    if soon is not None:
                        soon.cancel()
                    self._uncork()
            if reply.sent:
                if self._tail is not None:  # not all of it went: the rest, under the lock
                    await self._write_locked(b"", (), None)
            else:
                await self._write(reply)
                if reply.then is not None:
                    reply = await self._write_stream(reply)
                if hops.ENABLED:
                    hops.mark(f"resp.{_API_NAMES.get(frame.api, str(frame.api))}")
            if reply.close:
                self._shutdown()
        finally:
            if frame.api == _FETCH_STREAM:
                self._stream_controls.pop(frame.correlation_id, None)
            if reply is not HELD_REPLY:  # (a held request's count: HeldRequest's)
                self._request_over()
            if reply is not None and reply.after is not None:
                # Also when the write failed or was cancelled: the work is the request's.
                # Not the connection's any more: its close must not cancel this (bounded)
                # work. (Here, not in a coroutine of its own: one frame less to resume.)
                task = asyncio.current_task(self._loop)  # with the loop: no getpid (3.11)
                if task is not None:
                    self._tasks.discard(task)
                try:
                    await reply.after()
                except Exception as exc:
                    log.warning(
                        "work after a response failed",
                        extra=fields(peer=self.io.peer, api=frame.api, error=repr(exc)),
                    )

    async def _write_stream(self, reply: Reply) -> Reply:
        """Write the replies after ``reply`` until the last (or the connection ends)."""
        task = asyncio.current_task(self._loop)  # with the loop: no getpid (3.11)
        assert task is not None
        self._streaming.add(task)
        try:
            while reply.then is not None and not (self._closing or self._ended):
                reply = await reply.then()
                await self._write(reply)
        finally:
            self._streaming.discard(task)
        return reply

    def write_now(self, data: bytes, hop: str = "resp.produce") -> bool:
        """Write a whole response frame now, from outside its request's task (a Produce
        request's answer, from the turn that settled it): True if it is on its way, False
        if the request's task must write it (a reply is being written or waits to be, or
        the connection closes or failed). What the socket does not take now is sent by
        the next holder of the write lock before anything else (:attr:`_tail`). ``hop``:
        its mark in the hop trace (a FetchStream's answer pushed from a commit too)."""
        if self._closing or self._writers:
            return False
        if hops.ENABLED:
            hops.mark(hop)  # (corked: sent at the end of this step)
        if self._corked is not None:
            self._corked.append(data)
            return True
        try:
            sent = self.io.send_now(data)
        except OSError:
            return False  # the task's own write fails the same way and shuts down
        if sent < len(data):
            self._tail = memoryview(data)[sent:]
            self._writers += 1
        return True

    def _cork(self, own_tail: bool = False) -> bool:
        """Hold :meth:`write_now`'s frames for one send (a Produce's answer and the FetchStream
        answers its commit pushes here) until :meth:`_uncork`, at the latest next turn."""
        if self._corked is not None or self._writers or self._closing or self._loop is None:
            return False
        self._corked = []
        self._uncork_soon = self._loop.call_soon(self._uncork, own_tail)
        return True

    def _uncork(self, own_tail: bool = False) -> None:
        corked, self._corked = self._corked, None
        if corked:
            self._send_held(corked, own_tail=own_tail)

    def _send_held(self, frames: list[bytes], *, own_tail: bool = False) -> None:
        """Send the frames :meth:`write_now` held (corked) now, or from a task after what
        is being written (``own_tail``: also what the socket did not take now)."""
        data = frames[0] if len(frames) == 1 else b"".join(frames)
        if self.write_now(data, "resp.uncorked"):
            if own_tail and self._tail is not None:
                self._write_tail_soon()
            return
        if self._closing:
            return
        held = data if self._tail is None else bytes(self._tail) + data
        self._writers += self._tail is None  # a writer came meanwhile: it sends them first
        self._tail = memoryview(held)
        self._write_tail_soon()

    def _write_tail_soon(self) -> None:
        """A task sends :attr:`_tail` (counted in :attr:`_writers`) under the write lock."""
        self._spawn(self._write_locked(b"", (), None))

    async def _write(self, reply: Reply) -> None:
        records = reply.records
        parts = () if records is None else records.parts
        try:
            if self._closing:
                return
            if self._writers:
                # A reply is being written or waits to be (the lock may look free for a
                # moment while a waiter it was handed to has not run yet): after it.
                await self._write_locked(reply.data, parts, None)
                return
            # Nothing is being written or waiting: most replies fit in the socket buffer at
            # once, with no lock, no timed wait and no await (so nothing can interleave);
            # the rest of one that did not is sent holding the lock, which nobody holds or
            # waits for, so it is taken without yielding.
            rest = send_at_once(self.io, reply.data, parts, self.sendfile_min_bytes)
            if rest is not None:
                await self._write_locked(reply.data, parts, rest)
        except OSError as exc:
            log.debug("write failed", extra=fields(peer=self.io.peer, error=repr(exc)))
            self._shutdown()
        finally:
            if records is not None:
                records.close()

    async def _write_locked(
        self,
        data: bytes,
        parts: tuple[ReadSlice, ...],
        rest: tuple[bytes | memoryview, int] | None,
    ) -> None:
        """Send a reply (``rest``: what is left of one partly sent; None: all of it)
        holding the write lock, within the write timeout."""
        lock = self._write_lock
        self._writers += 1
        try:
            await lock.acquire()
        except BaseException:
            self._writers -= 1
            raise
        tail = self._tail
        if tail is not None:  # a response write_now began goes first
            self._tail = None
            self._writers -= 1
        try:
            if rest is None:
                rest = (
                    send_at_once(self.io, data, parts, self.sendfile_min_bytes)
                    if tail is None
                    else (data, 0)
                )
            if rest is not None:
                with anyio.move_on_after(self.limits.write_timeout_s) as scope:
                    if tail is not None:
                        await self.io.send_all(tail)
                    await send_rest(self.io, rest[0], parts, rest[1], self.sendfile_min_bytes)
                if scope.cancelled_caught:
                    log.info(
                        "client not reading; connection closed",
                        extra=fields(peer=self.io.peer, timeout_s=self.limits.write_timeout_s),
                    )
                    self._shutdown()
        finally:
            lock.release()
            self._writers -= 1

    async def _fail(
        self,
        code: ErrorCode,
        message: str,
        details: dict[str, Any] | None = None,
        *,
        correlation_id: int = 0,
        api: int = 0,
    ) -> None:
        """Send a last error frame (bounded) and close the connection."""
        log.info(
            "bad client input; closing connection",
            extra=fields(peer=self.io.peer, code=code.name, reason=message),
        )
        reply = error_reply(api, correlation_id, code, message, details)
        self._closing = True
        with contextlib.suppress(OSError), anyio.move_on_after(_CLOSE_NOTICE_TIMEOUT_S):
            await self._write_locked(reply.data, (), None)  # (after a response begun)

    def _shutdown(self) -> None:
        """Stop reading and cancel in-flight requests; serve() then closes the socket."""
        self._closing = True
        if self._scope is not None:
            self._scope.cancel()
        self._cancel_requests()
