"""The frames a peer sends on a connection, for the fake servers of the tests."""

from __future__ import annotations

from collections.abc import AsyncIterator

import anyio
import anyio.abc

from jetsdk.codec.frames import Frame, FrameDecoder


async def frames_from(conn: anyio.abc.ByteReceiveStream) -> AsyncIterator[Frame]:
    """Each frame received on ``conn``, in order, until the peer closes it."""
    decoder = FrameDecoder()
    while True:
        try:
            data = await conn.receive()
        except (anyio.EndOfStream, anyio.BrokenResourceError):
            return
        decoder.feed(data)
        while (frame := decoder.next_frame()) is not None:
            yield frame
