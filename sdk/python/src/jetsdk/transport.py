"""The byte-stream interface the connection runs on, and its anyio TCP backend.

I/O sits behind a small interface (:class:`ByteStream`: ``read``, ``write``, ``aclose``)
so the connection logic can run over TCP or over an in-memory pipe in tests
(:func:`jetsdk.memory.memory_stream_pair`). A :data:`Dialer` opens a ByteStream to an
address; :func:`tcp_dialer` is the real one.

Exceptions are translated here, at the I/O boundary (:func:`map_io_errors`): OS errors,
anyio's broken/closed-resource errors and end-of-stream become
:class:`~jetsdk.errors.JetConnectionError`. Nothing above this module sees an OSError.

TLS: :func:`jetsdk.security.tls_dialer` (TLS from the first byte; no STARTTLS).
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from typing import Protocol, TypeVar

import anyio
import anyio.abc
import attrs

from jetsdk.errors import InvalidArgument, JetConnectionError

__all__ = [
    "DEFAULT_PORT",
    "HEAD_READ_BYTES",
    "READ_CHUNK_BYTES",
    "Address",
    "AnyioByteStream",
    "ByteStream",
    "Dialer",
    "Place",
    "SocketByteStream",
    "map_io_errors",
    "parse_address",
    "receive_into",
    "running_asyncio_loop",
    "tcp_dialer",
]

DEFAULT_PORT = 9292
"""Port of a jet server when an address gives none."""

READ_CHUNK_BYTES = 256 * 1024
"""Bytes asked for per read; large so a big fetch response needs few reads."""

HEAD_READ_BYTES = 4096
"""Bytes asked for by the read after one into a receiver's place (:func:`receive_into`):
the next frame is often as large, and a read of READ_CHUNK_BYTES took its header and its
first 256 KiB into a new ``bytes``, to be copied into that frame's place (as on the
server's jet port, ``HEAD_READ_BYTES`` there)."""

Place = Callable[[], memoryview | None]
"""Where a receiver wants its next bytes received (a view to fill), or None: hand them over
as ``bytes`` (:func:`receive_into`)."""

_Sent = TypeVar("_Sent")
"""What a socket send takes: bytes (send) or a sequence of buffers (sendmsg)."""


class ByteStream(Protocol):
    """A reliable, ordered, bidirectional byte stream (one connection).

    ``read`` and ``write`` may be called concurrently from two tasks (one reader, one
    writer); two concurrent writers must be serialized by the caller.
    """

    async def read(self, max_bytes: int = READ_CHUNK_BYTES) -> bytes:
        """Up to ``max_bytes`` bytes; ``b""`` once the peer closed its side.

        Raises:
            JetConnectionError: the stream broke.
        """
        ...

    async def write(self, data: bytes | memoryview) -> None:
        """Send all of ``data``.

        Raises:
            JetConnectionError: the stream broke or is closed.
        """
        ...

    async def aclose(self) -> None:
        """Close both directions. Idempotent; never raises."""
        ...


@attrs.frozen(cache_hash=True)  # a key of the pool's connections, looked up per batch
class Address:
    """A server address."""

    host: str
    """Host name or IP literal (IPv6 without brackets)."""
    port: int
    """TCP port."""

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"


def parse_address(text: str) -> Address:
    """Parse ``host:port``, ``host`` (default port), ``[v6]:port`` or ``[v6]``.

    Raises:
        InvalidArgument: empty host or a bad port.
    """
    text = text.strip()
    if text.startswith("["):
        end = text.find("]")
        if end < 0:
            raise InvalidArgument(f"bad address {text!r}", details={"field": "servers"})
        host, rest = text[1:end], text[end + 1 :]
        port_text = rest[1:] if rest.startswith(":") else ""
        if rest and not rest.startswith(":"):
            raise InvalidArgument(f"bad address {text!r}", details={"field": "servers"})
    elif text.count(":") == 1:
        host, port_text = text.split(":")
    else:
        host, port_text = text, ""
    if not host:
        raise InvalidArgument(f"bad address {text!r}: no host", details={"field": "servers"})
    if not port_text:
        return Address(host, DEFAULT_PORT)
    try:
        port = int(port_text)
    except ValueError:
        port = -1
    if not 0 < port < 65536:
        raise InvalidArgument(f"bad address {text!r}: bad port", details={"field": "servers"})
    return Address(host, port)


@contextmanager
def map_io_errors(what: str) -> Iterator[None]:
    """Translate I/O exceptions raised inside the block into JetConnectionError."""
    try:
        yield
    except (
        OSError,
        anyio.BrokenResourceError,
        anyio.ClosedResourceError,
        anyio.EndOfStream,
    ) as exc:
        if isinstance(exc, JetConnectionError):
            raise
        raise _io_error(what, exc) from exc


def _io_error(what: str, exc: BaseException) -> JetConnectionError:
    detail = str(exc) or type(exc).__name__
    return JetConnectionError(f"{what}: {detail}")


@attrs.define(eq=False)
class AnyioByteStream:
    """:class:`ByteStream` over an anyio byte stream (a TCP socket stream)."""

    stream: anyio.abc.ByteStream
    """The wrapped anyio stream."""
    label: str = ""
    """Peer description for error messages."""

    async def read(self, max_bytes: int = READ_CHUNK_BYTES) -> bytes:
        """See :meth:`ByteStream.read`."""
        with map_io_errors(f"read from {self.label}"):
            try:
                return await self.stream.receive(max_bytes)
            except anyio.EndOfStream:
                return b""

    async def write(self, data: bytes | memoryview) -> None:
        """See :meth:`ByteStream.write`."""
        with map_io_errors(f"write to {self.label}"):
            await self.stream.send(data if isinstance(data, bytes) else bytes(data))

    async def aclose(self) -> None:
        """See :meth:`ByteStream.aclose`."""
        # A close that races a broken socket may raise; closing is best effort.
        with anyio.CancelScope(shield=True):
            with suppress(OSError, anyio.BrokenResourceError, anyio.ClosedResourceError):
                await self.stream.aclose()


GATHER_MAX_BUFFERS = 512
"""Most buffers one gathered send takes (Linux's IOV_MAX is 1024)."""


@attrs.define(eq=False)
class SocketByteStream:
    """:class:`ByteStream` over a connected non-blocking TCP socket, on asyncio and trio.

    Why not anyio's socket stream, which :class:`AnyioByteStream` wraps (and TLS still
    uses): on asyncio its ``send`` yields to the event loop once even when the socket
    took every byte, and its ``receive`` re-registers the socket with the selector around
    every wait; a request and its response cost three extra loop turns and four
    ``epoll_ctl`` calls. Here a write that the socket takes at once returns without
    yielding, and a read waits (``anyio.wait_readable``) only when nothing is there.
    """

    sock: socket.socket
    """The socket (owned: closed by :meth:`aclose`)."""
    label: str = ""
    """Peer description for error messages."""
    _closed: bool = False
    _reading: tuple[asyncio.AbstractEventLoop, int] | None = None

    async def read(self, max_bytes: int = READ_CHUNK_BYTES) -> bytes:
        """See :meth:`ByteStream.read`."""
        with map_io_errors(f"read from {self.label}"):
            while True:
                if self._closed:
                    raise JetConnectionError(f"read from {self.label}: closed")
                try:
                    return self.sock.recv(max_bytes)
                except (BlockingIOError, InterruptedError):
                    await anyio.wait_readable(self.sock)

    async def write(self, data: bytes | memoryview) -> None:
        """See :meth:`ByteStream.write`."""
        view = memoryview(data).cast("B")
        with map_io_errors(f"write to {self.label}"):
            while view:
                if self._closed:
                    raise JetConnectionError(f"write to {self.label}: closed")
                try:
                    sent = self.sock.send(view)
                except (BlockingIOError, InterruptedError):
                    await anyio.wait_writable(self.sock)
                    continue
                view = view[sent:]

    async def write_gathered(self, buffers: Sequence[bytes | memoryview]) -> None:
        """:meth:`write` of ``buffers`` back to back, in gathered sends (sendmsg, at most
        GATHER_MAX_BUFFERS buffers a send): the rest of a request frame in parts (a head
        and its values) goes out in as many sends as the socket needs, not one a part."""
        views = [memoryview(b) for b in buffers]
        at = 0  # views[:at] are sent
        with map_io_errors(f"write to {self.label}"):
            while at < len(views):
                if self._closed:
                    raise JetConnectionError(f"write to {self.label}: closed")
                try:
                    sent = self.sock.sendmsg(views[at : at + GATHER_MAX_BUFFERS])
                except (BlockingIOError, InterruptedError):
                    await anyio.wait_writable(self.sock)
                    continue
                while sent:
                    size = len(views[at])
                    if sent < size:
                        views[at] = views[at][sent:]
                        break
                    sent -= size
                    at += 1
                while at < len(views) and not views[at]:
                    at += 1

    def write_now(self, data: bytes) -> int:
        """Send what the socket takes of ``data`` now, without waiting; return how many
        bytes that was (0 if it takes none now: write the rest with :meth:`write`).

        Raises:
            JetConnectionError: the stream broke or is closed.
        """
        return self._send_now(self.sock.send, data)

    def write_gathered_now(self, buffers: Sequence[bytes | memoryview]) -> int:
        """:meth:`write_now` of ``buffers`` back to back, in one gathered send (sendmsg):
        a frame header and a large body go out without being joined into one copy.

        Raises:
            JetConnectionError: the stream broke or is closed.
        """
        return self._send_now(self.sock.sendmsg, buffers)

    def _send_now(self, send: Callable[[_Sent], int], data: _Sent) -> int:
        """``send(data)`` on the open socket: the bytes it took, 0 if it takes none now.

        Once per request: no context manager (:func:`map_io_errors`) and no message built
        unless it fails."""
        if self._closed:
            raise JetConnectionError(f"write to {self.label}: closed")
        try:
            return send(data)
        except (BlockingIOError, InterruptedError):
            return 0
        except OSError as exc:
            raise _io_error(f"write to {self.label}", exc) from exc

    def _start_reading(
        self,
        loop: asyncio.AbstractEventLoop,
        on_data: Callable[[bytes | int], None],
        on_error: Callable[[JetConnectionError], None],
        place: Place | None = None,
    ) -> None:
        """asyncio only: call ``on_data`` from the event loop with the bytes of each read
        (``b""`` once, at end of stream), or with the count of bytes received into the
        view ``place`` gave (when it gave one), or ``on_error`` once if the socket breaks,
        until :meth:`_stop_reading` or :meth:`aclose`; instead of :meth:`read`.

        The socket stays registered with the selector meanwhile, so a response is handled
        in the loop turn that sees it: :meth:`read` re-registers around each wait and
        wakes its task one turn later.
        """
        fd = self.sock.fileno()
        sock = self.sock
        ask = READ_CHUNK_BYTES

        def readable() -> None:
            nonlocal ask
            target = place() if place is not None else None
            try:
                data: bytes | int = sock.recv(ask) if target is None else sock.recv_into(target)
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                self._stop_reading()
                on_error(JetConnectionError(f"read from {self.label}: {exc}"))
                return
            ask = READ_CHUNK_BYTES if target is None else HEAD_READ_BYTES
            if not data:
                data = b""
                self._stop_reading()
            on_data(data)

        self._reading = (loop, fd)
        loop.add_reader(fd, readable)

    def _stop_reading(self) -> None:
        """Undo :meth:`_start_reading` (idempotent)."""
        if self._reading is not None:
            loop, fd = self._reading
            self._reading = None
            loop.remove_reader(fd)

    async def deliver_to(
        self, on_data: Callable[[bytes | int], None], place: Place | None = None
    ) -> None:
        """:func:`receive_into` for this stream: on asyncio, ``on_data`` runs in the reader
        callback (:meth:`_start_reading`), in the loop turn that sees the bytes, one turn
        earlier than a reading task, and bytes go where ``place`` says; elsewhere (trio) a
        loop of :meth:`read`."""
        loop = running_asyncio_loop()
        if loop is None:
            await _read_into(self, on_data)
            return
        ended: asyncio.Future[Exception | None] = loop.create_future()

        def on_chunk(data: bytes | int) -> None:
            if ended.done():
                return
            try:
                on_data(data)
            except Exception as exc:  # raised by deliver_to, as a reading loop would
                self._stop_reading()
                ended.set_result(exc)
                return
            if not data:
                ended.set_result(None)

        def on_error(exc: JetConnectionError) -> None:
            if not ended.done():
                ended.set_result(exc)

        self._start_reading(loop, on_chunk, on_error, place)
        try:
            error = await ended
        finally:
            self._stop_reading()
        if error is not None:
            raise error

    async def aclose(self) -> None:
        """See :meth:`ByteStream.aclose`."""
        # No checkpoint: closing must complete inside a cancelled scope too.
        if not self._closed:
            self._stop_reading()
            self._closed = True
            anyio.notify_closing(self.sock)  # wakes a task waiting to read or write
            self.sock.close()


async def receive_into(
    stream: ByteStream, on_data: Callable[[bytes | int], None], place: Place | None = None
) -> None:
    """Pass each chunk ``stream`` receives to ``on_data``, then ``b""`` once at the end of
    the stream, and return: the one way a connection reads. How the chunks arrive is the
    stream's business: a :class:`SocketByteStream` delivers them itself
    (:meth:`SocketByteStream.deliver_to`), any other ByteStream is read in a loop.

    With ``place``, whenever it gives a view, a SocketByteStream on asyncio receives the
    next bytes into it (``recv_into``: a large frame's body is not received in chunks to
    be joined) and passes ``on_data`` their count, an ``int``; other streams pass bytes.

    Raises:
        JetConnectionError: the stream broke.
        Exception: whatever ``on_data`` raised (nothing more is read).
    """
    if isinstance(stream, SocketByteStream):
        await stream.deliver_to(on_data, place)
    else:
        await _read_into(stream, on_data)


async def _read_into(stream: ByteStream, on_data: Callable[[bytes | int], None]) -> None:
    while True:
        data = await stream.read(READ_CHUNK_BYTES)
        on_data(data)
        if not data:
            return


def running_asyncio_loop() -> asyncio.AbstractEventLoop | None:
    """The running asyncio event loop; None under another one (trio)."""
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


Dialer = Callable[[Address, float], Awaitable[ByteStream]]
"""Opens a ByteStream to an address within a timeout (seconds); raises JetConnectionError."""


async def tcp_dialer(address: Address, timeout: float) -> ByteStream:
    """Open a TCP connection (TCP_NODELAY on) to ``address`` within ``timeout`` seconds.

    Raises:
        JetConnectionError: refused, unreachable, or not connected in time.
    """
    try:
        with anyio.fail_after(timeout), map_io_errors(f"connect to {address}"):
            stream = await anyio.connect_tcp(address.host, address.port)
    except TimeoutError:
        raise JetConnectionError(f"connect to {address}: timed out after {timeout}s") from None
    # Take the connected socket over (anyio set TCP_NODELAY); the stream object is dropped
    # without closing it, since that would close the socket.
    try:
        raw = stream.extra(anyio.abc.SocketAttribute.raw_socket)
        sock = raw.dup()
    except (AttributeError, OSError) as exc:
        # The peer reset the connection as soon as it was made (a server stopping): the
        # transport has let its socket go, and anyio's attribute look-up fails on it.
        await AnyioByteStream(stream).aclose()
        raise JetConnectionError(f"connect to {address}: closed at once ({exc})") from None
    await AnyioByteStream(stream).aclose()
    sock.setblocking(False)
    return SocketByteStream(sock, label=str(address))
