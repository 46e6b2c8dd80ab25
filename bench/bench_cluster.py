"""Replicated publishing and failover: jet RF=3 ack ALL vs NATS JetStream R3, in one run.

Both sides run three servers on this machine's loopback, started together; the publish
measurements alternate between the sides (median of the rounds), so that a change of the
machine's load hits both; 100-byte values:

(a) acked publish throughput: jet ``Producer(ack=ALL)`` (commit = fsynced on every in-sync
    replica, min ISR 2) ``send_soon`` + ``flush`` vs nats-py ``js.publish_async`` +
    ``publish_async_completed`` into a 3-replica file stream, both with a window of 4000
    unacknowledged messages. JetStream runs with its default ``sync_interval`` (it fsyncs
    every 2 minutes: an R3 ack means "in memory on 2 of 3 servers"); the full run adds a
    row against ``sync_interval: always``, jet's default durability;
(b) acked publish latency (send -> ack) at a fixed rate, p50 / p99; also jet with
    ``durability="replicated"`` (a second stream: an ALL ack waits for the leader's fsync
    and the followers' writes, not their fsyncs) and, in the full run, JetStream with
    ``sync_interval: always``, to show what the fsyncs on jet's path cost;
(c) failover: kill -9 (by PID) of the partition leader / the stream leader, while a
    publisher sends one message at a time and retries (short timeouts, 50 ms backoff on
    both sides) -> the first successful acked publish. The JetStream client is connected
    to a server that is not killed (the most favourable case for it); the jet client loses
    its connection to the killed leader and follows the new one by itself.

Targets (issue 4, item 9): RF=3 ALL publish >= 1.0x JetStream R3 ``publish_async``;
failover <= 0.5x JetStream's. Ratios printed as jet / JetStream for throughput (> 1: jet
better) and JetStream / jet for times (> 1: jet better). Run: ``python -m bench cluster``.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anyio
import attrs

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from bench.bench_sdk import jet_publish, js_publish
from bench.pacing import paced
from bench.stats import pct, ratio_text
from cluster.views import wait_info, wait_leader
from jetsdk import AckPolicy, Client, JetError, Producer, RetryPolicy
from jetserver.testing import Cluster, NatsServer, free_ports

VALUE = b"x" * 100
WINDOW = 4000
"""Unacknowledged messages in flight (both sides)."""
STREAM = "bench"
SUBJECT = "bench.r3"
STREAM_REPLICATED = "bench-replicated"
"""A stream with durability "replicated" (latency breakdown)."""
SUBJECT_REPLICATED = "benchrepl.r3"
READY_TIMEOUT_S = 60.0
"""Bound on a cluster becoming ready to accept the stream."""
FAILOVER_TIMEOUT_S = 60.0
"""Bound on the first ack after a kill."""
RETRY_PAUSE_S = 0.05
"""Pause between publish attempts while failing over (both sides)."""
ATTEMPT_TIMEOUT_S = 0.5
"""Per-attempt publish timeout while failing over (both sides)."""
FAILOVER_RETRY = RetryPolicy(attempts=2000, backoff=RETRY_PAUSE_S, backoff_max=RETRY_PAUSE_S)
"""The jet client's retries during failover (same pause as the JetStream loop)."""


@attrs.define
class Figures:
    """What one side measured."""

    publish_rate: float = 0.0
    """Acked messages per second through the window."""
    latency_ms: list[float] = attrs.field(factory=list)
    """Send -> ack latencies at the fixed rate."""
    failover_s: list[float] = attrs.field(factory=list)
    """kill -9 of the leader -> first acked publish, per round."""
    latency_relaxed_ms: list[float] = attrs.field(factory=list)
    """Send -> ack latencies with relaxed durability (jet: "replicated")."""


# -- JetStream R3 -------------------------------------------------------------------------


@attrs.define(eq=False)
class JetStreamCluster:
    """Three nats-servers with JetStream and cluster routes on 127.0.0.1."""

    root: Path
    """Work directories."""
    sync_always: bool = False
    """``sync_interval: always`` (fsync every write) instead of the default."""
    nodes: list[NatsServer] = attrs.field(factory=list)
    """The servers (n1, n2, n3)."""

    def start(self) -> None:
        """Start the three servers (each waits for its client port)."""
        names = ["n1", "n2", "n3"]
        ports = free_ports(2 * len(names))  # distinct: all bound at once
        client_ports, route_ports = ports[: len(names)], ports[len(names) :]
        sync = "\n  sync_interval: always" if self.sync_always else ""
        for i, name in enumerate(names):
            work = self.root / name
            routes = ", ".join(
                f'"nats-route://127.0.0.1:{route_ports[j]}"' for j in range(3) if j != i
            )
            extra = (
                f"server_name: {name}\n"
                f'jetstream {{\n  store_dir: "{work / "store"}"{sync}\n}}\n'
                f"cluster {{\n  name: jsbench\n  listen: 127.0.0.1:{route_ports[i]}\n"
                f"  routes: [{routes}]\n}}"
            )
            node = NatsServer(port=client_ports[i], work_dir=work, extra_config=extra)
            self.nodes.append(node)
        for node in self.nodes:
            node.start()

    @property
    def urls(self) -> list[str]:
        """Client URLs."""
        return [n.url for n in self.nodes]

    def node(self, name: str) -> NatsServer:
        """The node with this server_name."""
        return self.nodes[int(name[1:]) - 1]

    def stop(self) -> None:
        """Stop every node by PID."""
        for node in self.nodes:
            node.stop()

    @contextmanager
    def running(self) -> Iterator[JetStreamCluster]:
        """Start, yield, stop."""
        try:
            self.start()
            yield self
        finally:
            self.stop()


async def _js_connect(urls: list[str]) -> Any:
    import nats

    return await nats.connect(
        urls, reconnect_time_wait=0.1, max_reconnect_attempts=-1, connect_timeout=2
    )


async def _js_add_stream(js: Any) -> None:
    from nats.js.api import StorageType, StreamConfig

    deadline = time.monotonic() + READY_TIMEOUT_S
    while True:
        try:
            await js.add_stream(
                StreamConfig(
                    name=STREAM.upper(),
                    subjects=[SUBJECT],
                    storage=StorageType.FILE,
                    num_replicas=3,
                )
            )
            return
        except Exception as exc:  # meta leader not elected yet, peers not connected
            if time.monotonic() > deadline:
                raise RuntimeError(f"JetStream R3 stream not created: {exc}") from exc
            await anyio.sleep(0.25)


async def _js_stream_leader(js: Any) -> str:
    deadline = time.monotonic() + READY_TIMEOUT_S
    while True:
        try:
            info = await js.stream_info(STREAM.upper())
            leader = info.cluster.leader if info.cluster is not None else None
            current = [r for r in (info.cluster.replicas or []) if r.current]
            if leader and len(current) == 2:
                return str(leader)
        except Exception:  # no leader right now
            pass
        if time.monotonic() > deadline:
            raise RuntimeError("JetStream stream has no leader with 2 current replicas")
        await anyio.sleep(0.1)


async def _js_publish_rate(js: Any, n: int) -> float:
    return await js_publish(js, SUBJECT, n, VALUE)


async def _js_latency(js: Any, rate: float, total: int) -> list[float]:
    latencies: list[float] = []
    futures = []

    async def send() -> None:
        sent = time.perf_counter()
        future = await js.publish_async(SUBJECT, VALUE)
        future.add_done_callback(lambda _f: latencies.append((time.perf_counter() - sent) * 1e3))
        futures.append(future)

    async for _ in paced(total, rate):
        await send()
    await js.publish_async_completed()
    for f in futures:
        await f
    return latencies


async def _js_failover(cluster: JetStreamCluster, rounds: int) -> list[float]:
    import nats

    out = []
    for _ in range(rounds):
        probe = await nats.connect(cluster.urls, connect_timeout=2)
        leader = await _js_stream_leader(probe.jetstream())
        await probe.close()
        others = [n.url for n in cluster.nodes if n is not cluster.node(leader)]
        nc = await nats.connect(others, reconnect_time_wait=0.1, connect_timeout=2)
        js = nc.jetstream()
        await js.publish(SUBJECT, VALUE, timeout=5)
        victim = cluster.node(leader)
        t0 = time.monotonic()
        os.kill(victim.pid, signal.SIGKILL)
        with anyio.fail_after(FAILOVER_TIMEOUT_S):
            while True:
                try:
                    await js.publish(SUBJECT, VALUE, timeout=ATTEMPT_TIMEOUT_S)
                    break
                except Exception:  # timeouts, "no responders" while the leader is elected
                    await anyio.sleep(RETRY_PAUSE_S)
        out.append(time.monotonic() - t0)
        print(f"  jetstream: killed stream leader {leader}; first ack after {out[-1]:.2f} s")
        victim.stop()  # reap it
        victim.start()
        await _js_stream_leader(js)
        await nc.close()
    return out


# -- jet RF=3 -----------------------------------------------------------------------------


async def _jet_publish_rate(jet: Client, n: int) -> float:
    return await jet_publish(jet, STREAM, n, AckPolicy.ALL, VALUE, WINDOW, max_in_flight=4)


async def _jet_latency(jet: Client, rate: float, total: int, stream: str = STREAM) -> list[float]:
    """Send -> ack of each message, sent with ``send_soon`` at ``rate``. Also prints the
    share of sends that found an earlier message not acknowledged yet: with
    ``max_in_flight=1`` such a message waits for that request's answer before its own
    request goes (at 500 msg/s, whenever a round trip takes over 2 ms), so its latency is
    that wait plus its own round trip (docs/latency.md, 2026-11-30 rf3). The producer is
    idempotent (Kafka's default), with that producer's default window (1: 5 was slower
    here, see DEFAULT_IDEMPOTENT_MAX_IN_FLIGHT; ``JET_BENCH_IN_FLIGHT`` sets another)."""
    latencies: list[float] = []
    unacked = [0, 0]  # messages not acknowledged now; sends that found one
    window = os.environ.get("JET_BENCH_IN_FLIGHT")
    async with Producer(
        jet,
        stream,
        ack=AckPolicy.ALL,
        linger=0,
        max_pending=WINDOW,
        idempotent=True,
        max_in_flight=int(window) if window else None,
    ) as p:

        def acked(sent: float) -> None:
            latencies.append((time.perf_counter() - sent) * 1e3)
            unacked[0] -= 1

        async def send() -> None:
            sent = time.perf_counter()
            unacked[1] += unacked[0] > 0
            unacked[0] += 1
            handle = await p.send_soon(VALUE)
            handle.add_done_callback(lambda _h: acked(sent))

        async for _ in paced(total, rate):
            await send()
        await p.flush()
    print(
        f"  jet latency ({stream}): {unacked[1] / max(total, 1):.0%} of sends found an earlier "
        f"message unacknowledged (idempotent, max_in_flight {p.max_in_flight}: beyond it "
        f"a message waits for an answer)"
    )
    return latencies


async def _jet_failover(cluster: Cluster, rounds: int) -> list[float]:
    out = []
    async with (
        Client(
            cluster.addresses, retry=FAILOVER_RETRY, request_timeout=ATTEMPT_TIMEOUT_S * 4
        ) as jet,
        Producer(jet, STREAM, ack=AckPolicy.ALL, linger=0, ack_timeout=2.0) as p,
    ):
        for _ in range(rounds):
            info = await wait_info(
                cluster, STREAM, 0, lambda i: len(i.isr) == 3, READY_TIMEOUT_S, "full ISR"
            )
            assert info.leader is not None
            await p.send(VALUE, partition=0)
            victim = cluster.server(info.leader)
            t0 = time.monotonic()
            victim.kill9()
            with anyio.fail_after(FAILOVER_TIMEOUT_S):
                while True:
                    try:
                        await p.send(VALUE, partition=0)
                        break
                    except JetError:
                        await anyio.sleep(RETRY_PAUSE_S)
            out.append(time.monotonic() - t0)
            new = await wait_leader(cluster, STREAM, 0, READY_TIMEOUT_S)
            print(
                f"  jet: killed partition leader {info.leader} (epoch {info.leader_epoch}); "
                f"first ack after {out[-1]:.2f} s; new leader {new.leader} "
                f"(epoch {new.leader_epoch})"
            )
            await anyio.to_thread.run_sync(victim.start)
    return out


# -- both, interleaved ----------------------------------------------------------------


def _bind(
    publish: Callable[[Any, int], Awaitable[float]], target: Any
) -> Callable[[int], Awaitable[float]]:
    return lambda n: publish(target, n)


async def _measure(
    jsc: JetStreamCluster, jsc_sync: JetStreamCluster | None, cluster: Cluster | None, quick: bool
) -> tuple[Figures, Figures | None, Figures | None]:
    """Publish rounds alternate between the sides (so a change of machine load hits both),
    then latency, then failover (each side in turn)."""
    n = 20_000 if quick else 100_000
    rounds = 2 if quick else 3
    rate, total = (500.0, 1500) if quick else (1000.0, 5000)
    js, js_sync, jet = Figures(), Figures() if jsc_sync else None, Figures() if cluster else None
    contexts: dict[str, Any] = {}
    connections = []
    for name, c in (("js", jsc), ("js_sync", jsc_sync)):
        if c is not None:
            nc = await _js_connect(c.urls)
            connections.append(nc)
            contexts[name] = nc.jetstream(publish_async_max_pending=WINDOW)
            await _js_add_stream(contexts[name])
            await _js_stream_leader(contexts[name])
    jet_client = Client(cluster.addresses if cluster else ["127.0.0.1:1"])
    try:
        if cluster is not None:
            await jet_client.__aenter__()
            await jet_client.create_stream(STREAM, SUBJECT, partitions=1, replication_factor=3)
            await jet_client.create_stream(
                STREAM_REPLICATED,
                SUBJECT_REPLICATED,
                partitions=1,
                replication_factor=3,
                durability="replicated",
            )
            for name in (STREAM, STREAM_REPLICATED):
                await wait_info(cluster, name, 0, lambda i: len(i.isr) == 3, READY_TIMEOUT_S, "ISR")
        sides: list[tuple[str, Callable[[int], Awaitable[float]]]] = [
            (name, _bind(_js_publish_rate, ctx)) for name, ctx in contexts.items()
        ]
        if cluster is not None:
            sides.append(("jet", _bind(_jet_publish_rate, jet_client)))
        rates: dict[str, list[float]] = {name: [] for name, _ in sides}
        for _name, publish in sides:
            await publish(1000)  # warm-up
        for r in range(rounds):
            for name, publish in sides[r % len(sides) :] + sides[: r % len(sides)]:
                rates[name].append(await publish(n))
        for name, values in rates.items():
            print(f"  publish {name:<8} " + "  ".join(f"{v:>9,.0f}" for v in values) + " msg/s")
        js.publish_rate = statistics.median(rates["js"])
        js.latency_ms = await _js_latency(contexts["js"], rate, total)
        if js_sync is not None:
            js_sync.publish_rate = statistics.median(rates["js_sync"])
            js_sync.latency_ms = await _js_latency(contexts["js_sync"], rate, total)
        if jet is not None:
            jet.publish_rate = statistics.median(rates["jet"])
            jet.latency_ms = await _jet_latency(jet_client, rate, total)
            jet.latency_relaxed_ms = await _jet_latency(jet_client, rate, total, STREAM_REPLICATED)
    finally:
        for nc in connections:
            await nc.close()
        if cluster is not None:
            await jet_client.__aexit__(None, None, None)
    failover_rounds = 1 if quick else 3
    js.failover_s = await _js_failover(jsc, failover_rounds)
    if jet is not None and cluster is not None:
        jet.failover_s = await _jet_failover(cluster, failover_rounds)
    return js, js_sync, jet


# -- report -------------------------------------------------------------------------------


def _row(label: str, jet: float, js: float, unit: str, higher_is_better: bool) -> None:
    print(
        f"  {label:<40} jet {jet:>10,.1f}  jetstream {js:>10,.1f} {unit:<6} "
        f"ratio {ratio_text(jet, js, higher_is_better)}"
    )


QUANTILES = ((0.5, "p50"), (0.99, "p99"))


def _latency_row(label: str, jet_ms: list[float], js_ms: list[float], q: float) -> None:
    """The ``q`` quantile of each side's latencies (lower is better)."""
    _row(label, pct(jet_ms, q, empty=0.0), pct(js_ms, q, empty=0.0), "ms", False)


def _report(jet: Figures | None, js: Figures, js_sync: Figures | None) -> None:
    print("\n  summary (ratio > 1: jet better)")
    j = jet or Figures()
    if jet is None:
        print("  jet RF=3: not measured (clustering is not in the server yet)")
    _row("publish RF=3 ack ALL vs R3 publish_async", j.publish_rate, js.publish_rate, "msg/s", True)
    if js_sync is not None:
        _row(
            "  ... vs R3 sync_interval=always",
            j.publish_rate,
            js_sync.publish_rate,
            "msg/s",
            True,
        )
    for q, name in QUANTILES:
        _latency_row(f"acked publish latency {name}", j.latency_ms, js.latency_ms, q)
    for q, name in QUANTILES:
        label = f'  ... jet durability="replicated" {name}'
        _latency_row(label, j.latency_relaxed_ms, js.latency_ms, q)
        if js_sync is not None:
            label = f"  ... vs R3 sync_interval=always {name}"
            _latency_row(label, j.latency_ms, js_sync.latency_ms, q)
    jet_fo = statistics.median(j.failover_s) if j.failover_s else 0.0
    js_fo = statistics.median(js.failover_s) if js.failover_s else 0.0
    _row("failover kill -9 -> first ack (median)", jet_fo, js_fo, "s", False)
    print("\n  targets (issue 4, item 9)")
    if jet is not None and js.publish_rate > 0:
        ratio = j.publish_rate / js.publish_rate
        print(
            f"  publish >= 1.0x JetStream R3 publish_async: {ratio:.2f}x "
            f"{'met' if ratio >= 1.0 else 'NOT met'}"
        )
    if jet is not None and js_fo > 0 and jet_fo > 0:
        ratio = jet_fo / js_fo
        print(
            f"  failover <= 0.5x JetStream's: {ratio:.2f}x {'met' if ratio <= 0.5 else 'NOT met'}"
        )
    if jet is None:
        return
    print("\n  targets (issue 11: latency)")
    for q, name in ((0.5, "p50"), (0.99, "p99")):
        mine, theirs = pct(j.latency_ms, q, empty=0.0), pct(js.latency_ms, q, empty=0.0)
        if theirs > 0:
            ratio = mine / theirs
            verdict = "met" if ratio <= 2.0 else "NOT met"
            print(f"  ack ALL {name} <= 2x JetStream R3's: {ratio:.2f}x {verdict}")
        if js_sync is not None and pct(js_sync.latency_ms, q, empty=0.0) > 0:
            ratio = mine / pct(js_sync.latency_ms, q, empty=0.0)
            verdict = "met" if ratio <= 1.0 else "NOT met"
            print(
                f"  ack ALL {name} <= 1x JetStream R3 sync_interval=always: {ratio:.2f}x {verdict}"
            )
    if js.publish_rate > 0:
        ratio = j.publish_rate / js.publish_rate
        verdict = "met" if ratio >= 2.0 else "NOT met"
        print(f"  RF 3 throughput >= 2x JetStream R3: {ratio:.2f}x {verdict}")


def run(quick: bool) -> None:
    """Start both sides (and, in the full run, JetStream with sync_interval always), measure
    them interleaved, print them side by side."""
    root = Path(tempfile.mkdtemp(prefix="bench-cluster-"))
    print(
        f"JetStream R3 (3 nats-servers, routes on loopback) vs jet RF=3 ack ALL (3 jet servers "
        f"+ nats-server); window {WINDOW}; load average {os.getloadavg()[0]:.1f}"
    )
    try:
        with contextlib.ExitStack() as stack:
            jsc = stack.enter_context(JetStreamCluster(root / "js").running())
            jsc_sync = None
            if not quick:
                sync = JetStreamCluster(root / "js-sync", sync_always=True)
                jsc_sync = stack.enter_context(sync.running())
            cluster = stack.enter_context(Cluster(root=root / "jet", size=3, log_level="WARNING"))
            js, js_sync, jet = anyio.run(_measure, jsc, jsc_sync, cluster, quick, backend="asyncio")
        _report(jet, js, js_sync)
        print(f"  load average at the end {os.getloadavg()[0]:.1f}")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    run(quick="--quick" in sys.argv)
