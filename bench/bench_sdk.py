"""jetsdk through a jet server vs NATS JetStream through nats-py, side by side in one run.

Both sides use the same nats-server binary (JetStream on its own nats-server with ``-js``
and a temporary store, file storage, one replica) and run in one Python process on the
asyncio backend (nats-py is asyncio-only):

(a) acked publish throughput, 100-byte values, ack LEADER, RF=1: ``Producer.send_soon`` +
    ``flush`` vs ``js.publish_async`` + ``publish_async_completed``, both with a window of
    4000 unacknowledged messages;
(b) consume N stored messages from offset 0 (1M; quick: 100k): ``Consumer.fetch`` vs a
    JetStream ordered push consumer and a pull consumer ``fetch(batch=1000)`` (no acks);
(c) publish -> consume latency p50/p99 at 500 and 5,000 msg/s (producer and consumer in this
    process, one clock), ROUNDS rounds alternating the sides, the median of the per-round
    figures: linger 0 on the jet side. A jet consumer only sees records once they are
    fsynced (committed at RF=1), a JetStream consumer as soon as the message is in the
    store, fsynced or not; so jet (default durability) is compared with JetStream
    ``sync_interval: always`` (durable when delivered, like jet), jet with
    ``durability="written"`` (RF 1: visible once written, before the fsync) with
    JetStream's default (``sync_interval`` 2 min: not durable when delivered), and, for
    reference, jet fsynced against JetStream's default;
(d) ack ALL (fsynced group commit on the leader) vs JetStream with ``sync_interval:
    always`` (fsync per write), same window as (a).

Before (c) and (d) the page cache is written back (``os.sync``, its duration printed), so
that the fsyncs measured there do not queue behind the writeback of what (b) wrote (about
100 MB per side; JetStream's default store flushes only every two minutes).
Before (c) this process's heap is collected once and frozen (:mod:`bench.heap`): its full
collections then walk what the clients made since, not the test kit, nats-py and what (a)
and (b) left, which cost 32-60 ms of CPU each in (c)'s 5,000 msg/s rounds.

The machine may be shared and noisy: (a) and (d) first run each side once untimed (a
warm-up of WARMUP messages: connections, first segment, code paths), then ROUNDS rounds
alternating jet and JetStream, and report each side's best round and the median of the
per-round ratios, the steadier figure (every round is printed, with the load average and
CPU per message: both clients, and the jet server from /proc on Linux). Both sides use the
same payload size, the same window of unacknowledged messages, the same nats-server binary,
and run their clients in this one process on asyncio.

Ratios are jet / JetStream for throughput (above 1 = jet faster) and JetStream / jet for
latency (above 1 = jet faster). ``JET_BENCH_PROFILE=1`` adds a cProfile of the client side of
(a) and (b). Run: ``python -m bench sdk [--quick]``.
"""

from __future__ import annotations

import cProfile
import io
import os
import pstats
import shutil
import statistics
import subprocess
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anyio
import orjson

from bench.heap import full_collections, settle_heap
from bench.pacing import paced
from bench.stats import pct, ratio_text
from jetsdk import AckPolicy, Client, Consumer, Producer
from jetsdk.producer.compression_stage import DEFAULT_OFFLOAD_BYTES
from jetserver.testing import find_nats_server
from jetserver.testing.devcluster import DevCluster

VALUE = b"x" * 100
WINDOW = 4000
SETTLE_TIMEOUT_S = 600.0
ROUNDS = 5
"""Alternating jet/JetStream rounds of (a) and (d); the best of each side is reported."""
QUICK_ROUNDS = 3
WARMUP = 2000
"""Messages each side publishes untimed before the rounds of (a) and (d)."""


JETSTREAM_PIDS: dict[str, int] = {}
"""The process id of each running :func:`jetstream_server`, by its URL (to read its CPU)."""


@contextmanager
def jetstream_server(*, sync_always: bool) -> Iterator[str]:
    """A nats-server with JetStream on a free port; yields its URL; stopped by PID."""
    work = Path(tempfile.mkdtemp(prefix="bench-js-"))
    ports = work / "ports"
    ports.mkdir()
    sync = "\n  sync_interval: always" if sync_always else ""
    (work / "js.conf").write_text(
        f'max_payload: 8388608\njetstream {{\n  store_dir: "{work / "store"}"{sync}\n}}\n'
    )
    binary = find_nats_server()
    log = open(work / "log", "wb")  # noqa: SIM115 - closed below
    args = [binary, "-a", "127.0.0.1", "-p", "-1", "-c", str(work / "js.conf")]
    proc = subprocess.Popen(
        [*args, "--ports_file_dir", str(ports)],
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
    )
    try:
        ports_file = ports / f"{Path(binary).name}_{proc.pid}.ports"
        deadline = time.monotonic() + 30
        while not ports_file.exists() or not ports_file.read_bytes():
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"JetStream nats-server did not start: {work / 'log'}")
            time.sleep(0.02)
        time.sleep(0.05)
        url = orjson.loads(ports_file.read_bytes())["nats"][0]
        JETSTREAM_PIDS[url] = proc.pid
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
        log.close()
        shutil.rmtree(work, ignore_errors=True)


class Results:
    """Rows of (label, jet, jetstream, unit, higher_is_better, verdict): the verdict says the
    target (a ratio to JetStream, or an absolute limit on jet's figure) and whether it is met."""

    def __init__(self) -> None:
        self.rows: list[tuple[str, float, float, str, bool, str]] = []
        self.notes: list[str] = []

    def add(
        self,
        label: str,
        jet: float,
        js: float,
        unit: str,
        higher_is_better: bool,
        target: float | None = None,
        *,
        jet_at_most: float | None = None,
    ) -> None:
        """A row; ``target``: the ratio asked for; ``jet_at_most``: a limit on jet's figure."""
        verdict = _verdict(jet, js, higher_is_better, target)
        if jet_at_most is not None:
            met = jet <= jet_at_most  # nan (not measured) is not met
            verdict = f"jet <= {jet_at_most:g} {unit} {'met' if met else 'NOT met'}"
        self.rows.append((label, jet, js, unit, higher_is_better, verdict))
        ratio = ratio_text(jet, js, higher_is_better)
        print(
            f"  {label:<44} jet {jet:>12,.2f}  jetstream {js:>12,.2f} {unit:<6} ratio {ratio}"
            f"  {verdict}"
        )

    def table(self) -> None:
        print("\n  summary (ratio > 1: jet better; target: what the benchmark's issue asks for)")
        print(f"  {'':<44} {'jet':>12} {'jetstream':>12} {'unit':<6} ratio  target")
        for label, jet, js, unit, hib, verdict in self.rows:
            print(
                f"  {label:<44} {jet:>12,.2f} {js:>12,.2f} {unit:<6} {ratio_text(jet, js, hib)}"
                f"  {verdict}"
            )
        for note in self.notes:
            print(f"  {note}")


def _verdict(jet: float, js: float, higher_is_better: bool, target: float | None) -> str:
    if target is None:
        return ""
    if jet <= 0 or js <= 0:
        return f">= {target:g}x n/a"
    ratio = jet / js if higher_is_better else js / jet
    return f">= {target:g}x {'met' if ratio >= target else 'NOT met'}"


async def _profiled(label: str, fn: Callable[[], Awaitable[float]]) -> float:
    if not os.environ.get("JET_BENCH_PROFILE"):
        return await fn()
    profile = cProfile.Profile()
    profile.enable()
    try:
        return await fn()
    finally:
        profile.disable()
        out = io.StringIO()
        pstats.Stats(profile, stream=out).sort_stats("tottime").print_stats(12)
        print(f"\n  --- cProfile, client side of {label} ---")
        print("\n".join("    " + line for line in out.getvalue().splitlines()[4:24]))


# -- jet side -----------------------------------------------------------------------------


async def jet_publish(
    client: Client,
    stream: str,
    n: int,
    ack: AckPolicy,
    value: bytes = VALUE,
    window: int = WINDOW,
    max_in_flight: int = 4,
    compression: str | None = None,
    compression_offload_bytes: int | None = DEFAULT_OFFLOAD_BYTES,
) -> float:
    """Messages per second for ``n`` acked sends of ``value`` through a window of ``window``
    (and ``max_in_flight`` Produce requests per partition, values compressed with
    ``compression`` if given, in a worker thread from ``compression_offload_bytes``, the
    producer's default; None: on the loop)."""
    async with Producer(
        client,
        stream,
        ack=ack,
        max_pending=window,
        max_in_flight=max_in_flight,
        compression=compression,
        compression_offload_bytes=compression_offload_bytes,
    ) as p:
        start = time.perf_counter()
        handle = None
        for _ in range(n):
            handle = await p.send_soon(value)
        await p.flush()
        elapsed = time.perf_counter() - start
        assert handle is not None
        handle.result()
    return n / elapsed


async def jet_fill(client: Client, stream: str, n: int) -> None:
    async with Producer(
        client, stream, ack=AckPolicy.LEADER, max_pending=20_000, max_in_flight=8
    ) as p:
        for _ in range(n):
            await p.send_soon(VALUE)
        await p.flush()


async def jet_consume(
    client: Client,
    stream: str,
    n: int,
    *,
    timeout_s: float = SETTLE_TIMEOUT_S,
    **options: Any,
) -> float:
    """Records per second of one consumer reading ``n`` records of ``stream`` from the
    start (``options``: more :class:`~jetsdk.Consumer` arguments)."""
    async with Consumer(client, stream, start="earliest", **options) as consumer:
        start = time.perf_counter()
        got = 0
        with anyio.fail_after(timeout_s):
            while got < n:
                got += len(await consumer.fetch(max_records=10_000, timeout=10))
        return got / (time.perf_counter() - start)


async def jet_latency(client: Client, stream: str, rate: int, seconds: float) -> list[float]:
    latencies: list[float] = []
    total = int(rate * seconds)
    async with (
        Consumer(client, stream, start="new-only", max_wait=5.0) as consumer,
        Producer(client, stream, linger=0, max_pending=WINDOW) as producer,
        anyio.create_task_group() as tg,
    ):

        async def consume() -> None:
            with anyio.fail_after(seconds + 60):
                while len(latencies) < total:
                    for msg in await consumer.fetch(max_records=1000):
                        sent = int.from_bytes(msg.value[:8], "big")
                        latencies.append((time.perf_counter_ns() - sent) / 1e6)

        tg.start_soon(consume)
        async for _ in paced(total, rate):
            await producer.send_soon(_stamp())
    return latencies


async def latency_rows(
    results: Results,
    label: str,
    jet: Callable[[], Awaitable[list[float]]],
    js: Callable[[], Awaitable[list[float]]],
    rounds: int,
    target: float | None,
) -> None:
    """``rounds`` alternating rounds of each side; rows of the median per-round p50 and p99,
    and jet's p99 / p50 (issue 11 asks for at most 3). Each round's full collections of
    this process are printed with it (a pause of the client's that its p99 then shows)."""
    per: dict[str, list[tuple[float, float]]] = {"jet": [], "js": []}
    full: dict[str, list[str]] = {"jet": [], "js": []}
    for _ in range(rounds):
        for side, fn in (("jet", jet), ("js", js)):
            with full_collections() as seen:
                lat = await fn()
            per[side].append((pct(lat, 0.5), pct(lat, 0.99)))
            full[side].append(str(seen))
    print(
        f"  {label}: per round jet "
        + ", ".join(f"{a:.2f}/{b:.2f}" for a, b in per["jet"])
        + " ms, jetstream "
        + ", ".join(f"{a:.2f}/{b:.2f}" for a, b in per["js"])
        + " ms (p50/p99); client full collections per round jet "
        + ", ".join(full["jet"])
        + ", jetstream "
        + ", ".join(full["js"])
    )
    jet50 = statistics.median(a for a, _ in per["jet"])
    jet99 = statistics.median(b for _, b in per["jet"])
    js50 = statistics.median(a for a, _ in per["js"])
    js99 = statistics.median(b for _, b in per["js"])
    results.add(f"latency p50 {label}", jet50, js50, "ms", False, target)
    results.add(f"latency p99 {label}", jet99, js99, "ms", False, target)
    spread = jet99 / jet50 if jet50 > 0 else 0.0
    results.notes.append(
        f"jet p99/p50 at {label}: {spread:.1f} (target <= 3: {'met' if spread <= 3 else 'NOT met'})"
    )


# -- JetStream side -----------------------------------------------------------------------


async def js_setup(url: str, name: str, subject: str) -> tuple[Any, Any]:
    import nats
    from nats.js.api import StorageType, StreamConfig

    nc = await nats.connect(url)
    js = nc.jetstream(publish_async_max_pending=WINDOW)
    await js.add_stream(
        StreamConfig(name=name, subjects=[subject], storage=StorageType.FILE, num_replicas=1)
    )
    return nc, js


async def js_publish(js: Any, subject: str, n: int, value: bytes = VALUE) -> float:
    """Publish ``n`` messages asynchronously; the rate once every ack is in (msg/s)."""
    start = time.perf_counter()
    future = None
    for _ in range(n):
        future = await js.publish_async(subject, value)
    await js.publish_async_completed()
    elapsed = time.perf_counter() - start
    assert future is not None
    await future
    return n / elapsed


async def js_fill(js: Any, subject: str, n: int) -> None:
    for _ in range(n):
        await js.publish_async(subject, VALUE)
    await js.publish_async_completed()


async def js_consume_ordered(js: Any, subject: str, n: int) -> float:
    sub = await js.subscribe(subject, ordered_consumer=True)
    start = time.perf_counter()
    got = 0
    with anyio.fail_after(SETTLE_TIMEOUT_S):
        async for _msg in sub.messages:
            got += 1
            if got == n:
                break
    rate = got / (time.perf_counter() - start)
    await sub.unsubscribe()
    return rate


async def js_consume_pull(js: Any, subject: str, n: int) -> float:
    from nats.js.api import AckPolicy as JsAck
    from nats.js.api import ConsumerConfig, DeliverPolicy

    config = ConsumerConfig(ack_policy=JsAck.NONE, deliver_policy=DeliverPolicy.ALL)
    sub = await js.pull_subscribe(subject, durable=None, config=config)
    start = time.perf_counter()
    got = 0
    with anyio.fail_after(SETTLE_TIMEOUT_S):
        while got < n:
            got += len(await sub.fetch(batch=1000, timeout=10))
    rate = got / (time.perf_counter() - start)
    await sub.unsubscribe()
    return rate


async def best_of(
    rounds: int,
    label: str,
    jet: Callable[[int], Awaitable[float]],
    js: Callable[[int], Awaitable[float]],
    n: int,
    server_pid: int | None,
) -> tuple[float, float, float]:
    """Warm each side up (WARMUP messages, untimed), then run ``jet(n)`` and ``js(n)``
    alternately ``rounds`` times; return each side's best rate and the median of the
    per-round ratios."""
    await jet(min(WARMUP, n))
    await js(min(WARMUP, n))
    jet_rates: list[float] = []
    js_rates: list[float] = []
    for i in range(rounds):
        cpu, mine = _process_cpu_s(server_pid), time.process_time()
        jet_rates.append(await _profiled(label, lambda: jet(n)) if i == 0 else await jet(n))
        used, jet_client = _process_cpu_s(server_pid) - cpu, time.process_time() - mine
        mine = time.process_time()
        js_rates.append(await js(n))
        js_client = time.process_time() - mine
        server = f" + server {used / n * 1e6:.1f}" if used > 0 else ""
        print(
            f"    round {i + 1}: jet {jet_rates[-1]:,.0f}  jetstream {js_rates[-1]:,.0f} msg/s"
            f"  ratio {jet_rates[-1] / js_rates[-1]:.2f}x  (load {_load()})\n"
            f"      CPU us/msg: jet client {jet_client / n * 1e6:.1f}{server}, "
            f"JetStream client {js_client / n * 1e6:.1f} (+ nats-server, not measured)"
        )
    median = statistics.median(a / b for a, b in zip(jet_rates, js_rates))
    print(f"    median of the per-round ratios: {median:.2f}x")
    return max(jet_rates), max(js_rates), median


def _process_cpu_s(pid: int | None) -> float:
    """User + system CPU seconds of process ``pid`` (0.0 if unknown: not Linux, no pid)."""
    if pid is None:
        return 0.0
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def _settle_disk() -> None:
    """Write back the dirty page cache (os.sync) before a measurement that fsyncs, so its
    fsyncs do not queue behind the writeback of earlier parts (see the module docstring)."""
    started = time.perf_counter()
    with anyio.fail_after(SETTLE_TIMEOUT_S):
        await anyio.to_thread.run_sync(os.sync)
    print(f"  (os.sync before the next part took {time.perf_counter() - started:.1f} s)")


def _load() -> str:
    try:
        return " ".join(f"{x:.1f}" for x in os.getloadavg())
    except OSError:
        return "?"


async def js_latency(js: Any, subject: str, rate: int, seconds: float) -> list[float]:
    from nats.js.api import DeliverPolicy

    latencies: list[float] = []
    total = int(rate * seconds)
    done = anyio.Event()

    async def on_msg(msg: Any) -> None:
        sent = int.from_bytes(msg.data[:8], "big")
        latencies.append((time.perf_counter_ns() - sent) / 1e6)
        if len(latencies) >= total:
            done.set()

    sub = await js.subscribe(
        subject, cb=on_msg, ordered_consumer=True, deliver_policy=DeliverPolicy.NEW
    )
    async for _ in paced(total, rate):
        await js.publish_async(subject, _stamp())
    with anyio.fail_after(seconds + 60):
        await done.wait()
    await sub.unsubscribe()
    return latencies


# -- shared -------------------------------------------------------------------------------


def _stamp() -> bytes:
    return time.perf_counter_ns().to_bytes(8, "big") + VALUE[8:]


async def _main(
    quick: bool, jet_servers: list[str], js_url: str, js_sync_url: str, server_pid: int | None
) -> None:
    import nats

    n_pub = 20_000 if quick else 120_000
    n_consume = 100_000 if quick else 1_000_000
    n_all = 5_000 if quick else 20_000
    lat_seconds = 2.0 if quick else 6.0
    rounds = QUICK_ROUNDS if quick else ROUNDS
    results = Results()
    async with Client(jet_servers) as client:
        for name in ("bpub", "bcons", "blat", "blat2", "ball"):
            await client.create_stream(name, f"bench.{name}")
        await client.create_stream("blatw", "bench.blatw", durability="written")
        nc, js = await js_setup(js_url, "BPUB", "js.pub")
        await js.add_stream(name="BCONS", subjects=["js.cons"])
        await js.add_stream(name="BLAT", subjects=["js.lat"])
        sync_nc, sync_js = await js_setup(js_sync_url, "BALL", "js.all")
        await sync_js.add_stream(name="BLATS", subjects=["js.lats"])
        try:
            print(
                f"(a) acked publish, {n_pub:,} x 100 B, ack LEADER, RF=1, window {WINDOW} "
                f"unacknowledged messages on both sides, {rounds} rounds after a warm-up "
                f"(load {_load()})"
            )
            jet_rate, js_rate, median = await best_of(
                rounds,
                "(a) publish",
                lambda n: jet_publish(client, "bpub", n, AckPolicy.LEADER),
                lambda n: js_publish(js, "js.pub", n),
                n_pub,
                server_pid,
            )
            results.add("publish ack LEADER", jet_rate, js_rate, "msg/s", True, 3.0)
            results.notes.append(
                f"publish ack LEADER: median of the per-round ratios {median:.2f}x"
            )

            print(f"(b) consume {n_consume:,} stored messages from offset 0 (filling...)")
            fill_start = time.perf_counter()
            await jet_fill(client, "bcons", n_consume)
            print(f"  jet fill took {time.perf_counter() - fill_start:.1f} s")
            await js_fill(js, "js.cons", n_consume)
            jet_rate = await _profiled(
                "(b) consume", lambda: jet_consume(client, "bcons", n_consume)
            )
            ordered = await js_consume_ordered(js, "js.cons", n_consume)
            pull = await js_consume_pull(js, "js.cons", n_consume)
            results.add("consume vs ordered consumer", jet_rate, ordered, "msg/s", True, 5.0)
            results.add("consume vs pull fetch(1000)", jet_rate, pull, "msg/s", True)

            await _settle_disk()
            print(f"  {settle_heap()}")
            print(
                f"(c) publish->consume latency, {rounds} rounds alternating jet and JetStream, "
                f"median of the per-round p50 and p99 (load {_load()})"
            )
            pairs = (
                ("both fsynced", "blat2", sync_js, "js.lats"),
                ("jet written, js default", "blatw", js, "js.lat"),
            )
            for label, jet_stream, js_ctx, js_subject in pairs:
                for rate, secs in ((500, lat_seconds), (5000, lat_seconds / 2)):
                    await latency_rows(
                        results,
                        f"{rate:,}/s {label}",
                        lambda r=rate, t=secs, s=jet_stream: jet_latency(client, s, r, t),
                        lambda r=rate, t=secs, c=js_ctx, s=js_subject: js_latency(c, s, r, t),
                        rounds,
                        target=1.0,
                    )
            await latency_rows(
                results,
                "500/s jet fsynced, js default",
                lambda: jet_latency(client, "blat", 500, lat_seconds),
                lambda: js_latency(js, "js.lat", 500, lat_seconds),
                rounds,
                target=None,
            )

            await _settle_disk()
            print(
                f"(d) ack ALL (fsync group commit) vs JetStream sync_interval=always, "
                f"{n_all:,} x 100 B, window {WINDOW} on both sides, {rounds} rounds after a "
                f"warm-up (load {_load()})"
            )
            jet_rate, js_rate, median = await best_of(
                rounds,
                "(d) publish ALL",
                lambda n: jet_publish(client, "ball", n, AckPolicy.ALL),
                lambda n: js_publish(sync_js, "js.all", n),
                n_all,
                server_pid,
            )
            results.add("publish ack ALL / fsync always", jet_rate, js_rate, "msg/s", True, 12.0)
            results.notes.append(
                f"publish ack ALL / fsync always: median of the per-round ratios {median:.2f}x"
            )
        finally:
            await nc.close()
            await sync_nc.close()
    results.table()
    del nats


@contextmanager
def compared_servers() -> Iterator[tuple[DevCluster, str, str]]:
    """One jet server (its log to /dev/null) and the two JetStream servers it is compared
    with: yields the jet dev cluster and the URLs of JetStream with the default sync
    interval and with ``sync_interval: always``."""
    with (
        open(os.devnull, "wb") as devnull,
        DevCluster(size=1, log_file=devnull) as dev,
        jetstream_server(sync_always=False) as js_url,
        jetstream_server(sync_always=True) as js_sync_url,
    ):
        yield dev, js_url, js_sync_url


def run(quick: bool) -> None:
    """Run the four comparisons and print them side by side with ratios."""
    with compared_servers() as (dev, js_url, js_sync_url):
        server_pid = dev.servers[0].pid if dev.servers else None
        anyio.run(_main, quick, dev.addresses, js_url, js_sync_url, server_pid, backend="asyncio")


if __name__ == "__main__":
    import sys

    run(quick="--quick" in sys.argv)
