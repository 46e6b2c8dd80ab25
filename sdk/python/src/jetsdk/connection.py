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

import math
from types import TracebackType

import anyio
import anyio.abc
import attrs

from jetsdk.background import BackgroundTasks
from jetsdk.codec.errors import CodecError
from jetsdk.codec.frames import FLAG_ERROR, FLAG_RESPONSE, Api, Frame, FrameDecoder, encode_frame
from jetsdk.codec.limits import MAX_FRAME_BYTES
from jetsdk.codec.messages import decode_error
from jetsdk.errors import (
    ClientClosed,
    FrameTooLarge,
    JetConnectionError,
    JetError,
    MalformedFrame,
    ProtocolError,
    Timeout,
    error_from_body,
)
from jetsdk.transport import READ_CHUNK_BYTES, ByteStream

__all__ = ["DEFAULT_WRITE_TIMEOUT", "Connection", "PendingResponse"]

DEFAULT_WRITE_TIMEOUT = 30.0
"""Seconds a frame may take to be written before the connection is declared broken."""

_MAX_CORRELATION_ID = 0xFFFFFFFF


@attrs.define(eq=False)
class PendingResponse:
    """A request that was written and whose response has not been collected yet."""

    api: int
    """API key of the request."""
    correlation_id: int
    """Correlation id the response will carry."""
    _connection: Connection
    _event: anyio.Event = attrs.field(factory=anyio.Event)
    _body: bytes | None = None
    _error: JetError | None = None

    @property
    def done(self) -> bool:
        """True once the response (or an error) arrived."""
        return self._event.is_set()

    def _resolve(self, body: bytes | None, error: JetError | None) -> None:
        if not self._event.is_set():
            self._body, self._error = body, error
            self._event.set()

    async def wait(self, timeout: float | None) -> bytes:
        """The response body.

        Args:
            timeout: seconds to wait (None: no limit).

        Raises:
            Timeout: no response in time (the late response will be dropped).
            JetError: the error response's class (see :mod:`jetsdk.errors`), or
                JetConnectionError / ProtocolError if the connection broke.
        """
        if not self._event.is_set():
            try:
                with anyio.move_on_after(math.inf if timeout is None else timeout):
                    await self._event.wait()
            finally:
                if not self._event.is_set():  # timed out or cancelled: drop a late answer
                    self._connection._forget(self.correlation_id)
            if not self._event.is_set():
                api = _api_name(self.api)
                raise Timeout(
                    f"no response to {api} from {self._connection.label} within {timeout}s"
                )
        if self._error is not None:
            raise self._error
        assert self._body is not None
        return self._body


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
        self._decoder = FrameDecoder(max_frame_bytes)
        self._write_timeout = write_timeout
        self._waiters: dict[int, PendingResponse] = {}
        self._next_id = 1
        self._write_lock: anyio.Lock | None = None
        self._closed_error: JetError | None = None
        self._reader_scope: anyio.CancelScope | None = None
        self._task_group: anyio.abc.TaskGroup | None = None
        self._background = BackgroundTasks()
        self.server_info: dict[str, object] = {}
        """The Hello response, once the owner sent Hello (empty before)."""

    # -- lifecycle ------------------------------------------------------------------------

    @property
    def closed(self) -> bool:
        """True once the connection failed or was closed; it never reopens."""
        return self._closed_error is not None

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

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        await self.aclose()
        await self._background.close()
        return None

    async def run(
        self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        """Read and dispatch frames until the connection closes (the reader task).

        Never raises for connection problems: they fail the pending requests instead.
        """
        with anyio.CancelScope() as scope:
            self._reader_scope = scope
            task_status.started()
            try:
                await self._read_loop()
            except JetError as exc:
                self._fail(exc)
            finally:
                if self._closed_error is None:
                    self._fail(ClientClosed(f"connection to {self.label} closed"))
                await self._stream.aclose()

    async def aclose(self) -> None:
        """Close the connection; pending requests fail with ClientClosed. Idempotent."""
        if self._closed_error is None:
            self._fail(ClientClosed(f"connection to {self.label} closed"))
        if self._reader_scope is not None:
            self._reader_scope.cancel()
        await self._stream.aclose()

    # -- requests -------------------------------------------------------------------------

    async def send(self, api: int, body: bytes) -> PendingResponse:
        """Write a request frame; return the handle to wait for its response.

        Frames are written in call order, so two requests sent one after the other by the
        same task reach the server in that order.

        Raises:
            JetConnectionError: the connection is (or became) broken.
            ClientClosed: the connection was closed.
        """
        self._check_open()
        cid = self._allocate_id()
        pending = PendingResponse(api, cid, self)
        frame = encode_frame(api, cid, body)
        self._waiters[cid] = pending
        if self._write_lock is None:
            self._write_lock = anyio.Lock(fast_acquire=True)  # no yield when free
        async with self._write_lock:
            if self._closed_error is not None:
                self._waiters.pop(cid, None)
                raise self._closed_error
            write_error: JetError | None = None
            # Shielded and bounded: either the whole frame is written, or the connection is
            # declared broken (half a frame on the wire would corrupt every later one).
            deadline = anyio.current_time() + self._write_timeout
            with anyio.CancelScope(shield=True, deadline=deadline) as write_scope:
                try:
                    await self._stream.write(frame)
                except JetConnectionError as exc:
                    write_error = exc
            if write_scope.cancelled_caught:
                write_error = JetConnectionError(f"write to {self.label} timed out")
            if write_error is not None:
                self._fail(write_error)
                await self._stream.aclose()
                raise write_error
        return pending

    async def request(
        self,
        api: int,
        body: bytes,
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

    def _fail(self, error: JetError) -> None:
        if self._closed_error is None:
            self._closed_error = error
        waiters, self._waiters = self._waiters, {}
        for pending in waiters.values():
            pending._resolve(None, error)

    async def _read_loop(self) -> None:
        stream, decoder = self._stream, self._decoder
        while True:
            data = await stream.read(READ_CHUNK_BYTES)
            if not data:
                torn = " (mid-frame)" if decoder.buffered_bytes else ""
                raise JetConnectionError(f"connection closed by {self.label}{torn}")
            decoder.feed(data)
            while True:
                try:
                    frame = decoder.next_frame()
                except CodecError as exc:
                    raise MalformedFrame(f"bad frame from {self.label}: {exc}") from exc
                if frame is None:
                    break
                self._dispatch(frame)

    def _dispatch(self, frame: Frame) -> None:
        if not frame.flags & FLAG_RESPONSE:
            raise ProtocolError(f"{self.label} sent a request frame (api {frame.api})")
        error: JetError | None = None
        if frame.flags & FLAG_ERROR:
            try:
                error = error_from_body(decode_error(frame.body))
            except CodecError as exc:
                error = MalformedFrame(f"undecodable error body from {self.label}: {exc}")
            if frame.correlation_id == 0:
                # A connection-level error (e.g. FRAME_TOO_LARGE): the server closes.
                if not isinstance(error, ProtocolError):
                    error = FrameTooLarge(str(error), code=error.code, details=error.details)
                raise error
        pending = self._waiters.pop(frame.correlation_id, None)
        if pending is None:
            return  # the requester gave up (timeout or cancel); drop the late answer
        if pending.api != frame.api:
            raise ProtocolError(
                f"{self.label} answered {_api_name(pending.api)} with api {frame.api}"
            )
        pending._resolve(None if error else frame.body, error)


def _api_name(api: int) -> str:
    try:
        return Api(api).name
    except ValueError:
        return f"api {api}"
