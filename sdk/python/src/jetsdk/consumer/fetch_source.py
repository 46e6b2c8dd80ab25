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

A tailing stream (its answers small) is topped up rather than sent again: where the
server's Hello lists api 20, once half of its answers were taken it is granted as many
more (FetchStreamCredit, :meth:`jetsdk.connection.Connection.grant_stream`), so it goes on
without a gap between its last answer and the next request's arrival (a message committed
in that gap waited for a round trip and a fresh request's Fetch path). It stays within the
same bound: only answers taken are granted again. Against an older server, a stream that
is not tailing, or a grant that came too late (its last answer decided), the stream ends
at its last answer and :meth:`FetchSource.next` opens the next.

Read replicas (``read_replicas``) and servers whose Hello does not list api 18 get Fetch.
"""

from __future__ import annotations

from collections.abc import Callable

import attrs

from jetsdk.client import Client
from jetsdk.client_requests import decode_fetch_answer
from jetsdk.codec.fetch_messages import FetchResponseHeader
from jetsdk.codec.fetch_stream import (
    MAX_FETCH_STREAM_RESPONSES,
    FetchStreamRequest,
    encode_fetch_stream_request,
)
from jetsdk.codec.frames import Api
from jetsdk.connection import Connection
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
    _conn: Connection | None = None
    """The open stream's connection."""
    _responses: int = 0
    """The answers the open stream asked for (its credit)."""
    _granting: bool = False
    """The open stream is a tailing one and its server takes grants (api 20)."""
    _ungranted: int = 0
    """Answers of the open stream taken since it was sent or last granted more."""
    streams_opened: int = 0
    """FetchStream requests sent (tests and measurements)."""
    grants: int = 0
    """FetchStreamCredit requests sent (tests and measurements)."""

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
        if more:
            self._took(pending)
        return header, raw

    def _take_now(self, body: Body) -> bool:
        """:attr:`PendingStream.on_answer` of the open stream: a plain answer's header and
        records to :attr:`take` (an error code, an undecodable answer, or anything the
        taker raises: left to :meth:`next`, which raises it in the loop's task)."""
        assert self.take is not None
        try:
            header, raw = decode_fetch_answer(body, *self.key, self._offset)
            self._tailing = header.records_len < self._answer_bytes // 2
            if not self.take(header, raw):
                return False
        except Exception:
            return False
        if self._pending is not None:  # (on_answer is set only while it is open)
            self._took(self._pending)
        return True

    def _took(self, pending: PendingStream) -> None:
        """An answer of the open stream was taken and more follow: once half its credit
        was taken, grant as many more while it is a tailing stream (module doc)."""
        self._ungranted += 1
        if self._ungranted * 2 < self._responses or not (self._granting and self._tailing):
            return
        assert self._conn is not None
        if self._conn.grant_stream(pending, self._ungranted):
            self._ungranted = 0
            self.grants += 1

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
        self._conn, self._responses, self._ungranted = conn, responses, 0
        self._granting = self._tailing and conn.serves(Api.FETCH_STREAM_CREDIT)
        self.streams_opened += 1
        return self._pending

    def close(self) -> None:
        """Drop the open stream's remaining answers (a seek, a close, an error)."""
        pending, self._pending = self._pending, None
        if pending is not None:
            pending.close()
