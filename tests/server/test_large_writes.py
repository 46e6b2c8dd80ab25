"""Large writes leave the event loop (jetserver.storage.fsync_runner, ``append_large``): a
Produce request of a few large records is written to its segment from a worker thread, so
that the loop serves other requests while the write waits (ext4 holds a write behind an
fsync of the same file). In order, one write per partition at a time, the LEO moved only
after the write returned; a failed write is answered STORAGE_ERROR and cut back.

An in-process server; the segment's write is wrapped to wait at a gate (bounded) or to
fail, as a slow or failing disk would.
"""

from __future__ import annotations

import errno
import threading
from collections.abc import Callable

import anyio
import pytest

from jetsdk.codec.error_codes import AckPolicy, ErrorCode
from jetsdk.codec.frames import Api
from jetsdk.codec.messages import ProduceMessage, ProduceRequest, encode_produce_request
from jetsdk.codec.messages import decode_produce_response as decode
from jetserver.server import Server
from jetserver.storage import fsync_runner
from jetserver.storage import segment as segment_module
from support.raw_client import RawClient

pytestmark = pytest.mark.anyio

GATE_S = 3.0
"""Most a gated write waits (the test opens the gate long before, unless the write held
the event loop: then nothing else could open it)."""
SIZE = fsync_runner.LARGE_WRITE_BYTES + 1000


def value(i: int) -> bytes:
    return b"%06d" % i + bytes([i % 251]) * (SIZE - 6)


def wrap_large_writes(
    monkeypatch: pytest.MonkeyPatch, around: Callable[[Callable[[], None]], None]
) -> None:
    """Segment writes of large batches go through ``around(write)``; small ones as usual."""
    real = segment_module.write_all

    def write_all(fd: int, data: bytes | memoryview | list[bytes | memoryview], at: int) -> None:
        size = sum(map(len, data)) if isinstance(data, list) else len(data)
        if size < fsync_runner.LARGE_WRITE_BYTES:
            real(fd, data, at)
            return
        around(lambda: real(fd, data, at))

    monkeypatch.setattr(segment_module, "write_all", write_all)


async def test_the_loop_serves_other_requests_while_a_large_write_waits(
    jet: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A large ALL-acked value's write waits at a gate: meanwhile a small Produce to another
    stream is answered. Failed before (the write on the loop): nothing was answered until
    the gate gave up after GATE_S, the large write had returned first."""
    held, gate, released = threading.Event(), threading.Event(), threading.Event()

    def gated(write: Callable[[], None]) -> None:
        held.set()
        gate.wait(GATE_S)
        write()
        released.set()

    async with (
        await RawClient.connect(jet.address) as big,
        await RawClient.connect(jet.address) as small,
    ):
        await big.create_stream(name="big", subject="big.x")
        await small.create_stream(name="small", subject="small.x")
        runner = jet.streams.replica("big", 0).committer.fsyncs
        threads_before = runner.thread_large_writes
        wrap_large_writes(monkeypatch, gated)
        answers: list[int] = []
        try:
            async with anyio.create_task_group() as tg:

                async def produce_big() -> None:
                    results = await big.produce(
                        "big", 0, [ProduceMessage(value(1))], ack_policy=AckPolicy.ALL
                    )
                    answers.extend((results[0].error_code, results[0].offset))

                tg.start_soon(produce_big)
                with anyio.fail_after(GATE_S):
                    while not held.is_set():  # noqa: ASYNC110 - a thread's event
                        await anyio.sleep(0.005)
                    results = await small.produce(
                        "small", 0, [ProduceMessage(b"s")], ack_policy=AckPolicy.ALL
                    )
                written_meanwhile = released.is_set()
                gate.set()
        finally:
            gate.set()
        assert [r.error_code for r in results] == [ErrorCode.NONE]
        assert not written_meanwhile, "the small request waited for the large write"
        assert answers == [ErrorCode.NONE, 0]
        assert runner.thread_large_writes == threads_before + 1
        records = await big.fetch_all("big")
        assert [(r.offset, r.value) for r in records] == [(0, value(1))]


async def test_pipelined_large_writes_are_stored_in_order(
    jet: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Eight pipelined large requests (each write slowed): one write at a time, each at
    the LEO the one before left; every request acked at its own offset, in order."""

    def slowed(write: Callable[[], None]) -> None:
        threading.Event().wait(0.01)
        write()

    async with await RawClient.connect(jet.address) as c:
        await c.create_stream(name="big", subject="big.x")
        wrap_large_writes(monkeypatch, slowed)
        bodies = [
            encode_produce_request(
                ProduceRequest("big", 0, AckPolicy.ALL, 20_000, (ProduceMessage(value(i)),))
            )
            for i in range(8)
        ]
        frames = await c.pipeline([(Api.PRODUCE, b) for b in bodies], timeout_s=20.0)
        answers = [decode(frames[cid].body)[0] for cid in sorted(frames)]
        assert [(a.error_code, a.offset) for a in answers] == [
            (ErrorCode.NONE, i) for i in range(8)
        ]
        records = await c.fetch_all("big")
        assert [r.value for r in records] == [value(i) for i in range(8)]
        replica = jet.streams.replica("big", 0)
        assert replica.log.log_end_offset == replica.log.flushed_offset == 8


async def test_a_failed_large_write_is_answered_and_cut_back(
    jet: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first large write fails with EIO in its worker thread: its request is answered
    STORAGE_ERROR, the segment file is cut back to its size before (nothing appended), and
    the next large request is stored at offset 0."""
    failures = [OSError(errno.EIO, "injected write error")]

    def failing(write: Callable[[], None]) -> None:
        if failures:
            write()  # the bytes reach the file; the error comes after them (a short write)
            raise failures.pop()
        write()

    async with await RawClient.connect(jet.address) as c:
        await c.create_stream(name="big", subject="big.x")
        wrap_large_writes(monkeypatch, failing)
        replica = jet.streams.replica("big", 0)
        first = await c.produce("big", 0, [ProduceMessage(value(1))], ack_policy=AckPolicy.ALL)
        assert [r.error_code for r in first] == [ErrorCode.STORAGE_ERROR]
        assert replica.log.log_end_offset == 0
        segment = replica.log.directory / "00000000000000000000.log"
        assert segment.stat().st_size == 0  # cut back: the bytes written are gone
        second = await c.produce("big", 0, [ProduceMessage(value(2))], ack_policy=AckPolicy.ALL)
        assert [(r.error_code, r.offset) for r in second] == [(ErrorCode.NONE, 0)]
        records = await c.fetch_all("big")
        assert [(r.offset, r.value) for r in records] == [(0, value(2))]
