"""Sending a reply's bytes and its record slices: what a socket takes at once, then the
rest (``os.sendfile`` for file slices from ``sendfile_min_bytes`` on, else read and sent).

Task safety: one writer at a time per socket (the connection's write lock).
"""

from __future__ import annotations

import anyio

from jetserver.protocol.socket_io import SocketIO
from jetserver.storage import ReadSlice
from jetserver.storage.read_slice import READ_INLINE_MAX_BYTES

__all__ = ["READ_AT_ONCE_MAX_BYTES", "send_at_once", "send_rest"]

READ_AT_ONCE_MAX_BYTES = 64 * 1024
"""A Fetch answer whose records are one slice of at most this many bytes, in memory or
below the sendfile threshold, goes out with its head in one ``send`` when the socket takes
it (a tailing consumer's answer); bigger or split ones go through
:func:`send_rest`."""


def send_at_once(
    io: SocketIO, data: bytes, parts: tuple[ReadSlice, ...], sendfile_min_bytes: int
) -> tuple[bytes | memoryview, int] | None:
    """Send what the socket takes of a reply now: None if all of it went, else what
    is left of ``data`` and how many bytes of the first slice went (sendfile)."""
    if not parts:
        sent = io.send_now(data)
        return None if sent == len(data) else (memoryview(data)[sent:], 0)
    first = parts[0]
    in_memory = first.data is not None
    if in_memory or first.length < sendfile_min_bytes:
        if len(parts) > 1 or first.length > READ_AT_ONCE_MAX_BYTES:
            return data, 0
        # One small slice (a tailing consumer's answer, usually in memory: the last
        # append): head and records in one system call, no lock and no timed wait.
        whole = data + first.read_bytes()
        sent = io.send_now(whole)
        if sent == len(whole):
            return None
        # The rest goes as bytes: nothing of the slice is left to send from the file.
        return memoryview(whole)[sent:], first.length
    sent = io.send_now(data, more=True)
    if sent < len(data):
        return memoryview(data)[sent:], 0
    file_done = io.sendfile_now(first.fileno, first.position, first.length)
    if file_done == first.length and len(parts) == 1:
        return None
    return b"", file_done


async def send_rest(
    io: SocketIO,
    data: bytes | memoryview,
    parts: tuple[ReadSlice, ...],
    file_done: int,
    sendfile_min_bytes: int,
) -> None:
    """Send what is left of a reply: ``data``, then each slice from ``file_done`` bytes
    into the first (sendfile from ``sendfile_min_bytes`` on, else pread + send)."""
    pending = data
    for i, part in enumerate(parts):
        skip = file_done if i == 0 else 0
        if part.length - skip <= 0:
            continue
        if part.data is None and part.length >= sendfile_min_bytes:
            if pending:
                await io.send_all(pending, more=True)
                pending = b""
            await io.sendfile(part.fileno, part.position + skip, part.length - skip)
        else:
            if part.length <= READ_INLINE_MAX_BYTES:
                chunk = part.read_bytes()
            else:
                chunk = await anyio.to_thread.run_sync(part.read_bytes)
            await io.send_buffers([b for b in (pending, chunk) if b])
            pending = b""
    if pending:
        await io.send_all(pending)
