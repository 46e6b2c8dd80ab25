"""One multiplexed client connection: frames out, frames in, matched by correlation id.

Requests may be pipelined: many tasks call :meth:`Connection.request` at once; each frame
gets a fresh correlation id, a reader task (:meth:`Connection.run`) decodes incoming frames
with the sans-I/O :class:`~jetsdk.codec.frames.FrameDecoder` and wakes the task waiting for
that id. Responses may arrive in any order; a response nobody waits for any more (its
request timed out) is dropped, so a slow answer never puts the connection in a bad state.

Failure model:

- A request that gets no answer within its timeout raises :class:`~jetsdk.errors.Timeout`;
  the connection stays usable.
- If the connection breaks (EOF, I/O error, undecodable bytes, an error frame for
  correlation id 0), every pending request fails with a retriable
  :class:`~jetsdk.errors.JetConnectionError` (or the protocol error that caused it) and the
  connection is closed for good; the :class:`~jetsdk.client.Client` opens a new one on next
  use.
- Writes are shielded from the caller's cancellation and bounded by ``write_timeout``: a
  frame is either written whole or the connection is closed, so cancelling a request never
  leaves half a frame on the wire.

Task safety: one event loop; any number of tasks may call :meth:`request` concurrently.
The reader task must run in a task group owned by whoever owns the connection (the client,
or ``async with Connection(...)`` for standalone use).
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence

import anyio
import anyio.abc
import anyio.lowlevel

from jetsdk.background import BackgroundTasks
from jetsdk.codec.errors import CodecError
from jetsdk.codec.fetch_stream import (
    FetchStreamCredit,
    encode_cancel_fetch_stream,
    encode_fetch_stream_credit,
)
from jetsdk.codec.frames import (
    FLAG_ERROR,
    FLAG_MORE,
    FLAG_RESPONSE,
    Api,
    FrameDecoder,
    encode_frame,
    encode_frame_header,
)
from jetsdk.codec.limits import MAX_FRAME_BYTES
from jetsdk.codec.messages import decode_error
from jetsdk.errors import (
    ClientClosed,
    FrameTooLarge,
    JetConnectionError,
    JetError,
    MalformedFrame,
    ProtocolError,
    error_from_body,
)
from jetsdk.pending_response import PendingResponse, api_name
from jetsdk.pending_stream import Body, PendingStream
from jetsdk.transport import ByteStream, receive_into, running_asyncio_loop

__all__ = ["DEFAULT_WRITE_TIMEOUT", "Connection", "PendingResponse", "PendingStream", "RequestBody"]

DEFAULT_WRITE_TIMEOUT = 30.0
"""Seconds a frame may take to be written before the connection is declared broken."""

_MAX_CORRELATION_ID = 0xFFFFFFFF
GATHER_MIN_BODY_BYTES = 64 * 1024
"""A request body from this size is written after its frame header in one gathered send
(sendmsg), not joined to it: the join copied every produced byte once more. A smaller body
is joined, which costs less than a gathered send."""

READ_IN_PLACE_MIN_BYTES = 64 * 1024
"""A response frame's body of at least this many bytes that is not all received at once is
received in place, into a ``bytearray`` of its size (FrameDecoder ``readinto_min``, the
transport's ``recv_into``): not received in 256 KiB chunks and joined (a large Fetch or
ReplicaFetch answer: one copy of its bytes fewer), as the server receives large requests."""

BUFFER_APIS = frozenset({Api.FETCH, Api.FETCH_STREAM, Api.REPLICA_FETCH})
"""APIs whose response bodies are handed over as received, a ``bytearray`` when received
in place (their decoders take views); any other response body is ``bytes``."""

GATHER_MAX_PARTS = 512
"""A body given in parts is written gathered only in fewer parts than this (a send takes
at most IOV_MAX buffers, 1024 on Linux) of at least GATHER_MIN_PART_BYTES a part on
average (many small parts cost more than their join). It was 64: a Spark sink's 1 MiB
request of 16 KiB messages, its head and 64 views, was joined, a copy of every byte."""
GATHER_MIN_PART_BYTES = 1024
"""Fewest bytes a part, on average, of a body written gathered in parts."""

RequestBody = bytes | tuple[bytes, ...]
"""A request body: its bytes, or its parts back to back (a ProduceMany request of large
sections: written gathered after the frame header, not joined, when the stream can)."""

FrameParts = tuple[bytes, ...]
"""A frame to write: the whole frame, or its header and its body (in one or more parts)."""


def _frame_rest(frame: Sequence[bytes], sent: int) -> list[bytes | memoryview]:
    """What is left of ``frame`` once ``sent`` of its bytes were written (views, no copy)."""
    rest: list[bytes | memoryview] = []
    for part in frame:
        if sent >= len(part):
            sent -= len(part)
            continue
        rest.append(memoryview(part)[sent:] if sent else part)
        sent = 0
    return rest


class Connection:
    """A client connection to one server over a :class:`~jetsdk.transport.ByteStream`.

    Use either ``async with Connection(stream) as conn:`` (owns its reader task), or start
    the reader in your own task group: ``await tg.start(conn.run)``, and ``await
    conn.aclose()`` when done.
    """

    def __init__(
        self,
        stream: ByteStream,
        *,
        label: str = "",
        max_frame_bytes: int = MAX_FRAME_BYTES,
        write_timeout: float = DEFAULT_WRITE_TIMEOUT,
    ) -> None:
        """Wrap ``stream``; nothing is read until :meth:`run` starts.

        Args:
            stream: the connected byte stream (this connection owns and closes it).
            label: peer description for messages (usually ``host:port``).
            max_frame_bytes: largest response frame accepted.
            write_timeout: bound on writing one frame (seconds).
        """
        self._stream = stream
        self.label = label
        self._decoder = FrameDecoder(max_frame_bytes, readinto_min=READ_IN_PLACE_MIN_BYTES)
        self._write_timeout = write_timeout
        self._waiters: dict[int, PendingResponse | PendingStream] = {}
        self._next_id = 1
        self._write_lock: anyio.Lock | None = None
        self._tail_written: anyio.Event | None = None
        """Set while the rest of a frame :meth:`send_nowait` began is being written."""
        self._tail_task: asyncio.Task[None] | None = None
        """The task writing that rest (held here: asyncio keeps only weak references)."""
        self._closed_error: JetError | None = None
        self._reader_scope: anyio.CancelScope | None = None
        self._task_group: anyio.abc.TaskGroup | None = None
        self._background = BackgroundTasks()
        self._loop: asyncio.AbstractEventLoop | None = None
        """The asyncio loop the reader runs in (None: not started, or not asyncio)."""
        # Writes the socket takes at once skip the lock and the write scope.
        self._write_now: Callable[[bytes], int] | None = getattr(stream, "write_now", None)
        self._write_gathered_now: Callable[[Sequence[bytes]], int] | None = (
            getattr(stream, "write_gathered_now", None) if self._write_now is not None else None
        )
        self._write_gathered: Callable[[Sequence[bytes | memoryview]], Awaitable[None]] | None
        self._write_gathered = getattr(stream, "write_gathered", None)  # (plain TCP's)
        self.server_info: dict[str, object] = {}
        """The Hello response, once the owner sent Hello (empty before)."""
        self._side_tasks: anyio.abc.TaskGroup | None = None
        """Writes :meth:`run` does beside reading (a CancelFetchStream that could not be
        written at once); cancelled when the reader ends."""
        self.stream_controls: Counter[int] = Counter()
        """CancelFetchStream and FetchStreamCredit requests written, by api
        (:meth:`_end_stream`, :meth:`grant_stream`; tests, measurements)."""

    # -- lifecycle ------------------------------------------------------------------------

    @property
    def closed(self) -> bool:
        """True once the connection failed or was closed; it never reopens."""
        return self._closed_error is not None

    @property
    def can_send_now(self) -> bool:
        """True if :meth:`send_nowait` would write a frame now."""
        lock = self._write_lock
        return (
            self._side_tasks is not None
            and self._write_now is not None
            and self._closed_error is None
            and self._tail_written is None
            and (lock is None or not lock.locked())
        )

    @property
    def pending_count(self) -> int:
        """Requests written and not yet answered."""
        return len(self._waiters)

    async def __aenter__(self) -> Connection:
        tg = self._task_group = await self._background.open()
        try:
            await tg.start(self.run)
        except BaseException:
            await self.aclose()
            await self._background.close()
            raise
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()
        await self._background.close()

    async def run(
        self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        """Read and dispatch frames until the connection closes (the reader task).

        Never raises for connection problems: they fail the pending requests instead.
        """
        async with anyio.create_task_group() as side_tasks:
            self._side_tasks = side_tasks
            with anyio.CancelScope() as scope:
                self._reader_scope = scope
                self._loop = running_asyncio_loop()
                task_status.started()
                try:
                    # The one read path: the transport hands every chunk to _received
                    # (which raises at the end of the stream), from its reader callback
                    # or a loop.
                    await receive_into(self._stream, self._received, self._decoder.read_target)
                except JetError as exc:
                    self._fail(exc)
                finally:
                    self._side_tasks = None
                    side_tasks.cancel_scope.cancel()
                    if self._closed_error is None:
                        self._fail(ClientClosed(f"connection to {self.label} closed"))
                    await self._stream.aclose()

    async def aclose(self) -> None:
        """Close the connection; pending requests fail with ClientClosed. Idempotent."""
        if self._closed_error is None:
            self._fail(ClientClosed(f"connection to {self.label} closed"))
        self._stop_reader()
        await self._stream.aclose()

    # -- requests -------------------------------------------------------------------------

    async def send(self, api: int, body: RequestBody) -> PendingResponse:
        """Write a request frame; return the handle to wait for its response.

        Frames are written in call order, so two requests sent one after the other by the
        same task reach the server in that order.

        Raises:
            JetConnectionError: the connection is (or became) broken.
            ClientClosed: the connection was closed.
        """
        await self._wait_turn()
        cid = self._allocate_id()
        loop = self._loop
        pending = PendingResponse(
            api, cid, self.label, self._forget, loop.create_future() if loop else None
        )
        await self._write_request(pending, self._frame(api, cid, body))
        return pending

    async def send_stream(
        self, api: int, body: RequestBody, *, max_buffered_bytes: int | None = None
    ) -> PendingStream:
        """Write a request answered by several responses (FetchStream); return the queue
        of its responses (:meth:`PendingStream.next`; close it to drop the rest; past
        ``max_buffered_bytes`` untaken it stops by itself, see PendingStream).

        Raises:
            JetConnectionError: the connection is (or became) broken.
            ClientClosed: the connection was closed.
        """
        await self._wait_turn()
        cid = self._allocate_id()
        forget = self._end_stream if api == Api.FETCH_STREAM else self._forget
        pending = PendingStream(api, cid, self.label, forget, self._loop, max_buffered_bytes)
        await self._write_request(pending, self._frame(api, cid, body))
        return pending

    def serves(self, api: int) -> bool:
        """True if the server's Hello answer lists ``api`` (spec/protocol.md, "0 Hello")."""
        apis = self.server_info.get("apis")
        return isinstance(apis, list) and int(api) in apis

    async def _wait_turn(self) -> None:
        """Wait until a frame may be written (one :meth:`send_nowait` began goes first)."""
        self._check_open()
        while self._tail_written is not None:
            await self._tail_written.wait()
            self._check_open()

    async def _write_request(
        self, pending: PendingResponse | PendingStream, frame: FrameParts
    ) -> None:
        """Register ``pending`` and write its request ``frame`` (whole, or the connection
        fails)."""
        cid = pending.correlation_id
        self._waiters[cid] = pending
        lock = self._write_lock
        rest: Sequence[bytes | memoryview]
        if self._write_now is not None and (lock is None or not lock.locked()):
            # Nobody is writing: what the socket takes at once needs neither the lock nor a
            # scope (nothing yields before the rest, if any, is written under the lock).
            try:
                sent = self._write_frame_now(frame)
            except JetConnectionError as exc:
                self._fail(exc)
                await self._stream.aclose()
                raise
            if sent == sum(map(len, frame)):
                return
            rest = _frame_rest(frame, sent)  # views: no copy of the rest
        else:
            rest = frame
        if lock is None:
            lock = self._write_lock = anyio.Lock(fast_acquire=True)  # no yield when free
        async with lock:
            if self._closed_error is not None:
                self._waiters.pop(cid, None)
                raise self._closed_error
            write_error = await self._write_whole(rest)
            if write_error is not None:
                self._fail(write_error)
                await self._stream.aclose()
                raise write_error

    async def request(
        self,
        api: int,
        body: RequestBody,
        *,
        timeout: float | None,
    ) -> bytes:
        """Send a request and wait for its response body (``send`` then ``wait``).

        Raises:
            Timeout: no response within ``timeout`` seconds.
            JetError: the server's error (its class from the registry), or a connection
                error (retriable).
        """
        pending = await self.send(api, body)
        return await pending.wait(timeout)

    async def request_buffer(self, api: int, body: RequestBody, *, timeout: float | None) -> Body:
        """:meth:`request`, with the response body as received
        (:meth:`PendingResponse.wait_buffer`: a large Fetch answer is the ``bytearray`` it
        was received into, not copied into ``bytes``).

        Raises:
            As :meth:`request`.
        """
        pending = await self.send(api, body)
        return await pending.wait_buffer(timeout)

    def send_nowait(self, api: int, body: RequestBody) -> PendingResponse | None:
        """Write a request frame from a plain function, without waiting: its handle, or
        None if that cannot be done now (another frame is being written, the connection
        is closed or its reader not running, or it is not plain TCP): use :meth:`send`
        then. On asyncio and trio alike.

        A producer whose partition sender is idle writes its request this way in the
        caller's task, one event-loop turn before the sender task would. What the socket
        does not take at once is written by a task of this connection before any later
        frame (bounded by the write timeout). If the connection breaks here, the returned
        handle fails with the error :meth:`send` would have raised.
        """
        loop, lock, side_tasks = self._loop, self._write_lock, self._side_tasks
        if side_tasks is None or self._write_now is None or self._closed_error is not None:
            return None  # (can_send_now's tests, without its call)
        if self._tail_written is not None or (lock is not None and lock.locked()):
            return None
        cid = self._allocate_id()
        future = None if loop is None else loop.create_future()
        pending = PendingResponse(api, cid, self.label, self._forget, future)
        frame = self._frame(api, cid, body)
        self._waiters[cid] = pending
        try:
            sent = self._write_frame_now(frame)
        except JetConnectionError as exc:
            self._fail(exc)
            self._stop_reader()
            return pending
        if sent < sum(map(len, frame)):
            self._tail_written = anyio.Event()
            rest = _frame_rest(frame, sent)
            if loop is not None:
                self._tail_task = loop.create_task(self._write_tail(rest))
            else:  # trio: a task of the reader's group (its write is shielded)
                side_tasks.start_soon(self._write_tail, rest)
        return pending

    def _frame(self, api: int, cid: int, body: RequestBody) -> FrameParts:
        """The request frame of ``body``: header and body apart if the stream takes a
        gathered write and the body is large, else one joined frame."""
        gathered = self._write_gathered_now is not None
        if isinstance(body, tuple):
            size = sum(map(len, body))
            if (
                gathered
                and size >= GATHER_MIN_BODY_BYTES
                and len(body) < GATHER_MAX_PARTS
                and size >= GATHER_MIN_PART_BYTES * len(body)
            ):
                return (encode_frame_header(api, cid, size), *body)
            body = b"".join(body)
        if gathered and len(body) >= GATHER_MIN_BODY_BYTES:
            return (encode_frame_header(api, cid, len(body)), body)
        return (encode_frame(api, cid, body),)

    def _write_frame_now(self, frame: FrameParts) -> int:
        """Write what the socket takes of ``frame`` now (``_write_now`` is set)."""
        if len(frame) == 1:
            assert self._write_now is not None
            return self._write_now(frame[0])
        assert self._write_gathered_now is not None
        return self._write_gathered_now(frame)

    async def _write_tail(self, rest: Sequence[bytes | memoryview]) -> None:
        """Write the rest of a frame :meth:`send_nowait` began (shielded and bounded, as in
        :meth:`send`); other frames wait for it."""
        error: JetError | None = None
        try:
            error = await self._write_whole(rest)
        finally:
            done, self._tail_written, self._tail_task = self._tail_written, None, None
            if error is not None:
                self._fail(error)
                self._stop_reader()
            if done is not None:
                done.set()

    async def _write_whole(self, parts: Sequence[bytes | memoryview]) -> JetError | None:
        """Write ``parts`` in order, shielded and bounded: either all of it is written
        (None), or the error that makes the connection broken (half a frame on the wire
        would corrupt every later one)."""
        error: JetError | None = None
        deadline = anyio.current_time() + self._write_timeout
        with anyio.CancelScope(shield=True, deadline=deadline) as scope:
            try:
                if self._write_gathered is not None and len(parts) > 1:
                    await self._write_gathered(parts)  # not a send a part
                else:
                    for data in parts:
                        await self._stream.write(data)
            except JetConnectionError as exc:
                error = exc
        if scope.cancelled_caught:
            error = JetConnectionError(f"write to {self.label} timed out")
        return error

    def _stop_reader(self) -> None:
        """End the reader after a failure outside a task that could close the stream; the
        reader closes it on its way out."""
        if self._reader_scope is not None:
            self._reader_scope.cancel()

    # -- internals ------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed_error is not None:
            raise self._closed_error

    def _allocate_id(self) -> int:
        cid = self._next_id
        # 0 is reserved for connection-level errors from the server.
        while cid == 0 or cid in self._waiters:
            cid = (cid + 1) & _MAX_CORRELATION_ID
        self._next_id = (cid + 1) & _MAX_CORRELATION_ID
        return cid

    def _forget(self, cid: int) -> None:
        self._waiters.pop(cid, None)

    def _end_stream(self, cid: int) -> None:
        """A FetchStream closed before its last response: forget it, and ask the server to
        end it (CancelFetchStream, api 19, where Hello lists it) so that it stops sending
        what would be dropped. From a plain function: written at once where it can be
        (:meth:`send_nowait`), else by a background task of this connection. The answer is
        dropped; if the connection breaks first, the stream ended with it."""
        self._waiters.pop(cid, None)
        if not self.closed and self.serves(Api.CANCEL_FETCH_STREAM):
            self._send_unanswered(Api.CANCEL_FETCH_STREAM, encode_cancel_fetch_stream(cid))

    def grant_stream(self, stream: PendingStream, more: int) -> bool:
        """Grant the open FetchStream ``stream`` ``more`` responses (FetchStreamCredit,
        api 20): written as :meth:`_end_stream`'s cancel, its answer dropped (the stream's
        end is told by its last response). False: not sent (the server's Hello does not
        list api 20, the stream or the connection ended)."""
        cid = stream.correlation_id
        if self.closed or self._waiters.get(cid) is not stream:
            return False
        if not self.serves(Api.FETCH_STREAM_CREDIT):
            return False
        body = encode_fetch_stream_credit(FetchStreamCredit(cid, more))
        self._send_unanswered(Api.FETCH_STREAM_CREDIT, body)
        return True

    def _send_unanswered(self, api: int, body: bytes) -> None:
        """Write a stream's control request whose answer is dropped: at once where it can
        be (:meth:`send_nowait`), else by a background task of this connection."""
        pending = self.send_nowait(api, body)
        if pending is not None:
            self._waiters.pop(pending.correlation_id, None)
            self.stream_controls[api] += 1
        elif self._side_tasks is not None:
            self._side_tasks.start_soon(self._send_control, api, body)

    async def _send_control(self, api: int, body: bytes) -> None:
        try:
            pending = await self.send(api, body)
        except JetError:
            return  # the connection broke or closed: its streams ended with it
        self._waiters.pop(pending.correlation_id, None)
        self.stream_controls[api] += 1

    def _fail(self, error: JetError) -> None:
        if self._closed_error is None:
            self._closed_error = error
        waiters, self._waiters = self._waiters, {}
        for pending in waiters.values():
            pending._resolve(None, error)

    def _received(self, data: bytes | int) -> None:
        """Decode and dispatch the frames in ``data`` (an int: that many bytes were received
        into the decoder's read target; ``b""``: the peer closed).

        Raises:
            JetConnectionError: the peer closed. MalformedFrame, ProtocolError: bad input.
        """
        decoder = self._decoder
        if not data:
            torn = " (mid-frame)" if decoder.buffered_bytes else ""
            raise JetConnectionError(f"connection closed by {self.label}{torn}")
        if isinstance(data, int):
            decoder.filled(data)
        elif (whole := decoder.whole_frame(data)) is not None:
            self._dispatch(*whole)  # one answer alone in its read: no buffering, no Frame
            return
        else:
            decoder.feed(data)
        while True:
            try:
                frame = decoder.next_frame()
            except CodecError as exc:
                raise MalformedFrame(f"bad frame from {self.label}: {exc}") from exc
            if frame is None:
                return
            self._dispatch(frame.api, frame.flags, frame.correlation_id, frame.body)

    def _dispatch(self, api: int, flags: int, cid: int, body: bytes | bytearray) -> None:
        """Hand one received frame to its waiter (a plain answer: one dict look-up)."""
        if flags == FLAG_RESPONSE:  # the common answer: not an error, not one of several
            pending = self._waiters.pop(cid, None)
            error = None
            more = False
        else:
            pending, error, more = self._unusual_frame(api, flags, cid, body)
        if pending is None:
            return  # the requester gave up (timeout or cancel); drop the late answer
        if pending.api != api:
            raise ProtocolError(f"{self.label} answered {api_name(pending.api)} with api {api}")
        if type(body) is not bytes and api not in BUFFER_APIS:
            body = bytes(body)  # a large body received in place, for a decoder of bytes
        if isinstance(pending, PendingStream):
            pending._push(None if error else body, error, more)
        elif more:
            raise ProtocolError(f"{self.label} answered {api_name(pending.api)} more than once")
        else:
            pending._resolve(None if error else body, error)

    def _unusual_frame(
        self, api: int, flags: int, cid: int, body: bytes | bytearray
    ) -> tuple[PendingResponse | PendingStream | None, JetError | None, bool]:
        """:meth:`_dispatch` of a frame that is not a plain answer (an error, one of several
        answers, a request): its waiter, its error, whether more follow.

        Raises:
            ProtocolError: a request frame. JetError: a connection-level error (cid 0).
        """
        if not flags & FLAG_RESPONSE:
            raise ProtocolError(f"{self.label} sent a request frame (api {api})")
        error: JetError | None = None
        if flags & FLAG_ERROR:
            try:
                error = error_from_body(decode_error(body))
            except CodecError as exc:
                error = MalformedFrame(f"undecodable error body from {self.label}: {exc}")
            if cid == 0:
                # A connection-level error (e.g. FRAME_TOO_LARGE): the server closes.
                if not isinstance(error, ProtocolError):
                    error = FrameTooLarge(str(error), code=error.code, details=error.details)
                raise error
        more = bool(flags & FLAG_MORE)
        pending = self._waiters.get(cid) if more else self._waiters.pop(cid, None)
        return pending, error, more
