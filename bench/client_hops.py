"""One client-side timeline round of ``python -m bench hops``, run as a script with the
jetsdk of the tree it measures on its PYTHONPATH (so it imports nothing of ``bench``).

    python bench/client_hops.py jet <address> <asyncio|trio> <messages>
    python bench/client_hops.py nats <url> asyncio <messages>

One message at a time (then a 1.5 ms pause), two flows:

- ``ack``: ``await producer.send(v)`` (jet) / ``await js.publish(subject, v)`` (nats-py);
- ``push``: ``await producer.send_soon(v)`` then ``await consumer.fetch()`` until it is
  back (jet) / ``await js.publish_async(subject, v)`` then the ordered push
  subscription's callback (nats-py).

Marks, each the time (``perf_counter_ns``) and two counts (asyncio: loop callbacks run
(``Handle._run``: task steps and plain callbacks) and loop iterations (``_run_once``);
trio: task steps and I/O waits, by an instrument): ``send`` (called), ``write`` (the
first socket write after it), ``read`` (the socket read whose bytes carried the answer:
jet ``Connection._received``, nats-py ``StreamReaderProtocol.data_received``),
``parsed`` (the answer decoded: jet ``Connection._dispatch``, nats-py
``Client._process_msg``), ``resumed`` (the caller's code runs again). The patches are
this script's, on the classes' methods: nothing in the SDK is changed. Prints one JSON
line: per flow, the p50 of each stage's µs from ``send`` and the p50 of the callbacks
(task steps) and iterations from ``read`` to ``resumed``.
"""

from __future__ import annotations

import asyncio
import asyncio.base_events
import asyncio.events
import contextlib
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import anyio
import orjson

VALUE = b"x" * 100
PAUSE_S = 0.0015


class Counts:
    """The loop's callbacks (task steps) and iterations so far, and the marks of the
    message on its way."""

    steps = 0
    iters = 0
    last_read: tuple[int, int, int] = (0, 0, 0)
    marks: dict[str, tuple[int, int, int]] = {}
    watching: set[int] = set()
    """API keys (jet) or message kinds (nats) whose answer is the current flow's."""


C = Counts()


def now() -> tuple[int, int, int]:
    return (time.perf_counter_ns(), C.steps, C.iters)


def mark(name: str, at: tuple[int, int, int] | None = None) -> None:
    if C.marks and name not in C.marks:
        C.marks[name] = at or now()


def count_asyncio() -> None:
    """Count the asyncio loop's callbacks and iterations (every loop of this process)."""
    run = asyncio.events.Handle._run
    once = asyncio.base_events.BaseEventLoop._run_once

    def counted_run(self: asyncio.events.Handle) -> None:
        C.steps += 1
        run(self)

    def counted_once(self: asyncio.base_events.BaseEventLoop) -> None:
        C.iters += 1
        once(self)  # type: ignore[attr-defined]

    asyncio.events.Handle._run = counted_run  # type: ignore[method-assign]
    asyncio.base_events.BaseEventLoop._run_once = counted_once  # type: ignore[attr-defined]


def trio_instrument() -> Any:
    import trio

    class Steps(trio.abc.Instrument):  # type: ignore[misc]
        def before_task_step(self, task: object) -> None:
            C.steps += 1

        def before_io_wait(self, timeout: float) -> None:
            C.iters += 1

    return Steps()


def patch_jet() -> None:
    from jetsdk.codec.frames import Api
    from jetsdk.connection import Connection
    from jetsdk.transport import SocketByteStream

    send_now = SocketByteStream._send_now
    received = Connection._received
    dispatch = Connection._dispatch
    watched = {"ack": {int(Api.PRODUCE)}, "push": {int(Api.FETCH_STREAM), int(Api.FETCH)}}

    def marked_send_now(self: Any, send: Callable[[Any], int], data: Any) -> int:
        mark("write")
        return send_now(self, send, data)

    def marked_received(self: Any, data: Any) -> None:
        C.last_read = now()
        received(self, data)

    def marked_dispatch(self: Any, api: int, flags: int, cid: int, body: Any) -> None:
        if api in C.watching:
            mark("read", C.last_read)
            mark("parsed")
        dispatch(self, api, flags, cid, body)

    SocketByteStream._send_now = marked_send_now  # type: ignore[method-assign]
    Connection._received = marked_received  # type: ignore[method-assign]
    Connection._dispatch = marked_dispatch  # type: ignore[method-assign]
    C.watched = watched  # type: ignore[attr-defined]


def patch_nats() -> None:
    from nats.aio.client import Client as NatsClient
    from nats.aio.transport import TcpTransport

    writelines = TcpTransport.writelines
    data_received = asyncio.StreamReaderProtocol.data_received
    process_msg = NatsClient._process_msg

    def marked_writelines(self: Any, payload: Any) -> None:
        mark("write")
        writelines(self, payload)

    def marked_data_received(self: Any, data: bytes) -> None:
        C.last_read = now()
        data_received(self, data)

    async def marked_process_msg(self: Any, sid: int, subject: bytes, *args: Any) -> None:
        kind = "push" if subject.startswith(b"js.") else "ack"
        if kind in C.watching:
            mark("read", C.last_read)
            mark("parsed")
        await process_msg(self, sid, subject, *args)

    TcpTransport.writelines = marked_writelines  # type: ignore[method-assign]
    asyncio.StreamReaderProtocol.data_received = marked_data_received  # type: ignore[method-assign]
    NatsClient._process_msg = marked_process_msg  # type: ignore[method-assign]


def summary(rows: list[dict[str, tuple[int, int, int]]]) -> dict[str, float]:
    out: dict[str, float] = {}
    rows = [r for r in rows if {"send", "read", "resumed"} <= r.keys()]
    if not rows:
        return out
    for stage in ("write", "read", "parsed", "resumed"):
        got = [(r[stage][0] - r["send"][0]) / 1e3 for r in rows if stage in r]
        if got:
            out[f"{stage}_us"] = round(statistics.median(got), 1)
    out["read_to_resumed_us"] = round(
        statistics.median((r["resumed"][0] - r["read"][0]) / 1e3 for r in rows), 1
    )
    out["steps"] = statistics.median(r["resumed"][1] - r["read"][1] for r in rows)
    out["iters"] = statistics.median(r["resumed"][2] - r["read"][2] for r in rows)
    out["steps_mean"] = round(statistics.mean(r["resumed"][1] - r["read"][1] for r in rows), 2)
    out["n"] = len(rows)
    return out


def begin(flow: str) -> None:
    C.watching = C.watched[flow] if hasattr(C, "watched") else {flow}  # type: ignore[attr-defined]
    C.marks = {"send": now()}


def end(rows: list[dict[str, tuple[int, int, int]]]) -> None:
    C.marks["resumed"] = now()
    rows.append(C.marks)
    C.marks = {}


async def jet_round(address: str, total: int) -> dict[str, dict[str, float]]:
    from jetsdk import Client, Consumer, Producer
    from jetsdk.errors import JetError

    stream = f"hops{time.monotonic_ns() % 1_000_000}"
    async with Client([address]) as client:
        with contextlib.suppress(JetError):
            await client.create_stream(stream, stream, durability="written")
        async with (
            Consumer(client, stream, start="new-only", max_wait=5.0) as consumer,
            Producer(client, stream, linger=0) as producer,
        ):
            with anyio.fail_after(60):  # warm up until a message comes back
                while not await consumer.fetch(max_records=1000, timeout=0.5):
                    await producer.send_soon(VALUE)
                while await consumer.fetch(max_records=1000, timeout=0.2):
                    pass
            result = {}
            for flow in ("ack", "push"):
                rows: list[dict[str, tuple[int, int, int]]] = []
                with anyio.fail_after(total * 0.1 + 60):
                    for _ in range(total):
                        begin(flow)
                        if flow == "ack":
                            await producer.send(VALUE)
                            end(rows)
                            await consumer.fetch(max_records=1000)
                        else:
                            await producer.send_soon(VALUE)
                            while not await consumer.fetch(max_records=1000):
                                pass
                            end(rows)
                        await anyio.sleep(PAUSE_S)
                result[flow] = summary(rows)
    return result


async def nats_round(url: str, total: int) -> dict[str, dict[str, float]]:
    import nats
    from nats.js.api import DeliverPolicy

    nc = await nats.connect(url)
    try:
        js = nc.jetstream()
        name = f"HOPS{time.monotonic_ns() % 1_000_000}"
        await js.add_stream(name=name, subjects=[f"js.{name}"])
        subject = f"js.{name}"
        arrived = asyncio.Event()

        async def on_msg(msg: Any) -> None:
            if C.marks:
                C.marks.setdefault("resumed", now())
            arrived.set()

        sub = await js.subscribe(
            subject, cb=on_msg, ordered_consumer=True, deliver_policy=DeliverPolicy.NEW
        )
        await js.publish(subject, VALUE)
        result = {}
        for flow in ("ack", "push"):
            rows: list[dict[str, tuple[int, int, int]]] = []
            for _ in range(total):
                arrived.clear()
                begin(flow)
                if flow == "ack":
                    await js.publish(subject, VALUE)
                    end(rows)
                    await asyncio.wait_for(arrived.wait(), 10)
                else:
                    await js.publish_async(subject, VALUE)
                    await asyncio.wait_for(arrived.wait(), 10)
                    rows.append(C.marks)
                    C.marks = {}
                await asyncio.sleep(PAUSE_S)
            result[flow] = summary(rows)
        await sub.unsubscribe()
        return result
    finally:
        await nc.close()


def main() -> None:
    side, where, backend, total = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    options: dict[str, Any] = {}
    if backend == "asyncio":
        count_asyncio()
    else:
        options["instruments"] = [trio_instrument()]
    if side == "jet":
        patch_jet()
        result = anyio.run(jet_round, where, total, backend=backend, backend_options=options)
    else:
        patch_nats()
        result = anyio.run(nats_round, where, total, backend=backend, backend_options=options)
    print(orjson.dumps(result).decode(), flush=True)


if __name__ == "__main__":
    main()
