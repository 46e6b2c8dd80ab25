"""The sync producer's send queue (hand-written; used by the generated :mod:`jetsdk.sync`).

A blocking ``send_soon`` must not pay a round trip to the loop thread per message. So the
message is checked on the caller's thread (a bad one fails there, as in the async API),
appended to a thread-safe queue, and a drain task in the loop thread moves everything
queued into the async producer in one go. The caller gets a :class:`SendHandle`, which
the producer completes directly from the loop thread and which any thread may wait on.
``max_pending`` is counted on the caller's side: ``send_soon`` blocks while that many
messages are queued or unacknowledged. ``send`` is ``send_soon(...).result()``, so sends
keep their order whichever way they were made. ``flush`` drains the queue, then flushes
the producer.

Thread safety: any number of threads may share one sync producer; the queue keeps each
thread's order. Blocking waits (backpressure, ``result``) are plain thread waits, which a
Ctrl-C interrupts.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable

import anyio
from anyio.from_thread import BlockingPortal

from jetsdk.errors import ClientClosed, JetError, Timeout
from jetsdk.message import Ack
from jetsdk.producer.handle import SendHandle as AsyncSendHandle
from jetsdk.producer.producer import Prepared, Producer

__all__ = ["QueuedSends", "SendHandle"]

_LOCK = threading.Lock()
"""Guards every handle's waiter and callbacks (held for a few instructions at a time)."""


class SendHandle(AsyncSendHandle):
    """The outcome of a sync ``send_soon``, usable from any thread like a
    :class:`concurrent.futures.Future`: :meth:`result` waits (``timeout`` seconds at most:
    :class:`~jetsdk.errors.Timeout`, the send itself goes on) and raises the message's
    error if it failed. Callbacks added with :meth:`add_done_callback` run in the client's
    loop thread (or at once if already done): keep them short and do not call the sync API
    from them."""

    __slots__ = ("_finished", "_release", "_waiter")

    def __init__(self, release: Callable[[], None] = lambda: None) -> None:
        # The base class's fields set here, not through super().__init__(): one Python
        # call less per message on the caller's thread (keep in step with the base).
        self._ack: Ack | None = None
        self._acked: tuple[str, int, int, int] | None = None
        self._error: JetError | None = None
        self._event = None
        self._callbacks = None
        self._finished = False
        self._waiter: threading.Event | None = None
        self._release = release

    def done(self) -> bool:
        """True once acknowledged or failed."""
        return self._finished

    def result(self, timeout: float | None = None) -> Ack:
        """The ack, waiting up to ``timeout`` seconds (None: no limit).

        Raises:
            Timeout: not done within ``timeout``.
            JetError: the message failed.
        """
        if not self._finished:
            with _LOCK:
                waiter = None
                if not self._finished:
                    waiter = self._waiter = self._waiter or threading.Event()
            if waiter is not None and not waiter.wait(timeout):
                raise Timeout(f"the send was not acknowledged within {timeout}s")
        return super().result()

    def exception(self, timeout: float | None = None) -> JetError | None:
        """The error the message failed with, or None if it was acknowledged."""
        try:
            self.result(timeout)
        except Timeout:
            if not self._finished:
                raise
        except JetError as exc:
            return exc
        return self._error

    def add_done_callback(self, callback: Callable[[AsyncSendHandle], None]) -> None:
        """Call ``callback(handle)`` once done (in the loop thread, or now if done)."""
        with _LOCK:
            if not self._finished:
                if self._callbacks is None:
                    self._callbacks = [callback]
                else:
                    self._callbacks.append(callback)
                return
        callback(self)

    # -- producer side (the loop thread) ------------------------------------------------------

    def _set(self, ack: Ack | None, error: JetError | None) -> None:
        if self._finished or super().done():
            return
        self._ack, self._error = ack, error
        self._finish()

    def _set_acked(self, stream: str, partition: int, offset: int, timestamp: int) -> bool:
        if self._finished or super().done():
            return False
        self._acked = (stream, partition, offset, timestamp)
        self._finish()
        return True

    def _finish(self) -> None:
        with _LOCK:
            self._finished = True
            waiter, callbacks, self._callbacks = self._waiter, self._callbacks, None
        if waiter is not None:
            waiter.set()
        self._release()
        if callbacks:
            for callback in callbacks:
                callback(self)

    def __repr__(self) -> str:
        state = "pending" if not self._finished else ("failed" if self._error else "acked")
        return f"<sync SendHandle {state}>"


class QueuedSends:
    """One sync producer's queue into its async producer (see the module docstring)."""

    def __init__(self, portal: BlockingPortal, producer: Producer) -> None:
        self._portal = portal
        self._producer = producer
        self._max = producer.max_pending
        self._pending = 0
        self._lock = threading.Lock()
        """The lock of :attr:`_room`, entered directly where no wait or notify follows
        (Condition's ``with`` is two Python calls per message)."""
        self._room = threading.Condition(self._lock)
        self._waiting = 0
        """Callers of :meth:`send_soon` waiting in :attr:`_room` for a free slot."""
        self._queue: deque[tuple[Prepared, SendHandle]] = deque()
        self._scheduled = False
        self._drain_lock: anyio.Lock | None = None

    def send_soon(self, prepared: Prepared) -> SendHandle:
        """Queue a checked message; blocks while ``max_pending`` are pending."""
        with self._lock:
            if self._pending >= self._max:
                self._wait_for_room()
            self._pending += 1
            handle = SendHandle(self._released)
            self._queue.append((prepared, handle))
            schedule, self._scheduled = not self._scheduled, True
        if schedule:
            try:
                self._portal.start_task_soon(self._drain)
            except BaseException:
                with self._lock:
                    self._scheduled = False
                raise
        return handle

    def _wait_for_room(self) -> None:
        """Wait (holding :attr:`_lock`) until fewer than ``max_pending`` are pending."""
        self._waiting += 1
        try:
            while self._pending >= self._max:
                self._room.wait()
        finally:
            self._waiting -= 1

    def flush(self) -> None:
        """Drain the queue into the producer, then wait for every ack (``flush``)."""
        self._portal.call(self._flush)

    def drain(self) -> None:
        """Drain the queue into the producer now (before it closes)."""
        self._portal.call(self._drain)

    def _released(self) -> None:
        with self._lock:
            self._pending -= 1
            if self._waiting:
                self._room.notify()

    async def _flush(self) -> None:
        await self._drain()
        await self._producer.flush()

    async def _drain(self) -> None:
        if self._drain_lock is None:
            self._drain_lock = anyio.Lock(fast_acquire=True)  # no yield when free
        async with self._drain_lock:
            while True:
                with self._lock:
                    if not self._queue:
                        self._scheduled = False
                        return
                    batch = list(self._queue)
                    self._queue.clear()
                for i, (prepared, handle) in enumerate(batch):
                    try:
                        await self._producer._enqueue(prepared, handle)
                    except JetError as exc:  # this message only (e.g. the producer closed)
                        handle._set(None, exc)
                    except BaseException:  # cancelled: the loop is stopping
                        for _p, left in batch[i:]:
                            left._set(None, _closed())
                        with self._lock:
                            self._scheduled = False
                        raise


def _closed() -> JetError:
    return ClientClosed("the producer was closed before the message was sent")
