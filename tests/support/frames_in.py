"""The frames a peer sends on a connection, for the fake servers of the tests."""

from __future__ import annotations

from collections.abc import AsyncIterator

import anyio
import anyio.abc

from jetsdk.codec.frames import FLAG_RESPONSE, Api, Frame, FrameDecoder, encode_frame
from jetsdk.codec.replica_fetch import (
    ReplicaFetchAnswer,
    ReplicaFetchRequest,
    decode_replica_fetch_request,
    encode_replica_fetch_response,
)


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


async def replica_fetches(
    conn: anyio.abc.ByteReceiveStream,
) -> AsyncIterator[tuple[Frame, ReplicaFetchRequest]]:
    """Each ReplicaFetch request received on ``conn`` with its frame, in order, until the
    peer closes it: what a fake leader answers. Other frames and wakes (which ask for no
    answer) are passed over."""
    async for frame in frames_from(conn):
        if frame.api != Api.REPLICA_FETCH:
            continue
        req = decode_replica_fetch_request(frame.body)
        if not req.wake:
            yield frame, req


def replica_fetch_reply(frame: Frame, answers: list[ReplicaFetchAnswer]) -> bytes:
    """The response frame to the ReplicaFetch request ``frame``, carrying ``answers``."""
    body = encode_replica_fetch_response(answers)
    return encode_frame(frame.api, frame.correlation_id, body, flags=FLAG_RESPONSE)
