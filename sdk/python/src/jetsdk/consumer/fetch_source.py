"""Where one partition's fetch loop gets its Fetch answers: FetchStream requests (api 18)
to a leader that has them, else one Fetch long poll per answer.

A FetchStream (spec/protocol.md, "18 FetchStream") is one request answered each time
records are committed: a tailing consumer sends one request per :func:`stream_responses`
answers instead of one per answer, and the server saves a read, a frame parse, a request
task and a park per message. The stream continues where each answer's records end, which
is where the fetch loop continues too; a different ``max_bytes`` (a partial record asked
again whole), a seek (a new run: the loop is cancelled) or an error ends it, and the next
:meth:`FetchSource.next` opens another from the offset the loop asks for. A stream nobody
takes any more is ended on the server by a CancelFetchStream (api 19, where Hello lists
it: :meth:`jetsdk.connection.Connection.send_stream`'s streams do so when closed early);
responses already on their way are dropped by the connection as they arrive.

Memory: a stream asks for at most ``STREAM_BUFFER_BYTES`` of answers (:func:`stream_shape`:
many small ones at the tail, a few of ``max_bytes`` while catching up), so what the
connection receives ahead of the application stays within it; should it not (a record
larger than the answers' bound), the stream stops by itself there and the rest of its
answers are dropped as they arrive.

Read replicas (``read_replicas``) and servers whose Hello does not list api 18 get Fetch.
"""

from __future__ import annotations

from collections.abc import Callable

import attrs

from jetsdk.client import Client
from jetsdk.client_requests import decode_fetch_answer
from jetsdk.codec.fetch_stream import (
    MAX_FETCH_STREAM_RESPONSES,
    FetchStreamRequest,
    encode_fetch_stream_request,
)
from jetsdk.codec.frames import Api
from jetsdk.codec.messages import FetchResponseHeader
from jetsdk.errors import JetError
from jetsdk.group.stream_partition import StreamPartition
from jetsdk.pending_stream import Body, PendingStream
from jetsdk.retry import needs_metadata_refresh

__all__ = ["STREAM_BUFFER_BYTES", "FetchSource", "stream_shape"]

STREAM_BUFFER_BYTES = 8 * 1024 * 1024
"""Bound on the answers of one partition's stream received and not yet taken."""
TAILING_RESPONSES = 64
"""Answers a stream asks for after small answers (a consumer at the tail of its
partition: one request per this many messages at light load), each of at most
``STREAM_BUFFER_BYTES // TAILING_RESPONSES`` bytes (128 KiB)."""


def stream_shape(max_bytes: int, tailing: bool) -> tuple[int, int]:
    """How many answers a stream asks for, and the ``max_bytes`` of each: at the tail
    TAILING_RESPONSES small ones, else as many answers of ``max_bytes`` as
    STREAM_BUFFER_BYTES holds (at least 2)."""
    max_bytes = max(max_bytes, 1)
    if tailing:
        return TAILING_RESPONSES, min(max_bytes, STREAM_BUFFER_BYTES // TAILING_RESPONSES)
    count = STREAM_BUFFER_BYTES // max_bytes
    return max(2, min(MAX_FETCH_STREAM_RESPONSES, count)), max_bytes


@attrs.define(eq=False)
class FetchSource:
    """The Fetch answers of one partition, in order (one fetch loop's): from ``key``'s
    leader through ``client``, each Fetch waiting up to ``max_wait`` (a stream's idle
    expiry); with ``read_replicas``, Fetch from an in-sync follower."""

    client: Client
    key: StreamPartition
    max_wait: float
    read_replicas: bool = False
    take: Callable[[FetchResponseHeader, memoryview], bool] | None = None
    """The fetch loop's taker of an open stream's answers in the connection reader's
    turn, while :meth:`next` waits with none queued (:attr:`PendingStream.on_answer`): a
    tailing consumer's records reach the application without a wake-up of the loop's
    task. True: taken (the loop's position moved past them); False: :meth:`next`
    returns the answer as usual."""
    _pending: PendingStream | None = None
    _limit: int = 0
    """The ``max_bytes`` the loop asked for when the open stream was sent."""
    _answer_bytes: int = 0
    """The ``max_bytes`` of each answer of the open stream (its request's)."""
    _tailing: bool = False
    """The last answer was under half its bound: the next stream is a tailing one. False
    at first: a consumer starting behind (from offset 0, say) reads its first stream in
    answers of ``max_bytes``, not in the tail's small ones (a tailing consumer's first
    small answer makes its next stream a tailing one)."""
    _offset: int = 0
    """The offset :meth:`next` was asked for (the messages of an error taken now)."""
    _stale: bool = False
    """The last error said the leader may have moved: refresh the metadata first."""
    streams_opened: int = 0
    """FetchStream requests sent (tests and measurements)."""

    @property
    def streaming(self) -> bool:
        """True while a stream is open whose later answers the next :meth:`next` takes (no
        request is written for it)."""
        return self._pending is not None

    async def next(self, offset: int, max_bytes: int) -> tuple[FetchResponseHeader, memoryview]:
        """The next answer from ``offset`` (the offset after the records of the previous
        answer, or a new position).

        Raises:
            OffsetOutOfRange: as :meth:`Client.fetch`.
            JetError: the server's or the connection's error (the stream ends).
        """
        stream, partition = self.key
        pending = self._pending
        if pending is not None and (pending.finished or max_bytes != self._limit):
            self.close()
            pending = None
        try:
            if pending is None:
                if self._stale:
                    await self.client.metadata(refresh=True)
                    self._stale = False
                pending = await self._open(offset, max_bytes)
                if pending is None:
                    return await self.client.fetch(
                        stream,
                        partition,
                        offset,
                        max_bytes=max_bytes,
                        max_wait=self.max_wait,
                        read_replicas=self.read_replicas,
                    )
            if self.take is not None:
                self._offset = offset
                pending.on_answer = self._take_now
            try:
                body, more = await pending.next(self.max_wait + self.client.request_timeout)
            finally:
                pending.on_answer = None
        except JetError as exc:
            self.close()
            self._stale = needs_metadata_refresh(exc)
            raise
        if not more:
            self._pending = None
        header, raw = decode_fetch_answer(body, stream, partition, offset)
        self._tailing = header.records_len < self._answer_bytes // 2 and not pending.cut
        return header, raw

    def _take_now(self, body: Body) -> bool:
        """:attr:`PendingStream.on_answer` of the open stream: a plain answer's header and
        records to :attr:`take` (an error code, an undecodable answer, or anything the
        taker raises: left to :meth:`next`, which raises it in the loop's task)."""
        assert self.take is not None
        try:
            header, raw = decode_fetch_answer(body, *self.key, self._offset)
            self._tailing = header.records_len < self._answer_bytes // 2
            return self.take(header, raw)
        except Exception:
            return False

    async def _open(self, offset: int, max_bytes: int) -> PendingStream | None:
        """Send a FetchStream from ``offset``; None if the leader does not serve it."""
        if self.read_replicas:
            return None
        conn = await self.client.leader_connection(*self.key)
        if not conn.serves(Api.FETCH_STREAM):
            return None
        responses, answer_bytes = stream_shape(max_bytes, self._tailing)
        wait_ms = max(0, int(self.max_wait * 1000))
        request = FetchStreamRequest(
            self.key.stream, self.key.partition, offset, answer_bytes, wait_ms, responses
        )
        body = encode_fetch_stream_request(request)
        self._pending = await conn.send_stream(
            Api.FETCH_STREAM, body, max_buffered_bytes=STREAM_BUFFER_BYTES
        )
        self._limit, self._answer_bytes = max_bytes, answer_bytes
        self.streams_opened += 1
        return self._pending

    def close(self) -> None:
        """Drop the open stream's remaining answers (a seek, a close, an error)."""
        pending, self._pending = self._pending, None
        if pending is not None:
            pending.close()
