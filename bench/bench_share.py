"""Share groups: jet ShareConsumer vs JetStream pull consumers on a work-queue stream.

(a) throughput: N stored 100-byte messages, every message acked one by one, both sides read in
    batches of :data:`BATCH` (jet ``consumer.fetch(BATCH)``, JetStream ``sub.fetch(BATCH)``)
    and ack each message. Two harnesses, the same for both sides:

    - **4 processes**: 4 worker processes (``python -m bench.bench_share worker SPEC``),
      started by the coordinator and told to go with a file. jet: one share group on a stream
      of 4 partitions (ShareConsumer defaults). JetStream: one durable pull consumer with
      explicit acks on a fresh work-queue stream. Rate = N / (the end - the first message
      received, over all workers); the end is the same event on both sides, every ack
      applied by the server, seen by the coordinator: jet, acks of all N messages stored in
      the share log (ack ALL) and read back by a reader of it; JetStream, the work-queue
      stream empty (asked every 5 ms).
    - **3 consumers in one process**: 3 ShareConsumers on one Client (jet), 3 pull
      subscriptions of one durable on one connection (JetStream), each in its own task.
      Rate = N / (the end - the first message received; the task that acks the last
      message cancels the others' ``fetch()`` waits); the end is when jet's acks are
      stored and read back (``flush()``), when JetStream's acks have reached its server
      (``nc.flush()``) and its work-queue stream is empty (every ack applied). Printed
      beside: CPU seconds per message of this process and every server (jet server and its
      nats-server, JetStream's nats-server), from ``/proc``: on a loaded machine a steadier
      comparison than the rates.

    The acks are not the same. **jet** stores each ack in the share log (batched into settle
    records every ``ack_interval``, 20 ms, appended with ack ALL: replicated and durable before
    ``flush()`` returns); a stored ack survives any server's crash. **JetStream's ``ack()``**
    is fire-and-forget: a publish with no reply; one lost on the way is not retried and the
    message is delivered again after ``ack_wait``. **``ack_sync()``** waits for the server's
    reply to each ack (one round trip per message): the row "vs ack_sync" compares with that.
    Rounds alternate the sides (jet, ack, ack_sync, then the reverse order); each row prints
    the median of the rounds, its target and whether it is met. Printed beside: messages
    delivered more than once (jet) and the share log's bytes per acked message.
(b) redelivery after SIGKILL: 4 workers, a producer at 1,000 msg/s, 1 ms per message, ack
    deadline (jet) / ack_wait (JetStream) 2 s; one worker is killed with SIGKILL while it
    processes; time from the kill until every message it had received and not finished is
    processed by another worker. Target (issue 14): within the ack deadline + 0.5 s.
    Skipped with ``--quick``.

Run: ``python -m bench share [--quick]`` (``nox -s bench -- share``). ``--quick``: 20,000
messages, 1 round, no (b); under a minute.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
import uuid
from collections.abc import Awaitable, Callable
from functools import partial
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import attrs
import orjson

from bench.bench_groups import (
    Round,
    js_durable,
    redelivery_after_kill,
    run_side_by_side,
    worker_main,
)
from bench.bench_sdk import Results, jet_fill, js_fill
from bench.worker_io import Tally, js_fetch, js_pull, ready, send_paced
from jetsdk import Client, ShareConsumer
from jetsdk.codec.record import iter_records
from jetsdk.errors import StreamNotFound
from jetsdk.share.state import ShareState

DEADLINE = 2.0
WORKERS = 4
IN_PROCESS = 3
BATCH = 500
TARGET = 3.0
"""The ratio issue 33 asks for against JetStream's work-queue with ``ack()``."""
WAIT_S = 300.0
DURABILITY = (
    "acks: jet stores every ack in the share log (settle records every 20 ms, Produce with "
    "ack ALL, durable and replicated); JetStream ack() is fire-and-forget (no reply, a lost "
    "ack means a redelivery after ack_wait); ack_sync() waits for the server's reply per ack"
)


# -- workers (child processes) ---------------------------------------------------------------


async def _share_worker(spec: dict[str, Any], out: Any) -> None:
    stop, go = Path(spec["stop"]), Path(spec["go"])
    delay = spec.get("delay", 0.0)
    track = spec.get("track", False)
    async with Client(spec["servers"]) as client:
        ready(out, go)
        tally = Tally(out)
        async with ShareConsumer(
            client, spec["stream"], group=spec["group"], ack_deadline=spec.get("deadline", 30.0)
        ) as consumer:
            while not stop.exists():  # noqa: ASYNC240 - a stat per batch
                batch = await consumer.fetch(1 if track else BATCH, timeout=0.2)
                now = time.time()
                for msg in batch:
                    if track:
                        out.write(f"got {msg.partition}:{msg.offset} {now:.4f}\n")
                        out.flush()
                    if delay:
                        await anyio.sleep(delay)
                    if track:
                        out.write(f"done {msg.partition}:{msg.offset} {time.time():.4f}\n")
                        out.flush()
                    msg.ack()
                tally.got(len(batch), now, time.time())
                tally.progress(now)
            await consumer.flush()
        tally.result()


async def _js_worker(spec: dict[str, Any], out: Any) -> None:
    stop = Path(spec["stop"])
    async with js_pull(spec, out) as (sub, tally):
        while not stop.exists():  # noqa: ASYNC240 - a stat per batch
            msgs = await js_fetch(sub, BATCH)
            now = time.time()
            for m in msgs:
                await (m.ack_sync() if spec["ack_sync"] else m.ack())
            tally.got(len(msgs), now, time.time())
            tally.progress(now)


async def _share_producer(spec: dict[str, Any], out: Any) -> None:
    from jetsdk import Producer

    stop, go = Path(spec["stop"]), Path(spec["go"])
    rate = spec["rate"]
    async with Client(spec["servers"]) as client, Producer(client, spec["stream"]) as p:
        ready(out, go)
        await send_paced(partial(p.send_soon, b"x" * 100), rate, stop)


def share_worker_main(raw: str) -> None:
    spec = orjson.loads(raw)
    kinds = {"share": _share_worker, "share-js": _js_worker, "share-produce": _share_producer}
    with open(spec["out"], "a") as out:
        anyio.run(kinds[spec["kind"]], spec, out, backend="asyncio")


class ShareRound(Round):
    """bench_groups' Round, spawning share workers from this module."""

    def worker_module(self, spec: dict[str, Any]) -> str:
        """Share workers run from this module, the others from bench_groups."""
        if spec["kind"].startswith("share"):
            return "bench.bench_share"
        return super().worker_module(spec)


# -- the 4-process harness -------------------------------------------------------------------


POLL_S = 0.005
"""How often the coordinator asks JetStream whether its work-queue stream is empty."""


async def _jet_all_acked(servers: list[str], group: str, n: int, failed: Any) -> float:
    """When (``time.time()``) the share log of ``group`` holds acks of ``n`` messages:
    every ack stored (ack ALL) and read back by a reader of the log."""
    log = f"__share.{group}"
    state = ShareState(group)
    async with Client(servers) as client:
        with anyio.fail_after(WAIT_S):
            return await _tail_acks(client, log, state, n, failed)


async def _tail_acks(client: Client, log: str, state: ShareState, n: int, failed: Any) -> float:
    offset = 0
    while True:
        if failed():
            raise RuntimeError("a worker failed")
        try:
            _, raw = await client.fetch(log, 0, offset, max_bytes=4 << 20, max_wait=0.05)
        except StreamNotFound:  # no member has created it yet
            await anyio.sleep(POLL_S)
            continue
        for record in iter_records(raw):
            state.apply_bytes(record.offset, record.timestamp, record.value)
            offset = record.offset + 1
        if sum(ps.acked_total for ps in state.partitions.values()) >= n:
            return time.time()


async def _js_all_acked(js_url: str, name: str, failed: Any) -> float:
    """When (``time.time()``) JetStream's work-queue stream ``name`` is empty: every message
    acked and the ack applied by the server."""
    import nats

    nc = await nats.connect(js_url)
    try:
        with anyio.fail_after(WAIT_S):
            return await _js_empty(nc.jetstream(), name, failed)
    finally:
        await nc.close()


async def _js_empty(js: Any, name: str, failed: Any) -> float:
    while True:
        if failed():
            raise RuntimeError("a worker failed")
        info = await js.stream_info(name)
        if info.state.messages == 0:
            return time.time()
        await anyio.sleep(POLL_S)


def _processes(work: Path, spec: dict[str, Any], n: int) -> tuple[float, int]:
    """(messages/s from the first message received until every ack is applied by the server,
    duplicates): the coordinator watches for that end on both sides (jet: acks of all ``n``
    messages stored in the share log and read back; JetStream: the work-queue stream empty,
    every ack applied), so the two figures end at the same event."""
    rnd = ShareRound(work)
    for _ in range(WORKERS):
        rnd.spawn(spec)
    rnd.wait_ready()
    rnd.go.touch()
    try:
        if spec["kind"] == "share":
            waits = partial(_jet_all_acked, spec["servers"], spec["group"], n, rnd.failed)
        else:
            waits = partial(_js_all_acked, spec["url"], spec["js_stream"], rnd.failed)
        end = anyio.run(waits, backend="asyncio")
    except BaseException:
        rnd.finish()
        raise
    results = rnd.finish()
    busy = [r for r in results if r["count"]]
    first = min(r["first"] for r in busy)
    total = sum(r["count"] for r in results)
    return n / (end - first), max(0, total - n)


# -- the in-process harness (3 consumers in this process) ------------------------------------


def _cpu() -> float:
    """CPU seconds used so far by this process and its live descendants (the jet server, the
    nats-servers): per message, a figure a loaded machine distorts less than a rate."""
    total = time.process_time()
    children: dict[int, list[int]] = {}
    used: dict[int, float] = {}
    tick = os.sysconf("SC_CLK_TCK")
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(entry))
        used[int(entry)] = (int(fields[11]) + int(fields[12])) / tick
    todo = list(children.get(os.getpid(), []))
    while todo:
        pid = todo.pop()
        total += used.get(pid, 0.0)
        todo.extend(children.get(pid, []))
    return total


@attrs.define
class Trips:
    """Requests one Client sends, by kind (the share log's appends and reads, the consumed
    partitions' high-watermark polls and record loads), and their summed wait: where three
    in-process consumers spend their round trips."""

    counts: dict[str, int] = attrs.field(factory=dict)
    waits: dict[str, float] = attrs.field(factory=dict)

    def watch(self, client: Client) -> None:
        fetch, produce = client.fetch, client.produce

        async def counted_fetch(stream: str, partition: int, offset: int, **kw: Any) -> Any:
            t = time.perf_counter()
            try:
                return await fetch(stream, partition, offset, **kw)
            finally:
                log = stream.startswith("__share.")
                kind = "log read" if log else "hw poll" if kw["max_bytes"] == 1 else "load"
                self._add(kind, time.perf_counter() - t)

        async def counted_produce(request: Any) -> Any:
            t = time.perf_counter()
            try:
                return await produce(request)
            finally:
                shared = request.stream.startswith("__share.")
                self._add("log append" if shared else "produce", time.perf_counter() - t)

        client.fetch = counted_fetch  # type: ignore[method-assign]
        client.produce = counted_produce  # type: ignore[method-assign,assignment]

    def _add(self, kind: str, wait: float) -> None:
        self.counts[kind] = self.counts.get(kind, 0) + 1
        self.waits[kind] = self.waits.get(kind, 0.0) + wait

    def summary(self, n: int) -> str:
        return ", ".join(
            f"{kind} {count * 1000 / n:.1f}/1k msgs ({self.waits[kind] / count * 1e3:.1f} ms)"
            for kind, count in sorted(self.counts.items())
        )


async def _until_one_is_done(items: list[Any], work: Callable[[Any], Awaitable[None]]) -> None:
    """``work(item)`` for every item at once; the first to return cancels the others (their
    fetch() waits are not part of the run)."""
    async with anyio.create_task_group() as tg:

        async def one(item: Any) -> None:
            await work(item)
            tg.cancel_scope.cancel()

        for item in items:
            tg.start_soon(one, item)


async def _jet_in_process(
    servers: list[str], stream: str, group: str, n: int
) -> tuple[float, int, float, str]:
    """(msg/s, messages delivered twice, CPU seconds of every process per message, where the
    consumers waited: the share of their time inside ``fetch()`` and the round trips)."""
    got = 0
    first = 0.0
    waited = 0.0
    trips = Trips()
    async with Client(servers) as client, contextlib.AsyncExitStack() as stack:
        consumers = [
            await stack.enter_async_context(ShareConsumer(client, stream, group=group))
            for _ in range(IN_PROCESS)
        ]
        trips.watch(client)
        cpu = _cpu()

        async def work(consumer: ShareConsumer) -> None:
            nonlocal got, first, waited
            while got < n:
                t = time.perf_counter()
                batch = await consumer.fetch(BATCH, timeout=0.2)
                if first:
                    waited += time.perf_counter() - t
                elif batch:
                    first = time.perf_counter()
                for msg in batch:
                    msg.ack()
                got += len(batch)

        with anyio.fail_after(WAIT_S):
            await _until_one_is_done(consumers, work)
            done = time.perf_counter()
            async with anyio.create_task_group() as tg:
                for c in consumers:
                    tg.start_soon(c.flush)
        end = time.perf_counter()
        cpu = _cpu() - cpu
    note = (
        f"waited in fetch() {waited / (IN_PROCESS * (done - first)):.0%} of the time, "
        f"final flush {(end - done) * 1e3:.0f} ms; {trips.summary(n)}"
    )
    return n / (end - first), max(0, got - n), cpu / n, note


async def _js_in_process(
    url: str, stream: str, durable: str, n: int, ack_sync: bool
) -> tuple[float, float]:
    """(msg/s, CPU seconds of every process per message)."""
    import nats
    import nats.errors

    got = 0
    first = 0.0
    nc = await nats.connect(url)
    try:
        js = nc.jetstream()
        subs = [
            await js.pull_subscribe_bind(durable=durable, stream=stream) for _ in range(IN_PROCESS)
        ]
        cpu = _cpu()

        async def work(sub: Any) -> None:
            nonlocal got, first
            while got < n:
                try:
                    msgs = await sub.fetch(batch=BATCH, timeout=0.2)
                except (nats.errors.TimeoutError, TimeoutError):
                    continue
                if not first:
                    first = time.perf_counter()
                for m in msgs:
                    await (m.ack_sync() if ack_sync else m.ack())
                got += len(msgs)

        with anyio.fail_after(WAIT_S):
            await _until_one_is_done(subs, work)
            await nc.flush()
            await _js_empty(js, stream, lambda: False)  # every ack applied
        end = time.perf_counter()
        cpu = _cpu() - cpu
    finally:
        await nc.close()
    return n / (end - first), cpu / n


# -- coordinator -----------------------------------------------------------------------------


async def _prepare(servers: list[str], n: int) -> None:
    async with Client(servers) as client:
        await client.create_stream("share4", "bench.share4", partitions=4)
        await jet_fill(client, "share4", n)
        await client.create_stream("sharelive", "bench.sharelive", partitions=4)


async def _work_queue(js_url: str, name: str, n: int) -> None:
    """A fresh work-queue stream (acked messages leave it) with one durable, ``name``."""
    import nats
    from nats.js.api import RetentionPolicy, StorageType, StreamConfig

    nc = await nats.connect(js_url)
    js = nc.jetstream(publish_async_max_pending=20_000)
    subject = f"js.{name.lower()}"
    config = StreamConfig(
        name=name,
        subjects=[subject],
        storage=StorageType.FILE,
        retention=RetentionPolicy.WORK_QUEUE,
    )
    await js.add_stream(config)
    await js_fill(js, subject, n)
    await nc.close()
    await js_durable(js_url, name, name.lower(), 30.0)


async def _share_log_bytes(servers: list[str], group: str) -> int:
    async with Client(servers) as client:
        info = await client.describe_stream(f"__share.{group}")
        return sum(p.size_bytes or 0 for p in info.partitions)


def _loadavg() -> str:
    with contextlib.suppress(OSError):
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    return "n/a"


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def _round(
    harness: str,
    side: str,
    servers: list[str],
    js_url: str,
    work: Path,
    n: int,
    cpus: dict[str, list[float]],
) -> tuple[float, str]:
    """One measurement: (msg/s, a note); in one process, the CPU seconds of every process
    (this one and the servers) per message are added to ``cpus[side]``."""
    if side == "jet":
        group = f"g{uuid.uuid4().hex[:6]}"
        extra = ""
        if harness == "proc":
            spec = {"kind": "share", "servers": servers, "stream": "share4", "group": group}
            rate, dups = _processes(work, spec, n)
        else:
            rate, dups, cpu, waits = anyio.run(
                _jet_in_process, servers, "share4", group, n, backend="asyncio"
            )
            cpus.setdefault(side, []).append(cpu)
            extra = f", {cpu * 1e6:.1f} us CPU per message\n    {waits}"
        size = anyio.run(_share_log_bytes, servers, group, backend="asyncio")
        note = f"delivered twice {dups}, share log {size / n:.2f} B per acked message"
        return rate, note + extra
    name = f"SH{uuid.uuid4().hex[:6].upper()}"
    anyio.run(_work_queue, js_url, name, n, backend="asyncio")
    sync = side == "ack_sync"
    if harness == "proc":
        js_spec: dict[str, Any] = {
            "kind": "share-js",
            "url": js_url,
            "js_stream": name,
            "durable": name.lower(),
            "ack_sync": sync,
        }
        rate, _ = _processes(work, js_spec, n)
        return rate, ""
    rate, cpu = anyio.run(_js_in_process, js_url, name, name.lower(), n, sync, backend="asyncio")
    cpus.setdefault(side, []).append(cpu)
    return rate, f"{cpu * 1e6:.1f} us CPU per message"


def _throughput(quick: bool, servers: list[str], js_url: str, work: Path, results: Results) -> None:
    n = 20_000 if quick else 200_000
    rounds = 1 if quick else 3
    print(f"(a) throughput, {n:,} x 100 B, every message acked, fetch({BATCH}); {rounds} round(s)")
    print(f"  {DURABILITY}")
    print(f"  load average before: {_loadavg()}")
    anyio.run(_prepare, servers, n, backend="asyncio")
    sides = ["jet", "ack", "ack_sync"]
    labels = {
        "proc": f"{WORKERS} processes",
        "inproc": f"{IN_PROCESS} consumers, 1 process",
    }
    cpus: dict[str, list[float]] = {}
    for harness, label in labels.items():
        rates: dict[str, list[float]] = {side: [] for side in sides}
        for r in range(rounds):
            for side in sides if r % 2 == 0 else reversed(sides):
                rate, note = _round(harness, side, servers, js_url, work, n, cpus)
                rates[side].append(rate)
                shown = "jet" if side == "jet" else f"JetStream {side}()"
                print(f"  {label}, round {r + 1}, {shown}: {rate:,.0f} msg/s {note}".rstrip())
        med = {side: _median(v) for side, v in rates.items()}
        results.add(f"{label}, vs ack()", med["jet"], med["ack"], "msg/s", True, TARGET)
        results.add(
            f"{label}, vs ack_sync()",
            med["jet"],
            med["ack_sync"],
            "msg/s",
            True,
            TARGET,
        )
    print(f"  load average after: {_loadavg()}")
    cpu = {side: _median(v) * 1e6 for side, v in cpus.items()}
    results.notes.append(
        f"CPU per message, {IN_PROCESS} consumers in one process (this process and every "
        f"server, median): jet {cpu['jet']:.1f} us, JetStream ack() {cpu['ack']:.1f} us "
        f"({cpu['ack'] / cpu['jet']:.2f}x), ack_sync() {cpu['ack_sync']:.1f} us "
        f"({cpu['ack_sync'] / cpu['jet']:.2f}x); a loaded machine distorts it less than a rate"
    )
    results.notes.append(DURABILITY)


def _redelivery(servers: list[str], js_url: str, work: Path, results: Results) -> None:
    print(f"(b) redelivery after SIGKILL: {WORKERS} workers, 1,000 msg/s, deadline {DEADLINE} s")
    group = f"g{uuid.uuid4().hex[:6]}"
    jet_worker = {
        "kind": "share",
        "servers": servers,
        "stream": "sharelive",
        "group": group,
        "deadline": DEADLINE,
    }
    jet_prod = {"kind": "share-produce", "servers": servers, "stream": "sharelive", "rate": 1000}
    jet_s = redelivery_after_kill(ShareRound(work), jet_worker, jet_prod, WORKERS)
    anyio.run(_add_live, js_url, backend="asyncio")
    durable = f"d{uuid.uuid4().hex[:6]}"
    anyio.run(js_durable, js_url, "SHLIVE", durable, DEADLINE, backend="asyncio")
    js_worker = {"kind": "js", "url": js_url, "js_stream": "SHLIVE", "durable": durable}
    js_prod = {"kind": "js-produce", "url": js_url, "subject": "js.shlive", "rate": 1000}
    js_s = redelivery_after_kill(ShareRound(work), js_worker, js_prod, WORKERS)
    results.add(
        "killed worker's messages done again after, s",
        jet_s,
        js_s,
        "s",
        False,
        jet_at_most=DEADLINE + 0.5,
    )


async def _add_live(js_url: str) -> None:
    import nats

    nc = await nats.connect(js_url)
    await nc.jetstream().add_stream(name="SHLIVE", subjects=["js.shlive"])
    await nc.close()


def _main(quick: bool, servers: list[str], js_url: str, work: Path) -> None:
    results = Results()
    _throughput(quick, servers, js_url, work, results)
    if not quick:
        _redelivery(servers, js_url, work, results)
    results.table()


def run(quick: bool) -> None:
    """Run (a) (and (b) unless quick) and print them side by side with ratios."""
    run_side_by_side(_main, quick, "bench-share-")


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "worker":
        spec_kind = orjson.loads(sys.argv[2])["kind"]
        if spec_kind.startswith("share"):
            share_worker_main(sys.argv[2])
        else:
            worker_main(sys.argv[2])
    else:
        run(quick="--quick" in sys.argv)
