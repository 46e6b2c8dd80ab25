"""SendHandle: the awaitable result of :meth:`Producer.send_soon`."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Generator
from typing import Any

import anyio
import anyio.lowlevel

from jetsdk.errors import JetError
from jetsdk.message import Ack
from jetsdk.transport import running_asyncio_loop

__all__ = ["SendHandle"]


class SendHandle:
    """The pending outcome of one sent message (a future).

    ``await handle`` returns the :class:`~jetsdk.message.Ack` or raises the
    :class:`~jetsdk.errors.JetError` the message failed with. Callbacks registered with
    :meth:`add_done_callback` run in the producer's event loop once the outcome is known.

    Task safety: use from the event loop the producer runs in.
    """

    __slots__ = ("_ack", "_acked", "_callbacks", "_error", "_event", "_waiters")

    def __init__(self) -> None:
        self._ack: Ack | None = None
        self._acked: tuple[str, int, int, int] | None = None  # the Ack's fields, built lazily
        self._error: JetError | None = None
        self._event: anyio.Event | None = None
        """What :meth:`wait` waits on under trio."""
        self._waiters: list[asyncio.Future[None]] | None = None
        """What :meth:`wait` waits on under asyncio: a bare future per waiter (an
        ``anyio.Event`` is asyncio's behind a look-up of the running backend: about 25
        Python calls more per wait)."""
        self._callbacks: list[Callable[[SendHandle], None]] | None = None

    def done(self) -> bool:
        """True once the message was acknowledged or failed."""
        return self._acked is not None or self._ack is not None or self._error is not None

    def result(self) -> Ack:
        """The ack of a done handle.

        Raises:
            JetError: the message failed.
            RuntimeError: not done yet.
        """
        if self._error is not None:
            raise self._error
        if self._ack is None:
            if self._acked is None:
                raise RuntimeError("the send is not done yet; await the handle")
            self._ack = Ack(*self._acked)
        return self._ack

    def exception(self) -> JetError | None:
        """The error of a failed handle, None if it succeeded or is not done."""
        return self._error

    def add_done_callback(self, callback: Callable[[SendHandle], None]) -> None:
        """Call ``callback(handle)`` once done (at once if already done).

        Exceptions raised by callbacks propagate out of the producer's sender task, so keep
        callbacks small and safe.
        """
        if self.done():
            callback(self)
        elif self._callbacks is None:
            self._callbacks = [callback]
        else:
            self._callbacks.append(callback)

    async def wait(self) -> Ack:
        """Wait for the outcome; same as ``await handle``.

        A caller whose scope was cancelled sees its cancellation, not the failure: when
        the producer closes because that scope was cancelled (its tasks inside it), it
        fails what was in flight with :class:`~jetsdk.errors.ClientClosed`, and may do so
        before the cancellation reaches the caller's wait.
        """
        if self._acked is None and self._ack is None and self._error is None:  # not done()
            loop = running_asyncio_loop()
            if loop is not None:
                # Its own future: a cancelled waiter (an anyio scope too) cancels only its.
                future: asyncio.Future[None] = loop.create_future()
                if self._waiters is None:
                    self._waiters = [future]
                else:
                    self._waiters.append(future)
                await future
            else:
                if self._event is None:
                    self._event = anyio.Event()
                await self._event.wait()
        if self._error is not None:
            await anyio.lowlevel.checkpoint_if_cancelled()
        return self.result()

    def __await__(self) -> Generator[Any, None, Ack]:
        return self.wait().__await__()

    # -- producer side --------------------------------------------------------------------

    def _set(self, ack: Ack | None, error: JetError | None) -> None:
        if self.done():
            return
        self._ack, self._error = ack, error
        self._wake()

    def _set_acked(self, stream: str, partition: int, offset: int, timestamp: int) -> bool:
        """Succeed with an Ack of these fields (built when asked for); False if already
        done."""
        if self._acked is not None or self._ack is not None or self._error is not None:
            return False
        self._acked = (stream, partition, offset, timestamp)
        if self._waiters is not None or self._event is not None or self._callbacks:
            self._wake()
        return True

    def _wake(self) -> None:
        waiters = self._waiters
        if waiters is not None:
            self._waiters = None
            for future in waiters:
                if not future.done():
                    future.set_result(None)
        if self._event is not None:
            self._event.set()
        if self._callbacks:
            callbacks, self._callbacks = self._callbacks, None
            for callback in callbacks:
                callback(self)

    def __repr__(self) -> str:
        state = "pending" if not self.done() else ("failed" if self._error else "acked")
        return f"<SendHandle {state}>"
