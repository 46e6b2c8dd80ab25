"""Bridging a foreign thread into an anyio event loop, without either side blocking.

:class:`ThreadWaker` lets any thread wake one task of the event loop: ``wake()`` writes a
byte to a non-blocking socketpair (never blocks; a full buffer already means a wake-up is
pending), the task awaits :meth:`ThreadWaker.wait`. The thread puts its data somewhere the
task reads after waking (a deque, an attribute holding an immutable value) *before*
calling ``wake()``, so nothing is missed.

:class:`Cell` is an event-loop-side value with change notification: ``set`` replaces the
value, ``wait_changed`` and ``watch`` let tasks follow it (coalescing: a slow watcher sees
the latest value, not every intermediate one).

Works on asyncio and trio (anyio backends).
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import AsyncIterator
from typing import Generic, TypeVar

import anyio

T = TypeVar("T")

_DRAIN_BYTES = 4096


class ThreadWaker:
    """A wake-up channel from any thread to one event-loop task.

    Thread safety: :meth:`wake` and :meth:`close` may be called from any thread;
    :meth:`wait` from one task at a time.
    """

    def __init__(self) -> None:
        self._recv, self._send = socket.socketpair()
        self._recv.setblocking(False)
        self._send.setblocking(False)
        self._lock = threading.Lock()
        self._closed = False

    def wake(self) -> None:
        """Wake the waiting task (or make its next :meth:`wait` return at once)."""
        with self._lock:
            if self._closed:
                return
            # A full buffer means a wake-up is pending already.
            with contextlib.suppress(BlockingIOError, InterruptedError):
                self._send.send(b"\0")

    async def wait(self) -> None:
        """Return once :meth:`wake` was called since the last return (cancellable).

        Raises:
            anyio.ClosedResourceError: the waker is closed.
        """
        while True:
            if self._closed:
                raise anyio.ClosedResourceError
            try:
                data = self._recv.recv(_DRAIN_BYTES)
            except (BlockingIOError, InterruptedError):
                await anyio.wait_readable(self._recv)
                continue
            if not data:
                raise anyio.ClosedResourceError
            while len(data) == _DRAIN_BYTES:
                try:
                    data = self._recv.recv(_DRAIN_BYTES)
                except (BlockingIOError, InterruptedError):
                    break
            return

    def close(self) -> None:
        """Close both ends; later :meth:`wake` calls do nothing."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._send.close()
            self._recv.close()


class Cell(Generic[T]):
    """A value owned by the event loop, with change notification.

    Create inside a running event loop. Task safety: use from the event loop only.
    """

    def __init__(self, value: T) -> None:
        self._value = value
        self._version = 0
        self._event = anyio.Event()

    @property
    def value(self) -> T:
        """The current value."""
        return self._value

    @property
    def version(self) -> int:
        """Incremented at each :meth:`set`."""
        return self._version

    def set(self, value: T) -> None:
        """Replace the value and wake every waiter."""
        self._value = value
        self._version += 1
        event, self._event = self._event, anyio.Event()
        event.set()

    async def wait_changed(self, version: int) -> T:
        """Wait until :attr:`version` differs from ``version``; return the value then."""
        while self._version == version:
            await self._event.wait()
        return self._value

    async def watch(self) -> AsyncIterator[T]:
        """The current value, then the value after each change (latest only)."""
        version = self._version
        yield self._value
        while True:
            value = await self.wait_changed(version)
            version = self._version
            yield value
