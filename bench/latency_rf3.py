"""Where the time of an RF 3 ack ALL publish goes, hop by hop, across three servers.

Part of ``python -m bench latency``. Three jet servers (``jet dev --servers 3``) run with
``JET_HOP_TRACE`` (jetserver/infra/hops.py), each writing its own marks file; this process
publishes 100-byte messages at a fixed rate with an ack ALL ``Producer`` (linger 0), one
message in flight at a time. The leader is the process that decoded the Produce requests;
the followers are those that appended replicated records (``repl.fetched``).

Per message, the hops are the first marks of each kind after the previous hop: the leader
appends; its answer to each follower's parked replica fetch (``rf.ans.<follower>.r``)
carries the records before its own fsync; the follower's fetch session gets it
(``repl.recv``), its fetcher appends and fsyncs them (``repl.fetched`` -> ``repl.flushed``)
while the leader fsyncs its copy, asks again (``repl.ask``) and the session writes that
request (``repl.send``), which reports them; the leader reads it (``rf.ask.<follower>``);
the HW moves once the leader's fsync and the later follower's report are both in; the
Produce response follows. The follower rows are the later follower's.
"""

from __future__ import annotations

import bisect
import itertools
import os
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

import anyio

from bench.pacing import paced
from bench.stats import pct
from jetsdk import AckPolicy, Client, Producer
from jetserver.testing.devcluster import DevCluster

ROWS = (
    "send -> leader req.produce",
    "req.produce -> append",
    "append -> answer with records (leader)",
    "answer -> session got it (follower)",
    "got it -> fetcher has it",
    "repl.fetched -> repl.flushed (append + fsync)",
    "repl.flushed -> next fetch asked",
    "asked -> request written",
    "request written -> leader read it (rf.ask)",
    "rf.ask -> hw",
    "append -> fsync.start (leader, alongside)",
    "fsync.start -> fsync.end (leader)",
    "hw -> acked",
    "acked -> resp.produce",
    "resp.produce -> ack (client)",
)
"""The rows printed, in the order a message meets them; the follower rows are those of the
follower whose report moved the HW (the later one)."""
WARMUP = 20
VALUE_BYTES = 100

Marks = dict[str, list[int]]


async def _publish(
    addresses: list[str], rate: int, total: int, around: Callable[[], None] | None = None
) -> tuple[list[int], list[int]]:
    """Send ``total`` messages one at a time at ``rate``: each one's send and ack times.
    ``around`` is called just before the first measured send and after the last ack."""
    sends: list[int] = []
    acks: list[int] = []
    async with Client(addresses) as client:
        await client.create_stream("lat3", "lat3", partitions=1, replication_factor=3)
        async with Producer(client, "lat3", ack=AckPolicy.ALL, linger=0) as producer:
            for _ in range(WARMUP):  # the ISR is full and every connection open
                await producer.send(bytes(VALUE_BYTES))
            if around is not None:
                around()
            async for _ in paced(total, rate):
                sent = time.perf_counter_ns()
                await producer.send(bytes(VALUE_BYTES))
                sends.append(sent)
                acks.append(time.perf_counter_ns())
            if around is not None:
                around()
    return sends, acks


def _load(prefix: Path) -> dict[int, Marks]:
    """Each server's marks by its process id (the marks files are ``<prefix>.<pid>``)."""
    out: dict[int, Marks] = {}
    for path in prefix.parent.glob(prefix.name + ".*"):
        marks: Marks = defaultdict(list)
        for line in path.read_text(encoding="ascii").splitlines():
            name, ns = line.split()[:2]
            marks[name].append(int(ns))
        out[int(path.suffix[1:])] = {name: sorted(values) for name, values in marks.items()}
    return out


def traced(
    rate: int,
    total: int,
    around: Callable[[list[int]], None] | None = None,
    raw: Callable[[Path], None] | None = None,
) -> tuple[dict[int, Marks], list[int], list[int]]:
    """Run three traced servers, send ``total`` messages one at a time at ``rate``: the
    servers' marks by process id, and each message's send and ack times. ``around`` is
    called with the servers' process ids before the first measured send and after the
    last ack; ``raw`` with the marks files' prefix (``<prefix>.<pid>``) before they go."""
    with tempfile.TemporaryDirectory(prefix="jet-hops3-") as tmp:
        prefix = Path(tmp) / "hops"
        os.environ["JET_HOP_TRACE"] = str(prefix)
        try:
            with open(os.devnull, "wb") as devnull, DevCluster(size=3, log_file=devnull) as dev:
                os.environ.pop("JET_HOP_TRACE", None)  # the servers have it; not this process
                pids = [s.pid for s in dev.servers]
                hook = None if around is None else (lambda: around(pids))
                sends, acks = anyio.run(
                    _publish, dev.addresses, rate, total, hook, backend="asyncio"
                )
        finally:
            os.environ.pop("JET_HOP_TRACE", None)
        if raw is not None:
            raw(prefix)
        return _load(prefix), sends, acks


def _after(values: list[int], t: int | None) -> int | None:
    if t is None:
        return None
    i = bisect.bisect_left(values, t)
    return values[i] if i < len(values) else None


def _follower_ids(leader: Marks, followers: list[Marks]) -> list[str]:
    """The server id of each follower process: the one whose answers with records
    (``rf.ans.<id>.r`` on the leader) its ``repl.recv`` marks follow most closely."""
    ids = sorted({n.split(".")[2] for n in leader if n.startswith("rf.ans.")})
    out = []
    for f in followers:
        best = ("", float("inf"))
        for i in ids:
            answers = leader[f"rf.ans.{i}.r"]
            gaps = []
            for recv in f.get("repl.recv", [])[:1000]:
                j = bisect.bisect_right(answers, recv) - 1
                if j >= 0:
                    gaps.append(recv - answers[j])
            gap = sorted(gaps)[len(gaps) // 2] if gaps else float("inf")
            if gap < best[1]:
                best = (i, gap)
        out.append(best[0])
    return out


def _trace(
    leader: Marks, followers: list[tuple[str, Marks]], sent: int, acked: int
) -> list[float] | None:
    """One message's spans in microseconds (see :data:`ROWS`), or None if a mark is
    missing."""
    req = _after(leader["req.produce"], sent)
    append = _after(leader["append"], req)
    fsync_start = _after(leader.get("fsync.start", []), append)
    fsync_end = _after(leader.get("fsync.end", []), fsync_start)
    chains: list[list[int]] = []
    for fid, f in followers:
        answer = _after(leader.get(f"rf.ans.{fid}.r", []), append)
        got = _after(f.get("repl.recv", []), answer)
        fetched = _after(f["repl.fetched"], got)
        flushed = _after(f.get("repl.flushed", []), fetched)
        asked = _after(f.get("repl.ask", []), flushed)
        written = _after(f.get("repl.send", []), asked)
        read = _after(leader.get(f"rf.ask.{fid}", []), written)
        chain = [answer, got, fetched, flushed, asked, written, read]
        if None in chain:
            return None
        chains.append([t for t in chain if t is not None])
    if not chains:
        return None
    last = max(chains, key=lambda c: c[-1])  # the report that came last
    hw = _after(leader.get("hw", []), last[-1])
    done = _after(leader.get("acked", []), hw)
    # (an answer its commit wrote, the request answered from the reader callback: uncorked)
    answers = leader.get("resp.produce", []) + leader.get("resp.uncorked", [])
    resp = _after(sorted(answers), done)
    points = [sent, req, append, *last, hw]
    tail = [append, fsync_start, fsync_end, hw, done, resp, acked]
    if None in points or None in tail:
        return None
    spans = [b - a for a, b in itertools.pairwise(p for p in points if p is not None)]
    t = [x for x in tail if x is not None]
    spans += [t[1] - t[0], t[2] - t[1], t[4] - t[3], t[5] - t[4], t[6] - t[5]]
    return [x / 1000 for x in spans]


def _breakdown(processes: list[Marks], sends: list[int], acks: list[int]) -> dict[str, list[float]]:
    """Per row, the microseconds of each message."""
    leader = max(processes, key=lambda m: len(m.get("req.produce", [])))
    followers = [m for m in processes if m is not leader and m.get("repl.fetched")]
    named = list(zip(_follower_ids(leader, followers), followers, strict=True))
    rows: dict[str, list[float]] = defaultdict(list)
    for sent, acked in zip(sends, acks, strict=True):
        spans = _trace(leader, named, sent, acked)
        if spans is None:
            continue
        for row, value in zip(ROWS, spans, strict=True):
            rows[row].append(value)
        rows["end to end"].append((acked - sent) / 1000)
    return rows


def run(quick: bool) -> None:
    """Measure RF 3 ack ALL and print its breakdown."""
    rate, seconds = (200, 3.0) if quick else (200, 10.0)
    total = int(rate * seconds)
    marks, sends, acks = traced(rate, total)
    rows = _breakdown(list(marks.values()), sends, acks)
    print(f"\nRF 3, ack ALL, durability=flushed: {rate} msg/s for {seconds:g} s, 100 B, linger 0")
    print(f"  ({len(rows['end to end'])} of {total} messages traced through every hop)")
    print(f"    {'hop':<52} {'p50 us':>9} {'p99 us':>9}")
    for row in (*ROWS, "end to end"):
        values = rows.get(row, [])
        print(f"    {row:<52} {pct(values, 0.5):>9.0f} {pct(values, 0.99):>9.0f}")
