"""Client-side marks of the SDK's connection for the hop benchmarks (``bench latency``,
``bench tail``): when it is asked to write a Produce (``write``: the request is about to
go, in the caller's task or after its turn) and when it decoded a Produce or Fetch
response (``got.produce`` / ``got.fetch``). ``perf_counter_ns``, as the server's marks;
and :func:`consume_timed`, their consumer loop."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import anyio

from jetsdk import Consumer, Message
from jetsdk.codec.frames import Api
from jetsdk.connection import Connection, PendingResponse


@contextmanager
def sdk_marks(marks: dict[str, list[int]]) -> Iterator[None]:
    """Record the marks into ``marks`` while the block runs (every connection of this
    process), then restore the SDK's methods."""
    original = Connection.send
    original_nowait = Connection.send_nowait
    original_resolve = PendingResponse._resolve

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
    try:
        yield
    finally:
        Connection.send = original  # type: ignore[method-assign]
        Connection.send_nowait = original_nowait  # type: ignore[method-assign]
        PendingResponse._resolve = original_resolve  # type: ignore[method-assign]


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
