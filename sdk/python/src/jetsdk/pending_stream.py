"""A request answered by several responses (FetchStream, api 18): its queue of answers.

:meth:`jetsdk.connection.Connection.send_stream` writes the request and registers a
:class:`PendingStream` under its correlation id; the connection's reader appends each
response to it (every one but the last has the frame flag "more"), and the requester takes
them in order with :meth:`PendingStream.next`. The connection forgets the correlation id
at the last response, at an error frame, or when the requester closes the stream early
(its remaining responses are then dropped as they arrive, and a FetchStream is cancelled
on the server: CancelFetchStream, api 19). The server sends at most the
``max_responses`` the request asked for, so the queue is bounded by the requester.

Task safety: one event loop, one task taking the answers.
"""

from __future__ import annotations

import asyncio
import math
from collections import deque
from collections.abc import Callable

import anyio
import anyio.lowlevel
import attrs

from jetsdk.errors import JetError, Timeout
from jetsdk.expiries import expire_after

__all__ = ["Body", "PendingStream", "wait_future"]

Body = bytes | bytearray
"""A response body: ``bytes``, or, for the APIs whose decoders take views (Fetch,
FetchStream, ReplicaFetch), the ``bytearray`` a large body was received into in place
(:data:`jetsdk.connection.BUFFER_APIS`)."""


@attrs.define(eq=False)
class PendingStream:
    """The responses of one streaming request, in the order they arrived."""

    api: int
    """API key of the request."""
    correlation_id: int
    """Correlation id its responses carry."""
    label: str
    """The peer, for messages."""
    _forget: Callable[[int], None]
    """Drops the correlation id from the connection (late responses are then dropped)."""
    _loop: asyncio.AbstractEventLoop | None
    """asyncio: wait on a bare future; other loops (trio): on an anyio event."""
    max_buffered_bytes: int | None = None
    """Bound on the bytes of responses received and not yet taken: past it the stream
    stops (the response that crossed it is kept and becomes the last one taken; later
    ones are dropped) and :attr:`cut` is set. None: the requester bounds it by the number
    of responses it asked for."""
    cut: bool = False
    """The buffer bound stopped the stream before its last response."""
    _buffered: int = 0
    _answers: deque[Body] = attrs.field(factory=deque)
    _error: JetError | None = None
    _ended: bool = False
    """The last response (or an error) arrived, or the stream was closed."""
    _future: asyncio.Future[bool] | None = None
    _event: anyio.Event | None = None
    on_answer: Callable[[Body], bool] | None = None
    """Takes an answer in the reader's turn instead of queueing it (the requester sets it
    only while it waits in :meth:`next` with nothing queued): called with a response that
    more follow (never the last, an error, or one past the buffer bound); True: taken (not
    queued, the waiter not woken), False: queue it as usual. It must not raise (it runs
    in the connection's reader)."""
    taken: int = 0
    """Responses :attr:`on_answer` took."""

    @property
    def finished(self) -> bool:
        """True once every response was taken (or the stream failed or was closed)."""
        return self._ended and not self._answers

    def _push(self, body: Body | None, error: JetError | None, more: bool) -> None:
        """A response arrived (the connection's reader)."""
        if self._ended:
            return
        if error is not None or body is None:
            self._error = error
            self._ended = True
        else:
            take = self.on_answer
            if take is not None and more and not self._answers and take(body):
                self.taken += 1  # handed on in this turn: the waiter stays parked
                return
            self._answers.append(body)
            self._buffered += len(body)
            self._ended = not more
            limit = self.max_buffered_bytes
            if more and limit is not None and self._buffered > limit:
                self.cut = True  # the requester does not keep up: stop here
                self.close(keep=True)
        if self._future is not None:
            if not self._future.done():
                self._future.set_result(True)
        elif self._event is not None:
            self._event.set()

    def _resolve(self, body: Body | None, error: JetError | None) -> None:
        """The connection failed or closed: ``error`` ends the stream."""
        self._push(body, error, more=False)

    async def next(self, timeout: float | None) -> tuple[Body, bool]:
        """The next response body, and whether more responses follow it.

        Args:
            timeout: seconds to wait for it (None: no limit; answers :attr:`on_answer`
                took meanwhile start it again).

        Raises:
            Timeout: none arrived in time (the stream is closed: later ones are dropped).
            JetError: the error frame that ended the stream, or the connection's failure.
            RuntimeError: the last response was taken already.
        """
        while not self._answers:
            if self._error is not None:
                await anyio.lowlevel.checkpoint_if_cancelled()
                raise self._error
            if self._ended:
                raise RuntimeError("the stream's last response was taken already")
            taken = self.taken
            if not await self._wait(timeout):
                if self.taken != taken:
                    continue  # answers came meanwhile (taken by on_answer): wait again
                self.close()
                raise Timeout(f"no response to a stream request from {self.label} in {timeout}s")
        body = self._answers.popleft()
        self._buffered -= len(body)
        return body, bool(self._answers) or not self._ended or self._error is not None

    async def _wait(self, timeout: float | None) -> bool:
        """Wait for a response or the end: False if ``timeout`` passed first."""
        try:
            if self._loop is not None:
                future = self._future = self._loop.create_future()
                await wait_future(future, timeout)
                return bool(future.result())
            event = self._event = anyio.Event()
            with anyio.move_on_after(math.inf if timeout is None else timeout):
                await event.wait()
            return event.is_set()
        except BaseException:
            self.close()  # cancelled: nobody takes the rest
            raise
        finally:
            self._future = self._event = None

    def close(self, *, keep: bool = False) -> None:
        """Stop taking responses: the rest are dropped as they arrive (with ``keep``, those
        received are still taken). Idempotent."""
        if not self._ended:
            self._ended = True
            self._forget(self.correlation_id)
        if not keep:
            self._answers.clear()
            self._buffered = 0


async def wait_future(future: asyncio.Future[bool], timeout: float | None) -> None:
    """Wait until ``future`` is done or ``timeout`` seconds passed (it is then set False:
    :func:`~jetsdk.expiries.expire_after`, one loop timer for every such wait)."""
    if future.done():
        return
    if timeout is not None and timeout != math.inf:
        expire_after(future, timeout)
    await future
