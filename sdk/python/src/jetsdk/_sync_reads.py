"""The sync consumer's reads (hand-written; used by the generated :mod:`jetsdk.sync`).

A blocking iteration must not pay a round trip to the loop thread per message, nor per
batch. So the loop thread hands whole batches over, one ahead of the one being read:

- a *pump* task in the loop thread takes a batch of up to :data:`ITER_BATCH` messages from
  the async consumer's :class:`~jetsdk.consumer.delivery.Delivery` (waiting for a fetcher
  if none is there) and appends it to a thread-safe ``ready`` queue, as long as the
  queue is empty and the caller reads;
- the caller's thread hands messages out of its own buffer; when the buffer runs dry it
  moves the next ready batch in and wakes the pump with one fire-and-forget callback
  (``call_soon_threadsafe``: no task, no future, no wait), which settles what came before
  that batch and lets the pump take the next one. It waits (a plain thread wait, which a
  Ctrl-C interrupts) only if no batch is ready.

So the caller and the loop thread meet once per batch, and the caller sleeps only when the
loop has nothing for it. ``fetch(timeout=0)`` with nothing buffered asks the loop once (a
round trip) for what is there now.

Meaning (the async consumer's): a message counts as processed when the application asks
for more. Batches are settled as a whole: starting a batch settles every message handed
out before it (its :data:`~jetsdk.consumer.delivery.Marks`, taken with it), and waiting for
more with everything read settles all. What the buffer and the ready queue hold has not
reached the application: before a commit, a position or lag query, a pause and closing, it
is given back (:meth:`SyncReads.give_back`: the records return to the front of the
delivery's buffer, positions and un-acked sets to the first of them), so those see exactly
what the application got. Messages of a partition run that ended (revoked, lost, sought,
closed) are dropped, not handed out: the delivery counts ended runs, and the buffer is
checked only when that count moved. An error (a fetcher's, the group's) comes after the
messages taken before it, and is raised in the caller's thread.

Thread safety: one thread reads at a time: another one reading while a read waits or
refills the buffer gets :class:`~jetsdk.errors.ConcurrentUse` (two threads taking from the
buffer at the same instant are not told, but the buffer is a deque: no message goes out
twice). Loop-side state is touched only in the loop thread, or while the caller waits for
a round trip.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

import anyio
from anyio.from_thread import BlockingPortal

from jetsdk._sync_sends import loop_caller
from jetsdk.consumer.delivery import Delivery, Marks
from jetsdk.errors import ClientClosed, ConcurrentUse
from jetsdk.message import Message

__all__ = ["ITER_BATCH", "SyncReads"]

ITER_BATCH = 1000
"""Most messages the loop thread hands the caller's thread at once (or what the last
``fetch`` asked for, if more)."""

_Batch = tuple[int, list[Message], Marks, BaseException | None, int]
"""(sequence number, messages, marks, error, the delivery's count of ended runs when it was
taken): one hand-over from the pump."""


class SyncReads:
    """One sync consumer's buffer and its hand-over from the loop (see the module doc)."""

    def __init__(self, portal: BlockingPortal, delivery: Delivery, name: str) -> None:
        self._portal = portal
        self.delivery = delivery
        self._name = name
        self.buffer: deque[Message] = deque()
        """Messages handed over and not yet to the application (caller side)."""
        self.ended = delivery.ended
        """The delivery's count of ended runs when the buffer was last checked."""
        self._ready: deque[_Batch] = deque()
        self._arrived = threading.Event()
        self._reading = threading.Lock()
        self.busy = self._reading.locked
        """True while a thread waits for or refills the buffer (another one reading from the
        buffer meanwhile then gets ConcurrentUse from :meth:`next`)."""
        self._received = 0
        """Sequence number of the last batch the caller took."""
        # Loop side.
        self._active = False
        """The caller reads: the pump keeps one batch ready."""
        self._taken = 0
        """Sequence number of the last batch the pump took."""
        self._size = ITER_BATCH
        """Most messages the pump takes at once."""
        self._kick: anyio.Event | None = None
        self._taking: anyio.CancelScope | None = None
        self._scope: anyio.CancelScope | None = None
        self._call_soon: Callable[..., Any] = portal.call(self._setup)
        portal.start_task_soon(self._pump)

    # -- the caller's thread ------------------------------------------------------------------

    def next(self) -> Message:
        """The next message (waits as long as needed).

        Raises:
            StopIteration: the consumer is closed.
            JetError: a non-retriable error.
        """
        lock = self._lock()
        try:
            buffer = self.buffer
            while True:
                self._drop_stale()
                if buffer:
                    return buffer.popleft()
                try:
                    self._refill(None, ITER_BATCH)
                except ClientClosed:
                    raise StopIteration from None
        finally:
            lock.release()

    def fetch(self, max_records: int, timeout: float | None) -> list[Message]:
        """Up to ``max_records`` messages: buffered ones, else the first batch to arrive
        within ``timeout`` seconds (None: no limit; 0: what the loop has now)."""
        if max_records < 1:
            raise ValueError("max_records must be >= 1")
        lock = self._lock()
        try:
            buffer = self.buffer
            self._drop_stale()
            if not buffer:
                if not self._refill(timeout, max(max_records, ITER_BATCH)):
                    return []
                self._drop_stale()
            return [buffer.popleft() for _ in range(min(max_records, len(buffer)))]
        finally:
            lock.release()

    def give_back(self) -> None:
        """Give what is buffered back to the delivery and stop reading ahead (before a
        commit, a position query, a pause)."""
        self._portal.call(self._give_back)

    def close(self) -> None:
        """Give the buffer back and stop the pump (before the consumer closes)."""
        self._portal.call(self._close)

    def _lock(self) -> threading.Lock:
        lock = self._reading
        if not lock.acquire(blocking=False):
            raise ConcurrentUse(
                f"this {self._name} is being read by another thread; iterate or fetch from "
                "one thread at a time (give each thread its own consumer)"
            )
        return lock

    def _drop_stale(self) -> None:
        """Drop buffered messages of ended runs (only when a run ended since last time)."""
        ended = self.delivery.ended
        if ended != self.ended:
            self.ended = ended
            if self.buffer:
                kept = [msg for msg in self.buffer if not msg.stale]
                self.buffer.clear()
                self.buffer.extend(kept)

    def _refill(self, timeout: float | None, size: int) -> bool:
        """Move the next ready batch into the empty buffer, waiting up to ``timeout``
        (batches of ``size`` messages from now on); False if none came in time."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            if self._ready:
                self._start(self._ready.popleft())
                return True
            if timeout is not None and timeout <= 0:
                if self._portal.call(self._poll, self._received, size):
                    continue
                return False
            self._arrived.clear()
            if self._ready:
                continue
            self._call_soon(self._waiting, self._received, size)
            if deadline is None:
                self._arrived.wait()
                continue
            wait = deadline - time.monotonic()
            if (wait <= 0 or not self._arrived.wait(wait)) and not self._ready:
                return False

    def _start(self, batch: _Batch) -> None:
        seq, messages, marks, error, ended = batch
        self._received = max(self._received, seq)  # (an error kept by a give-back: older)
        if error is not None:
            if isinstance(error, ClientClosed):
                self._ready.appendleft(batch)  # every later read ends too
            raise error
        self.ended = ended  # the buffer was empty: _drop_stale checks it if runs ended since
        self.buffer.extend(messages)
        self._call_soon(self._started, marks)

    # -- the loop thread ----------------------------------------------------------------------

    async def _setup(self) -> Callable[..., Any]:
        self._kick = anyio.Event()
        return loop_caller()

    def _wake(self) -> None:
        assert self._kick is not None
        self._kick.set()

    def _started(self, marks: Marks) -> None:
        """The caller started a batch: what was handed out before it is processed, and
        the pump takes the next one."""
        if marks:
            self.delivery.settle_to(marks)
        self._wake()

    def _waiting(self, received: int, size: int) -> None:
        """The caller read everything up to batch ``received`` and waits for more (in
        batches of ``size``)."""
        self._active = True
        self._size = size
        if received == self._taken:  # nothing taken since: all it got is processed
            self.delivery.settle()
        self._wake()

    def _poll(self, received: int, size: int) -> bool:
        """``fetch(timeout=0)``: True if a batch is ready now (taken here if need be)."""
        self._waiting(received, size)
        if self._ready:
            return True
        messages, marks = self.delivery.take_nowait(size)
        if not messages:
            return False
        self._taken += 1
        self._ready.append((self._taken, messages, marks, None, self.delivery.ended))
        return True

    async def _pump(self) -> None:
        """Keep one batch ready while the caller reads (see the module doc)."""
        delivery = self.delivery
        with anyio.CancelScope() as self._scope:
            while True:
                while not self._active or self._ready:
                    assert self._kick is not None
                    await self._kick.wait()
                    self._kick = anyio.Event()
                messages: list[Message] = []
                marks: Marks = []
                error: BaseException | None = None
                with anyio.CancelScope() as taking:
                    self._taking = taking
                    try:
                        messages, marks = await delivery.take(self._size)
                    except Exception as exc:  # raised in the caller's thread
                        error = exc
                self._taking = None
                if taking.cancel_called:  # given back meanwhile: so is this one
                    if messages:
                        delivery.give_back(messages)
                    continue
                self._taken += 1
                self._ready.append((self._taken, messages, marks, error, delivery.ended))
                self._arrived.set()
                if isinstance(error, ClientClosed):
                    return

    def _give_back(self) -> None:
        """In the loop thread while the caller waits: buffer and ready batches back."""
        self._active = False
        if self._taking is not None:
            self._taking.cancel()
        messages: list[Message] = []
        buffer = self.buffer
        while buffer:  # one popleft at a time: a message another thread takes meanwhile
            try:  # (a commit from a callback's thread while this one reads) is not
                messages.append(buffer.popleft())  # given back too
            except IndexError:
                break
        kept = [batch for batch in self._ready if batch[3] is not None]
        for batch in self._ready:
            messages.extend(batch[1])
        self._ready.clear()
        self._ready.extend(kept)
        self._received = self._taken  # nothing taken is on its way to the caller now
        if messages:
            self.delivery.give_back(messages)

    def _close(self) -> None:
        self._give_back()
        if self._scope is not None:
            self._scope.cancel()
        self._taken += 1
        closed = ClientClosed("the consumer is closed")
        self._ready.append((self._taken, [], [], closed, self.delivery.ended))
        self._arrived.set()  # a thread still waiting ends its read
