"""The common Produce request answered in its connection's reader callback: no task, no
coroutine (``OneProduce.serve_now``, decoded by ``one_message_envelope``), and every
request it does not take served by its task as before. The server in process (tasks
counted by the loop's task factory); the connection's side: test_answer_now.py."""

from __future__ import annotations

import contextlib
import os
import threading
from typing import Any

import anyio
import pytest
from nats.aio.client import Client as NatsClient

from jetsdk.codec.error_codes import AckPolicy, ErrorCode
from jetsdk.codec.messages import ProduceMessage, ProduceRequest, encode_produce_request
from jetsdk.codec.transcode import (
    SPLIT_ENVELOPE_MIN,
    SPLIT_VALUE_MIN,
    DirectRecord,
    one_message_envelope,
    produce_envelopes,
)
from jetserver.broker.direct import AnswerAtCommit
from jetserver.broker.produce_one import OneProduce
from jetserver.server import Server
from support.loop_tasks import tasks_made
from support.raw_client import RawClient, ServerError
from support.subscriber import Subscriber

pytestmark = pytest.mark.anyio

BOUND_S = 10.0


class _Counted:
    """``OneProduce.serve_now``, its results counted (taken: not None)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        real = OneProduce.serve_now
        self.taken = 0
        self.declined = 0

        def counting(obj: OneProduce, *args: Any) -> Any:
            out = real(obj, *args)
            self.taken += out is not None
            self.declined += out is None
            return out

        monkeypatch.setattr(OneProduce, "serve_now", counting)


def _fsyncs_held_in_threads(
    replica: Any, gate: threading.Event, stack: contextlib.AsyncExitStack
) -> Any:
    """``replica``'s fsync runner, every fsync sent to a worker thread whose system call
    then waits for ``gate`` (both undone by ``stack``)."""
    runner = replica.committer.fsyncs
    runner.on_loop = False
    stack.callback(setattr, runner, "on_loop", True)

    def held_sync(fd: int) -> None:  # (the worker thread's system call)
        os.fdatasync(fd)
        if not gate.wait(BOUND_S):
            raise TimeoutError("the test never opened the gate")

    runner.thread_sync = held_sync
    stack.callback(setattr, runner, "thread_sync", None)
    return runner


@pytest.mark.parametrize("durability", ["written", "flushed"])
async def test_the_server_makes_no_task_for_the_common_produce(
    jet: Server, nc: NatsClient, durability: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One message at a time, no task at all per message: ``flushed`` too, whose
    after-work (the fsync, the commit, then the NATS copy) runs from loop callbacks
    (broker/commit_soon.py)."""
    counted = _Counted(monkeypatch)
    copies = await Subscriber.of(nc, "t.x")
    async with await RawClient.connect(jet.address) as c:
        await c.create_stream(name="t", subject="t.x", durability=durability)
        await c.produce("t", 0, [ProduceMessage(b"first")])  # the partition's set-up
        with anyio.fail_after(BOUND_S):  # (the first copy to a subject goes in a task)
            await copies.wait_for(1)
        with tasks_made() as made:
            for i in range(20):
                (result,) = await c.produce("t", 0, [ProduceMessage(b"m%d" % i)])
                assert (result.error_code, result.offset) == (ErrorCode.NONE, i + 1)
            with anyio.fail_after(BOUND_S):
                got = await copies.wait_for(21)
    assert counted.taken == 21
    assert made == []
    values = [b"first"] + [b"m%d" % i for i in range(20)]  # (each in its envelope)
    assert [m.data[-len(v) :] for m, v in zip(got, values, strict=True)] == values
    assert jet.streams.replica("t", 0).high_watermark == 21


@pytest.mark.parametrize("durability", ["written", "flushed"])
async def test_an_all_ack_is_answered_by_its_commit_with_no_task(
    jet: Server, nc: NatsClient, durability: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An ALL-acked message alone is taken in the reader callback too; its answer is
    written by its commit (``flushed``: the fsync's end, from a loop callback), never
    before: at each answer the HW and the flushed offset (``flushed``) are past it."""
    counted = _Counted(monkeypatch)
    seen: list[tuple[int, int, int]] = []
    settle = AnswerAtCommit.settle

    def watched(obj: AnswerAtCommit, index: int, code: int, offset: int, ts: int) -> None:
        log = jet.streams.replica("a", 0).log
        seen.append((offset, log.high_watermark, log.flushed_offset))
        settle(obj, index, code, offset, ts)

    monkeypatch.setattr(AnswerAtCommit, "settle", watched)
    copies = await Subscriber.of(nc, "a.x")
    async with await RawClient.connect(jet.address) as c:
        await c.create_stream(name="a", subject="a.x", durability=durability)
        await c.produce("a", 0, [ProduceMessage(b"first")])  # the partition's set-up
        with anyio.fail_after(BOUND_S):
            await copies.wait_for(1)
        with tasks_made() as made:
            for i in range(20):
                (result,) = await c.produce(
                    "a", 0, [ProduceMessage(b"m%d" % i)], ack_policy=AckPolicy.ALL
                )
                assert (result.error_code, result.offset) == (ErrorCode.NONE, i + 1)
            with anyio.fail_after(BOUND_S):
                got = await copies.wait_for(21)
    assert counted.taken == 21
    assert made == []
    assert [offset for offset, _hw, _flushed in seen] == list(range(1, 21))
    assert all(hw > offset for offset, hw, _flushed in seen)
    if durability == "flushed":
        assert all(flushed > offset for offset, _hw, flushed in seen)
    values = [b"first"] + [b"m%d" % i for i in range(20)]
    assert [m.data[-len(v) :] for m, v in zip(got, values, strict=True)] == values


async def test_messages_answered_at_once_during_an_fsync_share_the_next_one(
    jet: Server, nc: NatsClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Group commit on the one-step path: the ``flushed`` messages appended, and answered,
    while an fsync runs in a worker thread wait together for the next fsync (one for all
    of them), run from the loop callback that learns the first ended; no task."""
    copies = await Subscriber.of(nc, "g.x")
    gate = threading.Event()
    async with contextlib.AsyncExitStack() as stack:
        stack.callback(gate.set)
        clients = [
            await stack.enter_async_context(await RawClient.connect(jet.address)) for _ in range(8)
        ]
        await clients[0].create_stream(name="g", subject="g.x", durability="flushed")
        for i, c in enumerate(clients):  # (each connection's first request: its set-up)
            await c.produce("g", 0, [ProduceMessage(b"w%d" % i)])
        with anyio.fail_after(BOUND_S):
            await copies.wait_for(len(clients))
        replica = jet.streams.replica("g", 0)
        runner = _fsyncs_held_in_threads(replica, gate, stack)
        counted = _Counted(monkeypatch)
        threads = runner.thread_fsyncs
        with tasks_made() as made:
            (first,) = await clients[0].produce("g", 0, [ProduceMessage(b"a")])
            with anyio.fail_after(BOUND_S):  # its fsync is in the thread, held
                while runner.thread_fsyncs == threads:  # noqa: ASYNC110 - no event
                    await anyio.sleep(0.005)
            async with anyio.create_task_group() as tg:
                for i, c in enumerate(clients):
                    tg.start_soon(c.produce, "g", 0, [ProduceMessage(b"b%d" % i)])
            assert replica.high_watermark == len(clients)  # none committed yet
            gate.set()
            with anyio.fail_after(BOUND_S):
                got = await copies.wait_for(2 * len(clients) + 1)
        assert first.offset == len(clients)
        assert counted.taken == len(clients) + 1
        assert made == []
        assert runner.thread_fsyncs == threads + 2  # the held one, then one for the rest
        assert replica.high_watermark == 2 * len(clients) + 1
        assert len(got) == 2 * len(clients) + 1


async def test_an_append_made_during_a_thread_fsync_gets_the_next_one_without_copies(
    jet: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A ``no_nats_copies`` stream's one-step append has no after-work of its own: made
    while the log's previous fsync runs in a worker thread, it must still get the next
    fsync when that one ends (``CommitSoon.after_commit`` with no work), or its ALL
    answer, and its commit, wait for whatever append comes next."""
    gate = threading.Event()
    async with contextlib.AsyncExitStack() as stack:
        stack.callback(gate.set)
        a = await stack.enter_async_context(await RawClient.connect(jet.address))
        b = await stack.enter_async_context(await RawClient.connect(jet.address))
        await a.create_stream(name="q", subject="q.x", durability="flushed", no_nats_copies=True)
        for c in (a, b):  # (each connection's first request: its set-up)
            await c.produce("q", 0, [ProduceMessage(b"w")], ack_policy=AckPolicy.ALL)
        replica = jet.streams.replica("q", 0)
        runner = _fsyncs_held_in_threads(replica, gate, stack)
        counted = _Counted(monkeypatch)
        threads = runner.thread_fsyncs
        answers: list[tuple[int, int]] = []

        async def produce(c: RawClient, value: bytes) -> None:
            (result,) = await c.produce("q", 0, [ProduceMessage(value)], ack_policy=AckPolicy.ALL)
            answers.append((result.error_code, result.offset))

        async with anyio.create_task_group() as tg:
            tg.start_soon(produce, a, b"first")
            with anyio.fail_after(BOUND_S):  # its fsync is in the thread, held
                while runner.thread_fsyncs == threads:  # noqa: ASYNC110 - no event
                    await anyio.sleep(0.005)
            tg.start_soon(produce, b, b"second")
            with anyio.fail_after(BOUND_S):  # appended behind the held fsync
                while replica.log.log_end_offset < 4:  # noqa: ASYNC110 - no event
                    await anyio.sleep(0.005)
            assert answers == []  # ALL: neither answered before its fsync
            gate.set()
            with anyio.fail_after(BOUND_S):  # the second needs an fsync of its own
                while len(answers) < 2:  # noqa: ASYNC110 - no event
                    await anyio.sleep(0.005)
        assert sorted(answers) == [(ErrorCode.NONE, 2), (ErrorCode.NONE, 3)]
        assert counted.taken == 2
        assert runner.thread_fsyncs == threads + 2  # the held one, then the second's
        assert replica.high_watermark == replica.log.flushed_offset == 4


async def test_requests_it_declines_are_answered_by_their_task(
    jet: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each reason to decline: a large write, no room for the copy in the backlog, the
    server shutting down, several messages, a producer id. Each is answered as the
    task's path answers it (nothing done at once); an ALL ack is taken."""
    counted = _Counted(monkeypatch)
    async with await RawClient.connect(jet.address) as c:
        await c.create_stream(
            name="d", subject="d.x", durability="written", max_message_bytes=1 << 20
        )
        (large,) = await c.produce("d", 0, [ProduceMessage(b"x" * (70 * 1024))])
        assert (large.error_code, large.offset, counted.taken) == (ErrorCode.NONE, 0, 0)
        backlog = jet.running.produce.copy_backlog
        held, limit = backlog.held, backlog.limit
        backlog.held, backlog.limit = 10, 10  # full: the copy would wait for room
        try:
            (full,) = await c.produce("d", 0, [ProduceMessage(b"no room")], timeout_ms=200)
        finally:
            backlog.held, backlog.limit = held, limit
        assert (full.error_code, full.offset, counted.taken) == (ErrorCode.NONE, 1, 0)
        several = await c.produce("d", 0, [ProduceMessage(b"a"), ProduceMessage(b"b")])
        assert [r.offset for r in several] == [2, 3]
        (all_acked,) = await c.produce("d", 0, [ProduceMessage(b"c")], ack_policy=AckPolicy.ALL)
        assert (all_acked.offset, counted.taken) == (4, 1)  # (answered by its commit)
        counted.taken = 0
        (idempotent,) = await c.produce("d", 0, [ProduceMessage(b"p")], producer_id=7)
        assert idempotent.offset == 5
        declined = counted.declined
        jet.running.dispatcher.shutting_down = True
        try:
            with pytest.raises(ServerError) as refused:
                await c.produce("d", 0, [ProduceMessage(b"late")])
        finally:
            jet.running.dispatcher.shutting_down = False
        assert refused.value.code == ErrorCode.SHUTTING_DOWN
        assert counted.declined == declined  # (refused before it: the handler's answer)
        assert counted.taken == 0  # none of them (a request split over reads: not offered)
        (plain,) = await c.produce("d", 0, [ProduceMessage(b"plain")])
    assert plain.offset == 6


def _body(messages: list[ProduceMessage], **options: Any) -> bytes:
    fields: dict[str, Any] = {"ack_policy": AckPolicy.LEADER, "timeout_ms": 5000, **options}
    req = ProduceRequest(stream="s", partition=0, messages=tuple(messages), **fields)
    return encode_produce_request(req)


@pytest.mark.parametrize(
    "message",
    [
        ProduceMessage(b"v"),
        ProduceMessage(b""),
        ProduceMessage(b"v", key=b"k"),
        ProduceMessage(b"v", key=b""),
        ProduceMessage(b"v", subject="s.\u00e9"),
        ProduceMessage(b"x" * (SPLIT_ENVELOPE_MIN - 1), key=b"k" * 300),
        ProduceMessage(b"v", headers=(("h", b"1"),)),
        ProduceMessage(b"v", key=b"k", headers=(("a", b""), ("b\u00e9", b"x" * 70))),
    ],
)
@pytest.mark.parametrize("ack", [AckPolicy.LEADER, AckPolicy.NONE, AckPolicy.ALL])
def test_one_message_envelope_is_the_general_decoding(
    message: ProduceMessage, ack: AckPolicy
) -> None:
    body = _body([message], ack_policy=ack, timeout_ms=1234)
    one = one_message_envelope(body, "_INBOX.x.1f")
    records: list[DirectRecord | None] = []
    head, messages = produce_envelopes(body, "_INBOX.x.1f", records, split=True)
    assert one is not None
    assert one[:3] == (head[0], head[1], head[3])
    assert one[3:] == (*messages[0], records[0])


@pytest.mark.parametrize(
    "body",
    [
        _body([ProduceMessage(b"v")], producer_id=1),
        _body([ProduceMessage(b"v")], current_values=True),
        _body([ProduceMessage(b"v", headers=(("Nats-Msg-Id", b"1"),))]),  # a header control
        _body([ProduceMessage(b"v", headers=(("h", b"1"), ("Jet-Expected-Offset", b"0")))]),
        _body([ProduceMessage(b"v", headers=(("h", b"1"),))])[:-8],  # truncated header
        _body([ProduceMessage(b"v"), ProduceMessage(b"w")]),
        _body([ProduceMessage(b"x" * SPLIT_VALUE_MIN)]),
        _body([ProduceMessage(b"v")]) + b"\x00",  # trailing
        _body([ProduceMessage(b"v")])[:-1],  # truncated
        _body([ProduceMessage(b"v", key=b"k")])[:30],
        b"\xff\xff",
        b"",
    ],
)
def test_one_message_envelope_leaves_anything_else_to_the_general_decoding(
    body: bytes,
) -> None:
    assert one_message_envelope(body, "_INBOX.x.1f") is None
