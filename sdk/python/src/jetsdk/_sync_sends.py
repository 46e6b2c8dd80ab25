"""The sync producer's send queue (hand-written; used by the generated :mod:`jetsdk.sync`).

A blocking ``send_soon`` must not pay a round trip to the loop thread per message. So the
message is checked on the caller's thread (a bad one fails there, as in the async API),
appended to a thread-safe queue, and the loop thread moves everything queued into the
async producer in one go. The hand-off is fire-and-forget: the first message of an empty
queue schedules one plain callback in the loop (``call_soon_threadsafe``; no new task, no
future, and the caller does not wait for the loop to take it), which wakes the queue's
drain task, and the messages queued before it runs go with it. The caller gets a
:class:`SendHandle`, which the producer completes directly from the loop thread and which
any thread may wait on.

``max_pending`` and ``max_pending_bytes`` are counted on the caller's side: ``send_soon``
blocks while that many messages (or bytes of them) are queued or unacknowledged. Callers
count what they queue (under the queue's lock) and handles count what is done (in the loop
thread alone, no lock): an ack takes the lock only when a caller waits for room. ``send``
is ``send_soon(...).result()``, so sends keep their order whichever way they were made;
waiting for one ack is one thread wake per direction (the loop callback, the handle's
release). ``flush`` drains the queue, then flushes the producer.

Thread safety: any number of threads may share one sync producer; the queue keeps each
thread's order. Blocking waits (backpressure, ``result``) are plain thread waits, which a
Ctrl-C interrupts. The lock-free steps rely on the GIL's ordering of attribute stores: a
waiter stores itself then reads the done flag, the loop thread stores the flag then reads
the waiter, so one of the two always sees the other.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import importlib
import threading
from collections import deque
from collections.abc import Callable
from typing import Any

import anyio
from anyio.from_thread import BlockingPortal

from jetsdk.errors import ClientClosed, JetError, Timeout
from jetsdk.message import Ack
from jetsdk.producer.handle import SendHandle as AsyncSendHandle
from jetsdk.producer.in_flight import Prepared
from jetsdk.producer.producer import Producer
from jetsdk.transport import running_asyncio_loop

__all__ = ["QueuedSends", "SendHandle", "loop_caller"]

_LOCK = threading.Lock()
"""Guards making a handle's waiter and its callback list (held for a few instructions)."""


class SendHandle(AsyncSendHandle):
    """The outcome of a sync ``send_soon``, usable from any thread like a
    :class:`concurrent.futures.Future`: :meth:`result` waits (``timeout`` seconds at most:
    :class:`~jetsdk.errors.Timeout`, the send itself goes on) and raises the message's
    error if it failed. Callbacks added with :meth:`add_done_callback` run in the client's
    loop thread (or at once if already done): keep them short and do not call the sync API
    from them."""

    __slots__ = ("_finished", "_sends", "_size", "_waiter")

    def __init__(self, sends: QueuedSends | None = None, size: int = 0) -> None:
        # The base class's fields set here, not through super().__init__(): one Python
        # call less per message on the caller's thread (keep in step with the base).
        self._ack: Ack | None = None
        self._acked: tuple[str, int, int, int] | None = None
        self._error: JetError | None = None
        self._event = None
        self._callbacks = None
        self._finished = False
        # Held until the handle is done; a waiter takes it, then passes it on.
        self._waiter: threading.Lock | None = None
        self._sends = sends
        self._size = size
        """The message's estimated size (counted against ``max_pending_bytes``)."""

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
            waiter = self._waiter
            if waiter is None:
                with _LOCK:
                    waiter = self._waiter
                    if waiter is None:
                        waiter = threading.Lock()
                        waiter.acquire()
                        self._waiter = waiter
            if not self._finished:  # read after storing the waiter (see the module doc)
                wait = -1.0 if timeout is None else max(timeout, 0.0)
                if not waiter.acquire(timeout=wait):
                    raise Timeout(f"the send was not acknowledged within {timeout}s")
                waiter.release()  # for the next thread waiting on this handle
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
        if not self._finished:
            with _LOCK:
                if self._callbacks is None:
                    self._callbacks = [callback]
                else:
                    self._callbacks.append(callback)
            if not self.done():  # read after storing the callback
                return
            self._run_callbacks()  # done meanwhile: whoever takes the list runs it
            return
        callback(self)

    # -- producer side (the loop thread) ------------------------------------------------------

    def _set(self, ack: Ack | None, error: JetError | None) -> None:
        if self._finished:
            return
        self._ack, self._error = ack, error
        self._finish()

    def _set_acked(self, stream: str, partition: int, offset: int, timestamp: int) -> bool:
        if self._finished:
            return False
        self._acked = (stream, partition, offset, timestamp)
        self._finish()
        return True

    def _finish(self) -> None:
        self._finished = True
        sends = self._sends
        if sends is not None:  # a max_pending slot free before any waiter runs
            sends.done += 1
            sends.done_bytes += self._size
            if sends.waiting:
                sends.wake_one()
        waiter = self._waiter  # read after storing _finished (see the module doc)
        if waiter is not None:
            waiter.release()
        if self._callbacks is not None:
            self._run_callbacks()

    def _run_callbacks(self) -> None:
        with _LOCK:
            callbacks, self._callbacks = self._callbacks, None
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
        self._max_bytes = producer.max_pending_bytes
        self._sent = 0
        """Messages queued so far (written by callers, under :attr:`_lock`)."""
        self._sent_bytes = 0
        """Their estimated sizes."""
        self.done = 0
        """Of those, how many are done (written by handles in the loop thread alone)."""
        self.done_bytes = 0
        """Their estimated sizes."""
        self._lock = threading.Lock()
        """The lock of :attr:`_room`, entered directly where no wait or notify follows
        (Condition's ``with`` is two Python calls per message)."""
        self._room = threading.Condition(self._lock)
        self.waiting = 0
        """Callers of :meth:`send_soon` waiting in :attr:`_room` for a free slot."""
        self._queue: deque[tuple[Prepared, SendHandle]] = deque()
        self._scheduled = False
        """A wake-up of the drain task is on its way to the loop thread."""
        self._closed = False
        self._wake: anyio.Event | None = None
        self._drains_in_callback = False
        """asyncio: the scheduled callback drains the queue itself (the drain task then
        only drains at close), a task wake-up and a loop turn less per hand-off."""
        self._scope: anyio.CancelScope | None = None
        self._call_soon: Callable[[Callable[[], None]], Any] = portal.call(self._setup)
        portal.start_task_soon(self._drain_task)

    def send_soon(self, prepared: Prepared) -> SendHandle:
        """Queue a checked message; blocks while the producer is full (``max_pending``,
        ``max_pending_bytes``)."""
        with self._lock:
            if self._full():
                self._wait_for_room()
            if self._closed:
                raise _closed()
            self._sent += 1
            size = prepared.size
            self._sent_bytes += size
            handle = SendHandle(self, size)
            self._queue.append((prepared, handle))
            schedule, self._scheduled = not self._scheduled, True
        if schedule:
            try:
                self._call_soon(self._wake_drain)
            except BaseException:  # the loop is closed
                with self._lock:
                    self._scheduled = False
                raise
        return handle

    def _full(self) -> bool:
        """True while ``max_pending`` messages or ``max_pending_bytes`` are pending."""
        return self._sent - self.done >= self._max or (
            self._sent_bytes - self.done_bytes >= self._max_bytes
        )

    def _wait_for_room(self) -> None:
        """Wait (holding :attr:`_lock`) until the producer is not :meth:`_full`."""
        self.waiting += 1  # stored before reading `done` (see the module doc)
        try:
            while self._full():
                self._room.wait()
        finally:
            self.waiting -= 1

    def wake_one(self) -> None:
        """A slot became free while a caller waits for one (the loop thread)."""
        with self._lock:
            self._room.notify()

    def flush(self) -> None:
        """Drain the queue into the producer, then wait for every ack (``flush``)."""
        self._portal.call(self._flush)

    def drain(self) -> None:
        """Closing: drain the queue into the producer now and stop the drain task; later
        sends fail with :class:`~jetsdk.errors.ClientClosed`."""
        self._portal.call(self._close)

    async def _flush(self) -> None:
        self._drain()
        await self._producer.flush()

    async def _close(self) -> None:
        with self._lock:
            self._closed = True
        self._drain()
        if self._scope is not None:
            self._scope.cancel()

    async def _setup(self) -> Callable[[Callable[[], None]], Any]:
        self._wake = anyio.Event()
        loop = running_asyncio_loop()
        if loop is None:
            return loop_caller()
        self._drains_in_callback = True
        # The callback runs anyio code (a new partition's sender task): in this task's
        # context, where anyio knows its backend, not the calling thread's.
        return functools.partial(loop.call_soon_threadsafe, context=contextvars.copy_context())

    def _wake_drain(self) -> None:
        """The callback a sender schedules (in the loop thread, outside any task): drain
        here on asyncio, else wake the drain task (a trio callback must not raise)."""
        if self._drains_in_callback:
            self._drain()
            return
        assert self._wake is not None
        self._wake.set()

    async def _drain_task(self) -> None:
        """Drain the queue each time a sender wakes it, until closed."""
        with anyio.CancelScope() as self._scope:
            try:
                while True:
                    assert self._wake is not None
                    await self._wake.wait()
                    self._wake = anyio.Event()
                    self._drain()
            finally:  # cancelled: the loop is stopping
                with self._lock:
                    self._closed = True
                self._fail_queued()

    def _fail_queued(self) -> None:
        with self._lock:
            left = list(self._queue)
            self._queue.clear()
        for _p, handle in left:
            handle._set(None, _closed())

    def _drain(self) -> None:
        """Move everything queued into the producer (the loop thread, without a wait:
        ``max_pending`` and ``max_pending_bytes`` are kept on the callers' side)."""
        producer = self._producer
        with self._lock:
            batch = list(self._queue)
            self._queue.clear()
            # What is queued from now on schedules a drain of its own (the queue was
            # taken whole under the lock: nothing is left behind for this one).
            self._scheduled = False
        i = 0
        try:
            producer._check_open()
            for prepared, handle in batch:
                try:
                    producer._append(prepared, handle)
                except JetError as exc:  # this message only
                    handle._set(None, exc)
                i += 1
        except BaseException as exc:  # closed, or a bug: fail what is left, not hang
            error = exc if isinstance(exc, JetError) else _closed()
            for _p, left in batch[i:]:
                left._set(None, error)
            if not isinstance(exc, JetError):
                raise


def loop_caller() -> Callable[[Callable[[], None]], Any]:
    """The running loop's fire-and-forget call from another thread (asyncio's
    ``call_soon_threadsafe``, trio's ``run_sync_soon``)."""
    try:
        return asyncio.get_running_loop().call_soon_threadsafe
    except RuntimeError:  # not asyncio: trio
        trio: Any = importlib.import_module("trio")
        return trio.lowlevel.current_trio_token().run_sync_soon  # type: ignore[no-any-return]


def _closed() -> JetError:
    return ClientClosed("the producer was closed before the message was sent")
