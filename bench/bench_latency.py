"""Where the time of one message goes: publish -> ack and publish -> consume, hop by hop.

One jet server (``jet dev``, RF 1) runs with ``JET_HOP_TRACE`` (jetserver/infra/hops.py), which
records the moment each message reaches each hop inside the server; this process
publishes timestamped 100-byte messages at a fixed rate with a ``Producer`` (linger 0) and
reads them with a ``Consumer`` (long-poll fetch), noting when each send starts, when the
SDK decoded each Produce and Fetch response (``got.produce``, ``got.fetch``), when the ack
arrives and when the consumer gets it. All timestamps are ``perf_counter_ns``
(CLOCK_MONOTONIC, one clock for every process of the machine). The rate keeps one message
in flight at a time, so each message's hops are the first marks of each kind after its
previous hop.

Printed per hop: p50 and p99 of the time since the previous hop, in microseconds, for the
default durability (``flushed``: visible once fsynced), the same with Produce going through
NATS instead of being appended by the leader directly (``[ingest] produce_direct = false``),
and ``written`` (RF 1, visible once written), then the end-to-end figures; then the same
for an RF 3 ack ALL publish across three servers (:mod:`bench.latency_rf3`).
Run: ``python -m bench latency [--quick]``.
"""

from __future__ import annotations

import bisect
import itertools
import os
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import anyio

from bench import latency_rf3
from bench.pacing import paced
from bench.sdk_marks import consume_timed, sdk_marks
from bench.stats import pct
from jetsdk import AckPolicy, Client, Consumer, Message, Producer
from jetserver.testing.devcluster import DevCluster

ACK_PATH = (
    "send",
    "write",
    "read",
    "req.produce",
    "sink",
    "append",
    "acked",
    "resp.produce",
    "got.produce",
    "ack",
)
"""Hops of a message from the producer to its ack (the leader appends it directly)."""
ACK_PATH_VIA_NATS = (*ACK_PATH[:4], "published", *ACK_PATH[4:])
"""The same through NATS (``[ingest] produce_direct = false``)."""
CASES = (
    ("flushed", True),
    ("flushed", False),
    ("written", True),
)
"""(durability, produce_direct) per measured case."""
CONSUME_PATH = (
    "append",
    "fsync.start",
    "fsync.end",
    "hw",
    "fetch.woken",
    "resp.fetch",
    "got.fetch",
    "consumed",
)
"""Hops from the append to the consumer (durability flushed)."""
WRITTEN_PATH = ("append", "hw", "fetch.woken", "resp.fetch", "got.fetch", "consumed")
"""Hops from the append to the consumer (durability written: no fsync on the path)."""
VALUE_BYTES = 100


async def _run(address: list[str], stream: str, rate: int, seconds: float) -> dict[str, list[int]]:
    """Publish and consume; return the client-side marks per kind (``write``: the SDK's
    connection is about to write a Produce request; ``got.produce`` / ``got.fetch``: it
    decoded the response and handed it to the waiting task)."""
    marks: dict[str, list[int]] = defaultdict(list)
    with sdk_marks(marks):
        return await _publish_and_consume(address, stream, rate, seconds, marks)


async def _publish_and_consume(
    address: list[str], stream: str, rate: int, seconds: float, marks: dict[str, list[int]]
) -> dict[str, list[int]]:
    total = int(rate * seconds)
    async with (
        Client(address) as client,
        Consumer(client, stream, start="new-only", max_wait=5.0) as consumer,
        Producer(client, stream, linger=0, ack=AckPolicy.LEADER) as producer,
        anyio.create_task_group() as tg,
    ):

        def batch(now: int, got: list[Message]) -> None:
            for msg in got:
                marks["consumed"].append(now)
                marks["e2e"].append(now - int.from_bytes(msg.value[:8], "big"))

        tg.start_soon(consume_timed, consumer, total, seconds + 60, batch)
        async for _ in paced(total, rate):
            sent = time.perf_counter_ns()
            marks["send"].append(sent)
            await producer.send(sent.to_bytes(8, "big") + bytes(VALUE_BYTES - 8))
            marks["ack"].append(time.perf_counter_ns())
    return marks


def _load_marks(prefix: Path) -> dict[str, list[int]]:
    marks: dict[str, list[int]] = defaultdict(list)
    for path in prefix.parent.glob(prefix.name + ".*"):
        for line in path.read_text(encoding="ascii").splitlines():
            name, ns = line.split()
            marks[name].append(int(ns))
    return marks


def _hops(marks: dict[str, list[int]], path: tuple[str, ...]) -> dict[str, list[float]]:
    """Per hop, the microseconds since the previous hop, message by message."""
    ordered = {name: sorted(values) for name, values in marks.items()}
    out: dict[str, list[float]] = defaultdict(list)
    for start in ordered.get(path[0], []) if path[0] == "send" else []:
        _chain(ordered, path, start, out)
    return out


def _chain(
    ordered: dict[str, list[int]], path: tuple[str, ...], start: int, out: dict[str, list[float]]
) -> int | None:
    previous = start
    for name in path[1:]:
        values = ordered.get(name, [])
        i = bisect.bisect_left(values, previous)
        if i == len(values):
            return None
        out[name].append((values[i] - previous) / 1000)
        previous = values[i]
    return previous


def _consume_hops(marks: dict[str, list[int]], path: tuple[str, ...]) -> dict[str, list[float]]:
    ordered = {name: sorted(values) for name, values in marks.items()}
    out: dict[str, list[float]] = defaultdict(list)
    appends = ordered.get("append", [])
    for send in ordered.get("send", []):
        i = bisect.bisect_left(appends, send)
        if i < len(appends):
            _chain(ordered, path, appends[i], out)
    return out


def _print(title: str, hops: dict[str, list[float]], path: tuple[str, ...]) -> None:
    print(f"  {title}")
    print(f"    {'hop':<34} {'p50 us':>9} {'p99 us':>9}")
    for prev, name in itertools.pairwise(path):
        values = hops.get(name, [])
        print(f"    {prev + ' -> ' + name:<34} {pct(values, 0.5):>9.0f} {pct(values, 0.99):>9.0f}")


def _end_to_end(marks: dict[str, list[int]]) -> tuple[list[float], list[float]]:
    """Milliseconds from send to ack, and from send to the consumer (the send time travels
    in the message)."""
    sends, acks = marks["send"], marks["ack"]
    ack_ms = [(a - s) / 1e6 for s, a in zip(sends, acks, strict=False)]
    return ack_ms, [ns / 1e6 for ns in marks["e2e"]]


async def _measure(
    addresses: list[str], durability: str, rate: int, seconds: float
) -> dict[str, list[int]]:
    async with Client(addresses) as client:
        await client.create_stream("lat", "lat", durability=durability)  # type: ignore[arg-type]
    return await _run(addresses, "lat", rate, seconds)


def run(quick: bool) -> None:
    """Measure both durabilities and print the breakdown."""
    rate, seconds = (500, 3.0) if quick else (500, 10.0)
    for durability, direct in CASES:
        with tempfile.TemporaryDirectory(prefix="jet-hops-") as tmp:
            prefix = Path(tmp) / "hops"
            os.environ["JET_HOP_TRACE"] = str(prefix)
            os.environ["JET_INGEST_PRODUCE_DIRECT"] = "true" if direct else "false"
            try:
                with (
                    open(os.devnull, "wb") as devnull,
                    DevCluster(size=1, log_file=devnull) as dev,
                ):
                    client_marks = anyio.run(
                        _measure, dev.addresses, durability, rate, seconds, backend="asyncio"
                    )
            finally:
                os.environ.pop("JET_HOP_TRACE", None)
                os.environ.pop("JET_INGEST_PRODUCE_DIRECT", None)
            marks = _load_marks(prefix)
            marks.update(client_marks)
        how = "appended directly" if direct else "through NATS"
        print(
            f"\ndurability={durability}, produce {how}: {rate} msg/s for {seconds:g} s, "
            "100 B, linger 0"
        )
        ack_path = ACK_PATH if direct else ACK_PATH_VIA_NATS
        _print("publish -> ack (ack LEADER)", _hops(marks, ack_path), ack_path)
        path = CONSUME_PATH if durability == "flushed" else WRITTEN_PATH
        _print("append -> consumer", _consume_hops(marks, path), path)
        ack_ms, consume_ms = _end_to_end(marks)
        print(
            f"  end to end: ack p50 {pct(ack_ms, 0.5):.2f} ms p99 {pct(ack_ms, 0.99):.2f} ms; "
            f"consume p50 {pct(consume_ms, 0.5):.2f} ms p99 {pct(consume_ms, 0.99):.2f} ms"
        )
    latency_rf3.run(quick)
