"""Client-side marks of the SDK's connection for the hop benchmarks (``bench latency``,
``bench tail``): when it is asked to write a Produce (``write``: the request is about to
go, in the caller's task or after its turn) and when it decoded a Produce or Fetch
response (``got.produce`` / ``got.fetch``); of the consumer's FetchStreams, when one is
sent (``stream.open``), granted more answers (``stream.grant``), gives its first answer
(``stream.first``) and its last (``stream.end``). ``perf_counter_ns``, as the server's
marks; and :func:`consume_timed`, their consumer loop."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import anyio

from jetsdk import Consumer, Message
from jetsdk.codec.frames import Api
from jetsdk.connection import Connection, PendingResponse
from jetsdk.pending_stream import Body, PendingStream


@contextmanager
def sdk_marks(marks: dict[str, list[int]]) -> Iterator[None]:
    """Record the marks into ``marks`` while the block runs (every connection of this
    process), then restore the SDK's methods."""
    original = Connection.send
    original_nowait = Connection.send_nowait
    original_resolve = PendingResponse._resolve
    original_stream = Connection.send_stream
    original_grant = Connection.grant_stream
    original_push = PendingStream._push
    fresh: dict[int, PendingStream] = {}  # streams sent, no answer yet (held: ids unique)

    async def marked_stream(self: Connection, api: int, body: bytes, **kw: int) -> PendingStream:
        marks["stream.open"].append(time.perf_counter_ns())
        stream = await original_stream(self, api, body, **kw)
        fresh[id(stream)] = stream
        return stream

    def marked_grant(self: Connection, stream: PendingStream, more: int) -> bool:
        granted = original_grant(self, stream, more)
        if granted:
            marks["stream.grant"].append(time.perf_counter_ns())
        return granted

    def marked_push(self: PendingStream, body: Body | None, error: object, more: bool) -> None:
        if fresh.pop(id(self), None) is not None:
            marks["stream.first"].append(time.perf_counter_ns())
        if not more:
            marks["stream.end"].append(time.perf_counter_ns())
        original_push(self, body, error, more)  # type: ignore[arg-type]

    async def marked_send(self: Connection, api: int, body: bytes) -> PendingResponse:
        if api == Api.PRODUCE:
            marks["write"].append(time.perf_counter_ns())
        return await original(self, api, body)

    def marked_send_nowait(self: Connection, api: int, body: bytes) -> PendingResponse | None:
        # The producer writes a request of an idle partition in the caller's task.
        if api == Api.PRODUCE:
            marks["write"].append(time.perf_counter_ns())
        return original_nowait(self, api, body)

    def marked_resolve(self: PendingResponse, body: bytes | None, error: object) -> None:
        if self.api in (Api.PRODUCE, Api.FETCH):
            kind = "got.produce" if self.api == Api.PRODUCE else "got.fetch"
            marks[kind].append(time.perf_counter_ns())
        original_resolve(self, body, error)  # type: ignore[arg-type]

    Connection.send = marked_send  # type: ignore[method-assign,assignment]
    Connection.send_nowait = marked_send_nowait  # type: ignore[method-assign,assignment]
    PendingResponse._resolve = marked_resolve  # type: ignore[method-assign,assignment]
    Connection.send_stream = marked_stream  # type: ignore[method-assign,assignment]
    Connection.grant_stream = marked_grant  # type: ignore[method-assign]
    PendingStream._push = marked_push  # type: ignore[method-assign]
    try:
        yield
    finally:
        Connection.send = original  # type: ignore[method-assign]
        Connection.send_nowait = original_nowait  # type: ignore[method-assign]
        PendingResponse._resolve = original_resolve  # type: ignore[method-assign]
        Connection.send_stream = original_stream  # type: ignore[method-assign]
        Connection.grant_stream = original_grant  # type: ignore[method-assign]
        PendingStream._push = original_push  # type: ignore[method-assign]


async def consume_timed(
    consumer: Consumer, total: int, timeout_s: float, on_batch: Callable[[int, list[Message]], None]
) -> None:
    """Fetch until ``total`` messages came (within ``timeout_s``), calling
    ``on_batch(now_ns, messages)`` for each batch as it arrives."""
    seen = 0
    with anyio.fail_after(timeout_s):
        while seen < total:
            got = await consumer.fetch(max_records=1000)
            on_batch(time.perf_counter_ns(), got)
            seen += len(got)
