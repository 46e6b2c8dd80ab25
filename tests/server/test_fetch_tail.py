"""A tailing consumer's FetchStream answer in one step (``FetchStream.next_tail``, and the
answers it pushes from the committing turn while parked) answers as the general path
(``next_answer`` -> ``fetch_from`` -> ``read_records``) does.

The same requests go to two identical streams, one served as always (the one-step answer
where it applies) and one with it switched off; every answer (flags, error code, HW, log
start, LEO, records length, the records) must be the same.
"""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from jetsdk.codec.fetch_messages import decode_fetch_response
from jetsdk.codec.fetch_stream import FetchStreamRequest, encode_fetch_stream_request
from jetsdk.codec.frames import Api, Frame, encode_frame
from jetsdk.codec.messages import (
    AckPolicy,
    ProduceMessage,
    ProduceRequest,
    decode_error,
    encode_produce_request,
)
from jetsdk.codec.record import iter_records
from jetserver.broker.fetch_stream import FetchStream
from jetserver.protocol.socket_io import SocketIO
from jetserver.server import Server
from jetserver.storage.segment import TAIL_MAX_BYTES
from support.one_step import OneStepSwitch
from support.raw_client import RawClient

pytestmark = pytest.mark.anyio

MAX_BYTES = 500
"""The request's ``max_bytes``: a message above it is answered alone, whole."""
APPENDS: list[list[ProduceMessage]] = [
    [ProduceMessage(b"a")],  # the first answer (general in both)
    [ProduceMessage(b"b")],
    [ProduceMessage(b"c"), ProduceMessage(b"d"), ProduceMessage(b"e")],  # one append, 3 records
    [ProduceMessage(b"k" * (MAX_BYTES + 100))],  # above max_bytes: alone
    [ProduceMessage(b"t" * (TAIL_MAX_BYTES + 100))],  # not kept in memory: from the file
    [ProduceMessage(b"with key", key=b"k", headers=(("h", b"1"),))],
    [ProduceMessage(b"f")],
    [ProduceMessage(b"g")],  # the last of max_responses
]


def _seen(frame: Frame) -> tuple[object, ...]:
    assert frame.api == Api.FETCH_STREAM
    assert not frame.is_error, decode_error(frame.body)
    header, raw = decode_fetch_response(frame.body)
    records = [(r.offset, r.key, r.value, r.headers) for r in iter_records(raw, verify=True)]
    return (frame.flags, len(frame.body), header, records)


async def _run(c: RawClient, producer: RawClient, stream: str, cid: int) -> list[object]:
    """A stream of ``len(APPENDS)`` answers, one append each; then one of 3 answers that
    runs out of idle time after its first."""
    req = FetchStreamRequest(stream, 0, 0, MAX_BYTES, 5_000, len(APPENDS))
    await c.send_raw(encode_frame(Api.FETCH_STREAM, cid, encode_fetch_stream_request(req)))
    seen: list[object] = []
    for messages in APPENDS:
        await producer.produce(stream, 0, messages)
        seen.append(_seen(await c.recv_frame()))
    end = sum(map(len, APPENDS))
    req = FetchStreamRequest(stream, 0, end, MAX_BYTES, 300, 3)
    await c.send_raw(encode_frame(Api.FETCH_STREAM, cid + 1, encode_fetch_stream_request(req)))
    await producer.produce(stream, 0, [ProduceMessage(b"h")])
    seen.append(_seen(await c.recv_frame()))
    await producer.produce(stream, 0, [ProduceMessage(b"i")])
    seen.append(_seen(await c.recv_frame()))
    seen.append(_seen(await c.recv_frame()))  # the idle wait ran out: empty, last
    return seen


@pytest.mark.parametrize("durability", ["flushed", "written"])
async def test_the_one_step_answer_is_the_general_paths_answer(
    jet: Server, durability: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert jet.address is not None
    step = OneStepSwitch(monkeypatch, FetchStream, "next_tail")
    pushed = _count_pushes(monkeypatch)
    with anyio.fail_after(30):
        async with (
            await RawClient.connect(jet.address) as c,
            await RawClient.connect(jet.address) as producer,
        ):
            for name in ("one", "gen"):
                await c.create_stream(name=name, subject=f"{name}.x", durability=durability)
            step.on()
            one = await _run(c, producer, "one", 100)
            taken = step.taken + len(pushed)
            step.off()
            gen = await _run(c, producer, "gen", 200)
    # b, c-e, the keyed one, f, g and i: the path under test was taken
    assert taken >= 6
    assert one == gen


def _count_pushes(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The offsets of the answers ``FetchStream._push`` wrote (one entry each)."""
    pushed: list[int] = []
    real = FetchStream._push

    def counting(stream: FetchStream, *args: Any) -> bool:
        offset = stream.offset
        out = real(stream, *args)
        if stream.offset != offset:
            pushed.append(offset)
        return out

    monkeypatch.setattr(FetchStream, "_push", counting)
    return pushed


@pytest.mark.parametrize("durability", ["flushed", "written"])
async def test_a_parked_tailing_stream_is_answered_from_the_commit_without_waking_its_task(
    jet: Server, durability: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each message appended while a tailing FetchStream is parked at the log end is
    answered from the turn that commits it: its task's ``next_tail`` is not resumed per
    answer (it was once per answer before, woken through the HW event)."""
    assert jet.address is not None
    calls: list[int] = []
    real = FetchStream.next_tail

    async def counted(stream: FetchStream, *args: Any) -> Any:
        calls.append(stream.offset)
        return await real(stream, *args)

    monkeypatch.setattr(FetchStream, "next_tail", counted)
    pushed = _count_pushes(monkeypatch)
    n = 20
    with anyio.fail_after(30):
        async with (
            await RawClient.connect(jet.address) as c,
            await RawClient.connect(jet.address) as producer,
        ):
            await c.create_stream(name="t", subject="t.x", durability=durability)
            req = FetchStreamRequest("t", 0, 0, MAX_BYTES, 5_000, n + 5)
            await c.send_raw(encode_frame(Api.FETCH_STREAM, 7, encode_fetch_stream_request(req)))
            offsets = []
            for i in range(n):
                await producer.produce("t", 0, [ProduceMessage(b"m%d" % i)])
                frame = await c.recv_frame()
                _flags, _size, _header, records = _seen(frame)
                offsets += [offset for offset, *_ in records]
    assert offsets == list(range(n))
    assert len(calls) <= 2, calls  # the first answer's general path, then parked once
    assert pushed == list(range(1, n)), pushed


async def test_a_produce_answer_and_the_answer_it_pushes_on_its_connection_go_in_one_send(
    jet: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A client that produces and tails on one connection (the SDK's one connection per
    server) gets the Produce answer and the FetchStream answer that Produce's commit
    pushed in one send of the server's (durability ``written``: both in the Produce's
    turn). Before, two sends per message: each a system call and a wake-up of the client."""
    assert jet.address is not None
    sends: list[int] = []
    real = SocketIO.send_now

    def counted(io: SocketIO, data: bytes | memoryview, **kw: Any) -> int:
        sends.append(len(data))
        return real(io, data, **kw)

    n = 10
    with anyio.fail_after(30):
        async with await RawClient.connect(jet.address) as c:
            await c.create_stream(name="t", subject="t.x", durability="written")
            req = FetchStreamRequest("t", 0, 0, MAX_BYTES, 5_000, n + 5)
            await c.send_raw(encode_frame(Api.FETCH_STREAM, 1, encode_fetch_stream_request(req)))
            frames: list[Frame] = []
            for i in range(n):
                if i == 1:  # the stream is parked pushing from here on
                    monkeypatch.setattr(SocketIO, "send_now", counted)
                body = encode_produce_request(
                    ProduceRequest("t", 0, AckPolicy.LEADER, 5_000, (ProduceMessage(b"%d" % i),))
                )
                await c.send_raw(encode_frame(Api.PRODUCE, 100 + i, body))
                frames += [await c.recv_frame(), await c.recv_frame()]
            monkeypatch.setattr(SocketIO, "send_now", real)
    answers = [f for f in frames if f.api == Api.FETCH_STREAM]
    offsets = [offset for f in answers for offset, *_ in _seen(f)[3]]  # type: ignore[index]
    assert offsets == list(range(n))
    assert sorted(f.correlation_id for f in frames if f.api == Api.PRODUCE) == [
        100 + i for i in range(n)
    ]
    assert len(sends) == n - 1, sends  # one per message after the first, not two
