"""Share groups: jet ShareConsumer workers vs JetStream pull consumers with explicit acks.

Every worker is its own process, started by the coordinator (this module's ``run``) with the
``Round`` helper of bench_groups; they report in their output files.

(a) throughput: N stored 100-byte messages, 4 worker processes, every message acked one by one.
    jet: one share group on a stream of 1, then 4 partitions (ShareConsumer defaults: ranges
    of 200, settles every 20 ms). JetStream: one durable pull consumer with explicit acks
    (``fetch(1000)``, ``await msg.ack()`` per message) on a work-queue stream and on a
    limits stream. Rate = N / (time the last worker reached the total - first message).
    Printed beside it: messages delivered more than once, and the share log's bytes per
    acked message (its size after the run / N).
(b) redelivery after SIGKILL: 4 workers, a producer at 1,000 msg/s, 1 ms per message, ack
    deadline (jet) / ack_wait (JetStream) 2 s; one worker is killed with SIGKILL while it
    processes; time from the kill until every message it had received and not finished is
    processed by another worker. Target (issue 14): within the ack deadline + 0.5 s.

Run: ``python -m bench share [--quick]``.
"""

from __future__ import annotations

import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import anyio
import orjson

from bench.bench_groups import (
    ROOT,
    Round,
    js_durable,
    redelivery_after_kill,
    run_side_by_side,
    worker_main,
)
from bench.bench_sdk import Results, jet_fill, js_fill, js_setup
from jetsdk import Client, ShareConsumer

DEADLINE = 2.0
WORKERS = 4
WAIT_S = 300.0


# -- the jet share worker (a child process) ------------------------------------------------


async def _share_worker(spec: dict[str, Any], out: Any) -> None:
    stop, go = Path(spec["stop"]), Path(spec["go"])
    delay = spec.get("delay", 0.0)
    track = spec.get("track", False)
    async with Client(spec["servers"]) as client:
        out.write("ready\n")
        out.flush()
        while not go.exists():  # noqa: ASYNC110, ASYNC240 - a go file, polled briefly
            await anyio.sleep(0.002)
        count, first, last = 0, 0.0, 0.0
        next_progress = 0.0
        async with ShareConsumer(
            client, spec["stream"], group=spec["group"], ack_deadline=spec.get("deadline", 30.0)
        ) as consumer:
            while not stop.exists():  # noqa: ASYNC240 - a stat per message batch
                msg = await consumer.next(timeout=0.2)
                now = time.time()
                if msg is not None:
                    if track:
                        out.write(f"got {msg.partition}:{msg.offset} {now:.4f}\n")
                        out.flush()
                    if delay:
                        await anyio.sleep(delay)
                    if track:
                        out.write(f"done {msg.partition}:{msg.offset} {time.time():.4f}\n")
                        out.flush()
                    await msg.ack()
                    count += 1
                    first = first or now
                    last = now
                if now >= next_progress:
                    out.write(f"progress {count}\n")
                    out.flush()
                    next_progress = now + 0.1
            await consumer.flush()
        out.write(f"progress {count}\n")
        out.write("result " + orjson.dumps({"count": count, "first": first, "last": last}).decode())
        out.write("\n")


async def _share_producer(spec: dict[str, Any], out: Any) -> None:
    from jetsdk import Producer

    stop, go = Path(spec["stop"]), Path(spec["go"])
    rate = spec["rate"]
    async with Client(spec["servers"]) as client, Producer(client, spec["stream"]) as p:
        out.write("ready\n")
        out.flush()
        while not go.exists():  # noqa: ASYNC110, ASYNC240
            await anyio.sleep(0.002)
        start, i = time.perf_counter(), 0
        while not stop.exists():  # noqa: ASYNC240
            await p.send_soon(b"x" * 100)
            i += 1
            pause = start + i / rate - time.perf_counter()
            if pause > 0:
                await anyio.sleep(pause)


def share_worker_main(raw: str) -> None:
    spec = orjson.loads(raw)
    kinds = {"share": _share_worker, "share-produce": _share_producer}
    with open(spec["out"], "a") as out:
        anyio.run(kinds[spec["kind"]], spec, out, backend="asyncio")


class ShareRound(Round):
    """bench_groups' Round, spawning share workers from this module."""

    def spawn(self, spec: dict[str, Any]) -> int:
        if not spec["kind"].startswith("share"):
            return super().spawn(spec)
        out = self.dir / f"w{len(self.procs)}.log"
        spec = {**spec, "go": str(self.go), "stop": str(self.stop), "out": str(out)}
        args = [sys.executable, "-m", "bench.bench_share", "worker", orjson.dumps(spec).decode()]
        proc = subprocess.Popen(args, cwd=ROOT, stdin=subprocess.DEVNULL)
        self.procs.append((proc, out))
        return len(self.procs) - 1


# -- coordinator ---------------------------------------------------------------------------


def _throughput(work: Path, specs: list[dict[str, Any]], n: int) -> tuple[float, int]:
    """(messages/s from the first message until the workers' counts reach n, duplicates)."""
    rnd = ShareRound(work)
    for spec in specs:
        rnd.spawn(spec)
    rnd.wait_ready()
    rnd.go.touch()
    deadline = time.monotonic() + WAIT_S
    while sum(rnd.progress(i) for i in range(len(specs))) < n:
        if time.monotonic() > deadline or rnd.failed():
            rnd.finish()
            raise RuntimeError("consumption did not finish (a worker failed, or timed out)")
        time.sleep(0.05)
    done_at = time.time()
    results = rnd.finish()
    first = min(r["first"] for r in results if r["count"])
    total = sum(r["count"] for r in results)
    return n / (done_at - first), max(0, total - n)


def _redelivery(work: Path, worker: dict[str, Any], producer: dict[str, Any]) -> float:
    """Seconds from a worker's SIGKILL until everything it held is processed by others."""
    return redelivery_after_kill(ShareRound(work), worker, producer, WORKERS)


async def _prepare(servers: list[str], js_url: str, n: int) -> None:
    async with Client(servers) as client:
        for parts in (1, 4):
            await client.create_stream(f"share{parts}", f"bench.share{parts}", partitions=parts)
            await jet_fill(client, f"share{parts}", n)
        await client.create_stream("sharelive", "bench.sharelive", partitions=4)
    nc, js = await js_setup(js_url, "SHLIMITS", "js.shlimits")
    await js.add_stream(name="SHLIVE", subjects=["js.shlive"])
    await js_fill(js, "js.shlimits", n)
    await nc.close()


async def _work_queue(js_url: str, name: str, n: int) -> None:
    """A fresh work-queue stream per round (acked messages leave it; one consumer only)."""
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


async def _share_log_bytes(servers: list[str], group: str) -> int:
    async with Client(servers) as client:
        info = await client.describe_stream(f"__share.{group}")
        return sum(p.size_bytes or 0 for p in info.partitions)


def _main(quick: bool, servers: list[str], js_url: str, work: Path) -> None:
    n = 40_000 if quick else 200_000
    rounds = 1 if quick else 3
    results = Results()
    print(f"(a) throughput, {n:,} x 100 B, {WORKERS} worker processes, each message acked")
    anyio.run(_prepare, servers, js_url, n, backend="asyncio")
    rates: dict[str, list[float]] = {}
    notes: list[str] = []
    for r in range(rounds):
        for parts in (1, 4):
            group = f"g{uuid.uuid4().hex[:6]}"
            spec = {"kind": "share", "servers": servers, "stream": f"share{parts}", "group": group}
            rate, dups = _throughput(work, [spec] * WORKERS, n)
            size = anyio.run(_share_log_bytes, servers, group, backend="asyncio")
            rates.setdefault(f"jet{parts}", []).append(rate)
            notes.append(
                f"round {r + 1}, {parts} partition(s): {rate:,.0f} msg/s, delivered twice {dups}, "
                f"share log {size:,} B = {size / n:.2f} B per acked message"
            )
            print(f"  {notes[-1]}")
        anyio.run(_work_queue, js_url, f"SHWQ{r}", n, backend="asyncio")
        for stream in (f"SHWQ{r}", "SHLIMITS"):
            durable = f"d{uuid.uuid4().hex[:6]}"
            anyio.run(js_durable, js_url, stream, durable, 30.0, backend="asyncio")
            spec = {"kind": "js", "url": js_url, "js_stream": stream, "durable": durable}
            rate, _ = _throughput(work, [spec] * WORKERS, n)
            rates.setdefault(stream.rstrip("0123456789"), []).append(rate)
            print(f"  round {r + 1}, JetStream {stream}: {rate:,.0f} msg/s")
    med = {k: sorted(v)[len(v) // 2] for k, v in rates.items()}
    for parts in (1, 4):
        for stream, label in (("SHWQ", "work-queue"), ("SHLIMITS", "limits")):
            results.add(
                f"{parts} partition(s) vs {label} (median)",
                med[f"jet{parts}"],
                med[stream],
                "msg/s",
                True,
                3.0,
            )
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
    jet_s = _redelivery(work, jet_worker, jet_prod)
    durable = f"d{uuid.uuid4().hex[:6]}"
    anyio.run(js_durable, js_url, "SHLIVE", durable, DEADLINE, backend="asyncio")
    js_worker = {"kind": "js", "url": js_url, "js_stream": "SHLIVE", "durable": durable}
    js_prod = {"kind": "js-produce", "url": js_url, "subject": "js.shlive", "rate": 1000}
    js_s = _redelivery(work, js_worker, js_prod)
    verdict = "met" if jet_s <= DEADLINE + 0.5 else "NOT met"
    print(f"  jet {jet_s:.2f} s after the kill (target <= {DEADLINE + 0.5:.1f} s: {verdict})")
    results.add("killed worker's messages done again after, s", jet_s, js_s, "s", False)
    results.table()


def run(quick: bool) -> None:
    """Run (a) and (b) and print them side by side with ratios."""
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
