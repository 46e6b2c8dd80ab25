"""Non-blocking socket I/O on anyio readiness waits, with ``os.sendfile`` support.

Why not anyio's SocketStream: on the asyncio backend it writes through an asyncio transport
that may still hold buffered bytes when ``send`` returns, so a following ``os.sendfile`` on
the same socket could overtake them. Owning the socket keeps byte order explicit: every
write below either completes or leaves nothing queued in user space. Works on asyncio and
trio alike.

Task safety: one reader task and one writer at a time (the caller serializes writes).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
from collections.abc import Callable, Sequence

import anyio

RECV_BYTES = 256 * 1024
"""Bytes asked for per recv."""
_MSG_MORE = getattr(socket, "MSG_MORE", 0)
_TIMER_SLACK_S = 0.002
"""A read wait's timer that fires this close to the wait's deadline ends it (uvloop's
timers and clock have millisecond resolution: no re-arming for what is left of one)."""


class SocketIO:
    """A connected non-blocking socket."""

    __slots__ = (
        "_deadline",
        "_early",
        "_into",
        "_max_read",
        "_timer",
        "_waiter",
        "_watch",
        "peer",
        "sink",
        "sock",
    )

    def __init__(self, sock: socket.socket) -> None:
        """Take ownership of ``sock`` (made non-blocking, TCP_NODELAY on)."""
        sock.setblocking(False)
        if sock.family in (socket.AF_INET, socket.AF_INET6):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.sock = sock
        self._watch: asyncio.AbstractEventLoop | None = None
        """The loop whose reader callback watches the socket (None: none registered)."""
        self._waiter: asyncio.Future[bytes | int | None] | None = None
        self._into: memoryview | None = None
        """Where the reader callback receives for :meth:`recv_into_within` (None: a
        ``bytes`` of up to ``_max_read``)."""
        self._early: bytes | OSError | None = None
        """What the reader callback received while nobody waited (for the next read)."""
        self._max_read = RECV_BYTES
        self._timer: asyncio.TimerHandle | None = None
        """The timer of the waits for reads (:meth:`_arm`): armed once, kept from one
        wait to the next, re-armed when it fires before the deadline of the wait then."""
        self._deadline = 0.0
        """The current wait's deadline (loop time)."""
        self.sink: Callable[[bytes], bool] | None = None
        """Offered what the reader callback receives for a pending :meth:`recv_within`
        before that wait ends with it: True if it took the bytes (the wait goes on)."""
        try:
            peer = sock.getpeername()
            self.peer = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
        except OSError:
            self.peer = "?"

    async def recv(self, max_bytes: int = RECV_BYTES) -> bytes:
        """Receive up to ``max_bytes``; ``b""`` at end of stream.

        Raises:
            OSError: connection reset and the like.
        """
        while True:
            data = SocketIO.recv_now(self, max_bytes)  # the socket's (TLS overrides it)
            if data is not None:
                return data
            await anyio.wait_readable(self.sock)

    async def recv_within(self, seconds: float, max_bytes: int = RECV_BYTES) -> bytes | None:
        """As :meth:`recv`, but None if nothing arrived within ``seconds``.

        On asyncio (and uvloop, which the server runs on) the wait is one future that a
        reader callback settles with the bytes it received, and a timer; the callback
        stays registered from one wait to the next, so a connection that waits for each
        request costs no ``epoll_ctl`` per request. A callback that finds nobody waiting
        keeps what it read for the next read and stops watching until someone waits (a
        connection paused at its in-flight limit is not read further). anyio's readiness
        wait inside a timed cancel scope cost about a third of the Python calls per
        request of the server's read loop (cProfile at 500 msg/s on the dev VM).

        Raises:
            OSError: connection reset and the like.
        """
        if self._watch is None or self._early is not None or seconds <= 0:
            data = self.recv_now(max_bytes)
            if data is not None:
                return data
        # else the reader callback is registered: what the socket holds already, it reads
        # on this loop turn (epoll is level-triggered), so no recv that would find nothing
        # (an EAGAIN system call per request at light load).
        # The watching loop, if any, is the running one (no get_running_loop: a getpid
        # system call per call on Python 3.11).
        loop = self._watch or asyncio.get_running_loop()
        ready: asyncio.Future[bytes | int | None] = loop.create_future()
        self._waiter = ready
        self._max_read = max_bytes
        if self._watch is None:
            loop.add_reader(self.sock.fileno(), self._on_readable)
            self._watch = loop
        self._arm(loop, seconds)
        try:
            got = await ready
        finally:
            self._waiter = None
        assert not isinstance(got, int)  # no target set: received as bytes
        return got

    async def recv_into_within(self, target: memoryview, seconds: float) -> int | None:
        """As :meth:`recv_within`, but into ``target`` (``recv_into``: no ``bytes`` made):
        the number of bytes received (0 at end of stream), None if nothing arrived within
        ``seconds``.

        Raises:
            OSError: connection reset and the like.
        """
        early = self._early
        if early is not None:  # what the reader callback read while nobody waited
            if isinstance(early, OSError):
                self._early = None
                raise early
            n = min(len(early), len(target))
            target[:n] = early[:n]
            self._early = early[n:] if n < len(early) else None
            return n
        if self._watch is None or seconds <= 0:
            try:
                return self.sock.recv_into(target)
            except (BlockingIOError, InterruptedError):
                pass
        loop = self._watch or asyncio.get_running_loop()
        ready: asyncio.Future[bytes | int | None] = loop.create_future()
        self._waiter, self._into = ready, target
        if self._watch is None:
            loop.add_reader(self.sock.fileno(), self._on_readable)
            self._watch = loop
        self._arm(loop, seconds)
        try:
            data = await ready
        finally:
            self._waiter = self._into = None
        assert not isinstance(data, bytes)  # received into the target
        return data

    def _arm(self, loop: asyncio.AbstractEventLoop, seconds: float) -> None:
        """Let the current wait end with None ``seconds`` from now. The timer armed for an
        earlier wait is kept if it fires no later (it then re-arms itself for the rest):
        a connection whose deadline moves on with each request (the idle timeout) arms
        one timer per idle period, not one per request, and cancels none."""
        deadline = loop.time() + seconds
        self._deadline = deadline
        timer = self._timer
        if timer is not None:
            if timer.when() <= deadline:
                return
            timer.cancel()
        self._timer = loop.call_at(deadline, self._on_deadline)

    def _on_deadline(self) -> None:
        self._timer = None
        waiter = self._waiter
        if waiter is None or waiter.done():
            return  # no wait now: the next one arms a timer again
        loop = waiter.get_loop()
        if loop.time() < self._deadline - _TIMER_SLACK_S:
            self._timer = loop.call_at(self._deadline, self._on_deadline)
        else:
            waiter.set_result(None)

    def _on_readable(self) -> None:
        waiter = self._waiter
        into = self._into if waiter is not None and not waiter.done() else None
        try:
            data: bytes | int | OSError = (
                self.sock.recv(self._max_read) if into is None else self.sock.recv_into(into)
            )
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            data = exc
        if waiter is not None and not waiter.done():
            if isinstance(data, OSError):
                waiter.set_exception(data)
            else:
                sink = self.sink
                if sink is not None and isinstance(data, bytes) and data and sink(data):
                    return  # taken in this callback: the wait goes on
                waiter.set_result(data)
            if data:
                return
        else:
            assert not isinstance(data, int)  # received into a target only for a waiter
            self._early = data
        self._unwatch()  # nobody waits, or the stream ended: stop until someone waits

    def _unwatch(self) -> None:
        loop, self._watch = self._watch, None
        if loop is not None:
            with contextlib.suppress(Exception):  # the loop may be closed at shutdown
                loop.remove_reader(self.sock.fileno())

    def recv_now(self, max_bytes: int = RECV_BYTES) -> bytes | None:
        """What :meth:`recv` would return if it needs no wait; None if it would wait.

        Raises:
            OSError: connection reset and the like.
        """
        early = self._early
        if early is not None:
            self._early = None
            if isinstance(early, OSError):
                raise early
            return early
        try:
            return self.sock.recv(max_bytes)
        except (BlockingIOError, InterruptedError):
            return None

    def send_now(self, data: bytes | memoryview, *, more: bool = False) -> int:
        """Send what the socket takes without waiting; the number of bytes sent (0 if it
        takes nothing now). The rest is for :meth:`send_all`.

        Raises:
            OSError: connection reset and the like.
        """
        try:
            return self.sock.send(data, _MSG_MORE if more else 0)
        except (BlockingIOError, InterruptedError):
            return 0

    def sendfile_now(self, fileno: int, offset: int, count: int) -> int:
        """:meth:`sendfile` without waiting: the bytes sent (0 if none now).

        Raises:
            OSError: socket error, or EOF (the file is shorter than ``offset + count``).
        """
        try:
            sent = os.sendfile(self.sock.fileno(), fileno, offset, count)
        except (BlockingIOError, InterruptedError):
            return 0
        if sent == 0 and count > 0:
            raise OSError("file ended before the requested range was sent")
        return sent

    async def send_all(self, data: bytes | memoryview, *, more: bool = False) -> None:
        """Send every byte of ``data`` (``more``: hint that more follows, MSG_MORE)."""
        view = memoryview(data).cast("B")
        flags = _MSG_MORE if more else 0
        while view:
            try:
                sent = self.sock.send(view, flags)
            except (BlockingIOError, InterruptedError):
                await anyio.wait_writable(self.sock)
                continue
            view = view[sent:]

    async def send_buffers(self, buffers: Sequence[bytes | memoryview]) -> None:
        """Send several buffers back to back with as few syscalls as possible (sendmsg)."""
        views = [memoryview(b).cast("B") for b in buffers if len(b)]
        while views:
            try:
                sent = self.sock.sendmsg(views)
            except (BlockingIOError, InterruptedError):
                await anyio.wait_writable(self.sock)
                continue
            while sent and views:
                if sent >= len(views[0]):
                    sent -= len(views[0])
                    views.pop(0)
                else:
                    views[0] = views[0][sent:]
                    sent = 0

    async def sendfile(self, fileno: int, offset: int, count: int) -> None:
        """Send ``count`` bytes of file ``fileno`` from ``offset`` with os.sendfile.

        Raises:
            OSError: socket error, or EOF (the file is shorter than ``offset + count``).
        """
        sock_fd = self.sock.fileno()
        while count > 0:
            try:
                sent = os.sendfile(sock_fd, fileno, offset, count)
            except (BlockingIOError, InterruptedError):
                await anyio.wait_writable(self.sock)
                continue
            if sent == 0:
                raise OSError("file ended before the requested range was sent")
            offset += sent
            count -= sent

    def close(self) -> None:
        """Close the socket (wait tasks must have been cancelled first)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._unwatch()
        with contextlib.suppress(OSError):
            self.sock.close()
