"""Where the time of an RF 3 ack ALL publish goes, hop by hop, across three servers.

Part of ``python -m bench latency``. Three jet servers (``jet dev --servers 3``) run with
``JET_HOP_TRACE`` (jetserver/hops.py), each writing its own marks file; this process
publishes 100-byte messages at a fixed rate with an ack ALL ``Producer`` (linger 0), one
message in flight at a time. The leader is the process that decoded the Produce requests;
the followers are those that appended replicated records (``repl.fetched``).

Per message, the hops are the first marks of each kind after the previous hop: the leader
appends; its answer to a parked replica fetch (``resp.replica_fetch``) carries the records
before its own fsync; each follower appends and fsyncs them (``repl.fetched`` →
``repl.flushed``) while the leader fsyncs its copy, and its next replica fetch reports
them; the HW moves once the leader's fsync and the slower follower's report are both in;
the Produce response follows.
"""

from __future__ import annotations

import bisect
import os
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import anyio

from bench.pacing import paced
from jetsdk import AckPolicy, Client, Producer
from jetserver.devcluster import DevCluster

ROWS = (
    "send -> leader req.produce",
    "req.produce -> append",
    "append -> resp.replica_fetch",
    "resp.replica_fetch -> repl.fetched (first follower)",
    "repl.fetched -> repl.flushed (slower follower)",
    "append -> fsync.start (leader, alongside)",
    "fsync.start -> fsync.end (leader)",
    "later of both fsyncs -> hw",
    "hw -> acked",
    "acked -> resp.produce",
    "resp.produce -> ack (client)",
)
"""The rows printed, in the order a message meets them."""
WARMUP = 20
VALUE_BYTES = 100

Marks = dict[str, list[int]]


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


async def _publish(addresses: list[str], rate: int, total: int) -> tuple[list[int], list[int]]:
    sends: list[int] = []
    acks: list[int] = []
    async with Client(addresses) as client:
        await client.create_stream("lat3", "lat3", partitions=1, replication_factor=3)
        async with Producer(client, "lat3", ack=AckPolicy.ALL, linger=0) as producer:
            for _ in range(WARMUP):  # the ISR is full and every connection open
                await producer.send(bytes(VALUE_BYTES))
            async for _ in paced(total, rate):
                sent = time.perf_counter_ns()
                await producer.send(bytes(VALUE_BYTES))
                sends.append(sent)
                acks.append(time.perf_counter_ns())
    return sends, acks


def _load(prefix: Path) -> list[Marks]:
    out: list[Marks] = []
    for path in prefix.parent.glob(prefix.name + ".*"):
        marks: Marks = defaultdict(list)
        for line in path.read_text(encoding="ascii").splitlines():
            name, ns = line.split()
            marks[name].append(int(ns))
        out.append({name: sorted(values) for name, values in marks.items()})
    return out


def _after(values: list[int], t: int | None) -> int | None:
    if t is None:
        return None
    i = bisect.bisect_left(values, t)
    return values[i] if i < len(values) else None


def _trace(leader: Marks, followers: list[Marks], sent: int) -> list[int] | None:
    """One message's times (see :data:`ROWS`), or None if a mark is missing."""
    req = _after(leader["req.produce"], sent)
    append = _after(leader["append"], req)
    answer = _after(leader.get("resp.replica_fetch", []), append)
    fsync_start = _after(leader.get("fsync.start", []), append)
    fsync_end = _after(leader.get("fsync.end", []), fsync_start)
    pairs = []
    for f in followers:
        fetched = _after(f["repl.fetched"], append)
        pairs.append((fetched, _after(f.get("repl.flushed", []), fetched)))
    if not pairs or any(a is None or b is None for a, b in pairs):
        return None
    first = min(a for a, _ in pairs if a is not None)
    slower_fetched, slower = max(pairs, key=lambda p: p[1] or 0)
    both = max(slower or 0, fsync_end or 0)
    hw = _after(leader.get("hw", []), both)
    done = _after(leader.get("acked", []), hw)
    resp = _after(leader.get("resp.produce", []), done)
    out = [sent, req, append, answer, first, slower_fetched, slower, fsync_start, fsync_end]
    out += [both, hw, done, resp]
    return None if None in out else [t for t in out if t is not None]


def _breakdown(processes: list[Marks], sends: list[int], acks: list[int]) -> dict[str, list[float]]:
    """Per row, the microseconds of each message."""
    leader = max(processes, key=lambda m: len(m.get("req.produce", [])))
    followers = [m for m in processes if m is not leader and m.get("repl.fetched")]
    rows: dict[str, list[float]] = defaultdict(list)
    for sent, acked in zip(sends, acks, strict=True):
        t = _trace(leader, followers, sent)
        if t is None:
            continue
        sent, req, append, answer, first, s_fetched, s_flushed, fs0, fs1, both, hw, done, resp = t
        spans = (
            (sent, req),
            (req, append),
            (append, answer),
            (answer, first),
            (s_fetched, s_flushed),
            (append, fs0),
            (fs0, fs1),
            (both, hw),
            (hw, done),
            (done, resp),
            (resp, acked),
        )
        for row, (a, b) in zip(ROWS, spans, strict=True):
            rows[row].append((b - a) / 1000)
        rows["end to end"].append((acked - sent) / 1000)
    return rows


def run(quick: bool) -> None:
    """Measure RF 3 ack ALL and print its breakdown."""
    rate, seconds = (200, 3.0) if quick else (200, 10.0)
    total = int(rate * seconds)
    with tempfile.TemporaryDirectory(prefix="jet-hops3-") as tmp:
        prefix = Path(tmp) / "hops"
        os.environ["JET_HOP_TRACE"] = str(prefix)
        try:
            with open(os.devnull, "wb") as devnull, DevCluster(size=3, log_file=devnull) as dev:
                os.environ.pop("JET_HOP_TRACE", None)  # the servers have it; not this process
                sends, acks = anyio.run(_publish, dev.addresses, rate, total, backend="asyncio")
        finally:
            os.environ.pop("JET_HOP_TRACE", None)
        rows = _breakdown(_load(prefix), sends, acks)
    print(f"\nRF 3, ack ALL, durability=flushed: {rate} msg/s for {seconds:g} s, 100 B, linger 0")
    print(f"  ({len(rows['end to end'])} of {total} messages traced through every hop)")
    print(f"    {'hop':<52} {'p50 us':>9} {'p99 us':>9}")
    for row in (*ROWS, "end to end"):
        values = rows.get(row, [])
        print(f"    {row:<52} {_pct(values, 0.5):>9.0f} {_pct(values, 0.99):>9.0f}")
