"""Test kit: in-memory byte streams, a frame-speaking peer and an in-memory network.

These let SDK code (and your application's tests) run the real connection and client logic
without sockets::

    async with anyio.create_task_group() as tg:
        net = MemoryNetwork(tg)
        net.listen("s1:9292", my_handler)          # async def my_handler(peer: FramePeer)
        async with Client(["s1:9292"], dialer=net.dial) as client:
            ...

:class:`FramePeer` is the server side of one connection: receive request frames, answer
them (in any order), or send raw bytes to exercise error paths.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import anyio
import anyio.abc
import anyio.lowlevel
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from jetsdk.codec.error_codes import ErrorCode
from jetsdk.codec.frames import FLAG_ERROR, FLAG_RESPONSE, Frame, FrameDecoder, encode_frame
from jetsdk.codec.messages import decode_json, encode_error, encode_json
from jetsdk.errors import JetConnectionError
from jetsdk.transport import READ_CHUNK_BYTES, Address, ByteStream, parse_address

__all__ = ["FramePeer", "MemoryByteStream", "MemoryNetwork", "memory_stream_pair"]


class MemoryByteStream:
    """One end of an in-memory byte pipe (implements :class:`~jetsdk.transport.ByteStream`)."""

    def __init__(
        self, send: MemoryObjectSendStream[bytes], receive: MemoryObjectReceiveStream[bytes]
    ) -> None:
        self._send = send
        self._receive = receive
        self._leftover = b""

    async def read(self, max_bytes: int = READ_CHUNK_BYTES) -> bytes:
        """Up to ``max_bytes`` bytes; ``b""`` after the peer closed."""
        if not self._leftover:
            try:
                self._leftover = await self._receive.receive()
            except (anyio.EndOfStream, anyio.ClosedResourceError):
                return b""
        data, self._leftover = self._leftover[:max_bytes], self._leftover[max_bytes:]
        return data

    async def write(self, data: bytes | memoryview) -> None:
        """Send all of ``data``; JetConnectionError if the peer closed."""
        try:
            await self._send.send(bytes(data))
        except (anyio.BrokenResourceError, anyio.ClosedResourceError) as exc:
            raise JetConnectionError("in-memory peer closed") from exc

    async def aclose(self) -> None:
        """Close both directions (idempotent)."""
        self._send.close()
        self._receive.close()


def memory_stream_pair(
    max_buffered_chunks: float = math.inf,
) -> tuple[MemoryByteStream, MemoryByteStream]:
    """Two connected in-memory byte streams (what one writes, the other reads)."""
    a_send, b_receive = anyio.create_memory_object_stream[bytes](max_buffered_chunks)
    b_send, a_receive = anyio.create_memory_object_stream[bytes](max_buffered_chunks)
    return MemoryByteStream(a_send, a_receive), MemoryByteStream(b_send, b_receive)


class FramePeer:
    """The server side of one in-memory connection, speaking frames."""

    def __init__(self, stream: ByteStream, *, label: str = "") -> None:
        self.stream = stream
        self.label = label
        self._decoder = FrameDecoder()

    async def receive(self) -> Frame | None:
        """The next request frame, or None once the client closed."""
        while True:
            frame = self._decoder.next_frame()
            if frame is not None:
                return frame
            data = await self.stream.read()
            if not data:
                return None
            self._decoder.feed(data)

    async def respond(self, request: Frame, body: bytes) -> None:
        """Send a success response to ``request``."""
        await self.stream.write(
            encode_frame(request.api, request.correlation_id, body, flags=FLAG_RESPONSE)
        )

    async def respond_json(self, request: Frame, obj: Mapping[str, Any]) -> None:
        """Send a JSON success response to ``request``."""
        await self.respond(request, encode_json(obj))

    async def respond_error(
        self,
        request: Frame,
        code: ErrorCode,
        message: str = "",
        details: Mapping[str, Any] | None = None,
    ) -> None:
        """Send an error response to ``request``."""
        await self.stream.write(
            encode_frame(
                request.api,
                request.correlation_id,
                encode_error(code, message, details),
                flags=FLAG_RESPONSE | FLAG_ERROR,
            )
        )

    @staticmethod
    def json_body(frame: Frame) -> dict[str, Any]:
        """Decode a JSON request body."""
        return decode_json(frame.body)

    async def aclose(self) -> None:
        """Close the connection from the server side."""
        await self.stream.aclose()


PeerHandler = Callable[[FramePeer], Awaitable[None]]
"""Serves one in-memory connection; returns (or the peer is closed) when done."""


class MemoryNetwork:
    """Addresses served by in-memory handlers; :meth:`dial` is a :data:`~jetsdk.transport.Dialer`.

    Each dialled connection runs its handler in the task group given at construction.
    """

    def __init__(self, task_group: anyio.abc.TaskGroup) -> None:
        self._task_group = task_group
        self._handlers: dict[Address, PeerHandler] = {}
        self.dial_count: dict[Address, int] = {}
        """How many connections were opened to each address."""

    def listen(self, address: str, handler: PeerHandler) -> None:
        """Serve ``address`` with ``handler`` (one call per connection)."""
        self._handlers[parse_address(address)] = handler

    def stop(self, address: str) -> None:
        """Stop accepting connections on ``address`` (existing ones stay up)."""
        self._handlers.pop(parse_address(address), None)

    async def dial(self, address: Address, timeout: float) -> ByteStream:
        """Connect to an in-memory server; JetConnectionError if nothing listens there."""
        await anyio.lowlevel.checkpoint()
        handler = self._handlers.get(address)
        if handler is None:
            raise JetConnectionError(f"connect to {address}: connection refused")
        self.dial_count[address] = self.dial_count.get(address, 0) + 1
        client, server = memory_stream_pair()
        peer = FramePeer(server, label=str(address))

        async def serve() -> None:
            try:
                await handler(peer)
            finally:
                await peer.aclose()

        self._task_group.start_soon(serve)
        return client
