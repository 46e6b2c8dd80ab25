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
from collections.abc import Sequence

import anyio

RECV_BYTES = 256 * 1024
"""Bytes asked for per recv."""
READ_INLINE_MAX_BYTES = 1024 * 1024
"""fetch.io=read: slices up to this size are read on the event loop (a page-cache pread is
cheaper than a worker-thread hop); bigger ones in a worker thread."""
_MSG_MORE = getattr(socket, "MSG_MORE", 0)


class SocketIO:
    """A connected non-blocking socket."""

    __slots__ = ("peer", "sock")

    def __init__(self, sock: socket.socket) -> None:
        """Take ownership of ``sock`` (made non-blocking, TCP_NODELAY on)."""
        sock.setblocking(False)
        if sock.family in (socket.AF_INET, socket.AF_INET6):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.sock = sock
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
            try:
                return self.sock.recv(max_bytes)
            except (BlockingIOError, InterruptedError):
                await anyio.wait_readable(self.sock)

    async def recv_within(self, seconds: float, max_bytes: int = RECV_BYTES) -> bytes | None:
        """As :meth:`recv`, but None if nothing arrived within ``seconds``.

        On asyncio (and uvloop, which the server runs on) the wait is one future with a
        reader callback and a timer, instead of anyio's readiness wait inside a timed cancel
        scope: those were about a third of the Python calls per request of the server's
        read loop (cProfile at 500 msg/s on the dev VM).

        Raises:
            OSError: connection reset and the like.
        """
        loop = asyncio.get_running_loop()
        fd = self.sock.fileno()
        while True:
            data = self.recv_now(max_bytes)
            if data is not None:
                return data
            ready: asyncio.Future[bool] = loop.create_future()
            loop.add_reader(fd, _settle, ready, True)
            timer = loop.call_later(seconds, _settle, ready, False)
            try:
                if not await ready:
                    return None
            finally:
                timer.cancel()
                loop.remove_reader(fd)

    def recv_now(self, max_bytes: int = RECV_BYTES) -> bytes | None:
        """What :meth:`recv` would return if it needs no wait; None if it would wait.

        Raises:
            OSError: connection reset and the like.
        """
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
        with contextlib.suppress(OSError):
            self.sock.close()


def _settle(future: asyncio.Future[bool], value: bool) -> None:
    if not future.done():
        future.set_result(value)
