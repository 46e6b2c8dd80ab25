"""A request written on a :class:`~jetsdk.connection.Connection` whose one response has
not been collected yet: :class:`PendingResponse` (a FetchStream's several responses are a
:class:`~jetsdk.pending_stream.PendingStream`).

The connection's reader resolves it with the response body or an error; the requester
takes it with :meth:`PendingResponse.wait` (or, on asyncio, a callback with
:meth:`PendingResponse.when_done`). A requester that stops waiting makes the connection
forget the correlation id, so a late response is dropped.

Task safety: one event loop.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable

import anyio
import anyio.lowlevel

from jetsdk.codec.frames import Api
from jetsdk.errors import JetError, Timeout
from jetsdk.expiries import expire_after
from jetsdk.pending_stream import Body, wait_future

__all__ = ["PendingResponse", "api_name"]


def api_name(api: int) -> str:
    """An API key's name for messages (``api N`` if this version does not know it)."""
    try:
        return Api(api).name
    except ValueError:
        return f"api {api}"


class PendingResponse:
    """A request that was written and whose response has not been collected yet.

    On asyncio its waiter is a bare future whose timeout is the loop's shared timer
    (:mod:`jetsdk.expiries`): about half the cost of anyio's event in a cancel scope with
    a deadline (13 against 24 us a wait on the 2-core dev VM, with a timer handle of its
    own then), paid twice per produced and consumed message. A cancelled caller still
    unwinds at once: cancelling the task cancels the future it awaits.
    """

    # Not attrs, no slots: the fields with defaults are the class's until set (five
    # assignments fewer for each request's object).
    _event: anyio.Event | None = None
    """Other event loops (trio): set by the response."""
    _on_done: Callable[[object], None] | None = None
    """The callback of :meth:`when_done` while the response has not come."""
    _done: bool = False
    _expired: bool = False
    """Other loops (trio): :meth:`settled` timed out (asyncio: the future set False)."""
    _body: Body | None = None
    _error: JetError | None = None

    def __init__(
        self,
        api: int,
        correlation_id: int,
        label: str,
        forget: Callable[[int], None],
        future: asyncio.Future[bool] | None = None,
    ) -> None:
        # (Comments, not attribute docstrings: each of those is a traced line per request.)
        self.api = api  # API key of the request
        self.correlation_id = correlation_id  # the id the response will carry
        self.label = label  # the peer, for messages
        # Drops the correlation id from the connection (a late response is then dropped).
        self._forget = forget
        self._future = future  # asyncio: set True by the response, False by the timeout

    @property
    def done(self) -> bool:
        """True once the response (or an error) arrived."""
        return self._done

    @property
    def body_now(self) -> bytes | None:
        """The response body if it arrived, as ``bytes`` (None: not yet, or an error
        arrived)."""
        body = self._body
        if body is None or self._error is not None:
            return None
        return body if isinstance(body, bytes) else bytes(body)

    def when_done(self, callback: Callable[[object], None], timeout: float) -> bool:
        """asyncio: have ``callback(future)`` called once the response or an error
        arrived (at once, by the connection's reader that resolves this: it must not
        block) or ``timeout`` seconds passed (by the loop; :meth:`wait` then raises
        Timeout); False (nothing registered) on other loops."""
        future = self._future
        if future is None:
            return False
        self._on_done = callback
        future.add_done_callback(callback)  # (the timeout's way; a response calls it)
        expire_after(future, timeout)
        return True

    def waiter(self, timeout: float) -> asyncio.Future[bool] | None:
        """asyncio: the future the response (or an error) sets True, or ``timeout``
        seconds set False, to be awaited by the requester itself (None on other loops).
        A requester cancelled while it awaits it cancels it: then :meth:`waiter_gone`
        before anyone waits again."""
        future = self._future
        if future is not None:
            expire_after(future, timeout)
        return future

    def waiter_gone(self) -> None:
        """The requester that awaited :meth:`waiter` stopped (cancelled, with the future):
        a fresh future for whoever waits next (:meth:`wait`), as long as no response
        came."""
        future = self._future
        if future is not None and future.cancelled():
            self._future = future.get_loop().create_future()

    async def settled(self, timeout: float) -> None:
        """Other loops (trio): wait until the response (or an error) arrived, or
        ``timeout`` seconds passed (then nothing is raised and nothing forgotten; a later
        :meth:`wait` raises Timeout at once, as after an asyncio :meth:`waiter`'s timeout).
        A cancelled caller is cancelled here, the request still pending."""
        if not self._done:
            if self._event is None:
                self._event = anyio.Event()
            with anyio.move_on_after(timeout):
                await self._event.wait()
            self._expired = not self._done

    def _resolve(self, body: Body | None, error: JetError | None) -> None:
        if not self._done:
            self._done = True
            self._body, self._error = body, error
            future = self._future
            if future is not None:
                if not future.done():
                    on_done = self._on_done
                    if on_done is None:
                        future.set_result(True)
                    else:
                        # Called here, in the reader's turn, not from the loop's next
                        # turn (a hop and a handle less on each acked send at light load).
                        self._on_done = None
                        future.remove_done_callback(on_done)
                        future.set_result(True)
                        try:
                            on_done(future)
                        except Exception as exc:  # as the loop does with a callback's
                            future.get_loop().call_exception_handler(
                                {"message": "response callback failed", "exception": exc}
                            )
            elif self._event is not None:
                self._event.set()

    async def wait(self, timeout: float | None) -> bytes:
        """The response body, as ``bytes`` (see :meth:`wait_buffer`).

        Raises:
            As :meth:`wait_buffer`.
        """
        body = await self.wait_buffer(timeout)
        return body if isinstance(body, bytes) else bytes(body)

    async def wait_buffer(self, timeout: float | None) -> Body:
        """The response body as received: for the APIs of
        :data:`jetsdk.connection.BUFFER_APIS`, the ``bytearray`` a large body was received
        into (no copy), else ``bytes``.

        Args:
            timeout: seconds to wait (None: no limit).

        Raises:
            Timeout: no response in time (the late response will be dropped).
            JetError: the error response's class (see :mod:`jetsdk.errors`), or
                JetConnectionError / ProtocolError if the connection broke.
        """
        if not self._done:
            try:
                future = self._future
                if future is not None:
                    await wait_future(future, timeout)
                else:
                    if self._event is None:
                        self._event = anyio.Event()
                    if not self._expired:
                        with anyio.move_on_after(math.inf if timeout is None else timeout):
                            await self._event.wait()
            finally:
                if not self._done:  # timed out or cancelled: drop a late answer
                    self._forget(self.correlation_id)
            if not self._done:
                raise Timeout(
                    f"no response to {api_name(self.api)} from {self.label} within {timeout}s"
                )
        if self._error is not None:
            # A caller cancelled in the same moment sees that, not the failure its
            # cancellation may have caused (the connection's reader ending in its scope).
            await anyio.lowlevel.checkpoint_if_cancelled()
            raise self._error
        assert self._body is not None
        return self._body
