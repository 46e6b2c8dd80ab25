"""Bytes, not just messages (issue 39): jet vs NATS JetStream at 100 B .. 1 MiB values.

One jet server (DevCluster, RF 1) and two nats-servers with JetStream (file store; one
default, one ``sync_interval: always``) run on this machine; both clients run in this one
process on asyncio (nats-py is asyncio-only). For each value size in SIZES:

- publish ack LEADER vs ``js.publish_async`` (default store), target >= 1.5x;
- publish ack ALL (fsynced group commit) vs ``publish_async`` on ``sync_interval: always``,
  target >= 1.5x;
- consume from offset 0 (``Consumer.fetch``) vs JetStream's ordered push consumer,
  target >= 2x;
- at the sizes of NO_COPIES_SIZES (``JET_BENCH_NO_COPIES_SIZES``, default 256 KiB and
  1 MiB; empty: none), beside the ack LEADER row, the same publish to a stream with
  ``no_nats_copies`` (its records are not republished to NATS: nobody on NATS sees them,
  which a JetStream stream's subscribers would; spec/protocol.md §6) vs the same
  JetStream publish, labelled "ack LEADER, no NATS copies";
- at the sizes of COMPRESSION_SIZES (``JET_BENCH_COMPRESSION_SIZES``, default 16 KiB):
  publish ack LEADER of a JSON-like and a random value, with ``Producer(compression=
  "zstd")`` and without (and the JSON-like one with ``"lz4"``, and with zstd in the
  producer's worker thread, its default, and on the event loop: ``compression_offload_bytes``
  None), vs JetStream streams with
  and without s2 store compression; MiB/s of payload as sent;
- then, at the sizes of RF3_SIZES (``JET_BENCH_RF3_SIZES``, default 16 KiB; empty: none),
  three jet servers and three clustered nats-servers: publish ack ALL to an RF 3 stream vs
  ``publish_async`` to an R3 stream (default store), target >= 1.5x, jet's CPU summed over
  its three servers. Started after the one-server rows, so the two setups never share the
  machine.

Both sides use the same window of unacknowledged messages: WINDOW messages, at most
WINDOW_BYTES of values; jet's producer keeps enough Produce requests in flight to fill it
(``_in_flight``: at 16 KiB and above, 4 requests of at most 1 MiB held only 4 MiB of the
window). Each row is the median of ROUNDS rounds alternating jet and
JetStream (after one untimed warm-up per side) and is printed with met / NOT met.

Beside every row the machine's own ceiling for the same bytes: a sequential buffered write
(one ``write`` per value) to a file in the jet server's data directory, and a memory copy
(one slice assignment per value into a preallocated buffer); jet's MiB/s as a fraction of
each. And the CPU per MiB of values of each side, from /proc, the steadier figure for
before/after comparisons on a loaded machine: jet's (client process + server process(es)),
apart the CPU of jet's nats-server in jet's rounds (it takes the records' NATS copies), and
JetStream's (the publisher, this process, + its nats-server(s)): JetStream's s2 is
compressed by its server, jet's zstd by its client, so only the sums compare.

Run: ``python -m bench sizes [--quick]`` (``--quick``: less data per round and one round,
about a minute). ``JET_BENCH_VALUE_SIZES=16384,262144`` limits the sizes;
``JET_BENCH_ROUNDS=N`` sets the rounds of a full run (default ROUNDS).
"""

from __future__ import annotations

import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio

from bench import bench_sdk
from bench.bench_sdk import (
    JETSTREAM_PIDS,
    _load,
    _process_cpu_s,
    compared_servers,
    js_consume_ordered,
    js_publish,
)
from jetsdk import AckPolicy, Client
from jetsdk.producer.accumulator import DEFAULT_MAX_BATCH_BYTES
from jetsdk.producer.compression_stage import DEFAULT_OFFLOAD_BYTES
from jetserver.testing.devcluster import DevCluster

SIZES = (100, 1024, 16 * 1024, 256 * 1024, 1024 * 1024)
WINDOW = 4000
"""Most unacknowledged messages on either side (issue 39's run used 4000)."""
WINDOW_BYTES = 64 * 1024 * 1024
"""... and at most this many bytes of values in flight (a 1 MiB value: 64 messages)."""
ROUNDS = 5
"""Rounds of a full run (``JET_BENCH_ROUNDS`` overrides it). Five, not three: at 256 KiB and
1 MiB one stalled round of either side moved a median of three by a third."""
QUICK_ROUNDS = 1
ROUND_BYTES = 96 * 1024 * 1024
QUICK_ROUND_BYTES = 12 * 1024 * 1024
MAX_ROUND_MESSAGES = 200_000
QUICK_MAX_ROUND_MESSAGES = 20_000
MIN_ROUND_MESSAGES = 256
"""Cap of the two-window floor of a round (:func:`_min_round`)."""
ALL_DIVISOR = 4
"""The ack ALL rounds move this many times less data (JetStream fsyncs every write)..."""
ALL_MIN_ROUND_BYTES = 256 * 1024 * 1024
"""... but, in a full run, at least this many bytes (at most ALL_MAX_FLOOR_MESSAGES
messages): at 1 MiB two windows were 128 MiB, a jet round of about half a second, where
one writeback stall of the disk halved a round's rate."""
ALL_MAX_FLOOR_MESSAGES = 2048
MAX_IN_FLIGHT = 32
"""Most Produce requests in flight per partition (the server takes 64 per connection)."""
CONSUME_MAX_BYTES = 8 * 1024 * 1024
"""The jet consumer's fetch size (bytes per partition fetch)."""
TIMEOUT_S = 600.0
MIB = 1024 * 1024
TARGET_PUBLISH = 1.5
TARGET_CONSUME = 2.0
NO_COPIES_SIZES = (256 * 1024, 1024 * 1024)
"""Sizes of the ``no_nats_copies`` row (``JET_BENCH_NO_COPIES_SIZES``; empty: none)."""


def _no_copies_sizes() -> tuple[int, ...]:
    env = os.environ.get("JET_BENCH_NO_COPIES_SIZES")
    return NO_COPIES_SIZES if env is None else tuple(int(s) for s in env.split(",") if s)


def _value(size: int) -> bytes:
    """An incompressible-looking value of ``size`` bytes (no compression is used yet)."""
    return os.urandom(size)


def _window(size: int) -> int:
    return max(4, min(WINDOW, WINDOW_BYTES // size))


def _min_round(size: int) -> int:
    """Fewest messages in a round: two windows, at most MIN_ROUND_MESSAGES. A round of
    fewer messages than its window (1 MiB: 8 for ack ALL in --quick, 24 in a full run,
    window 64) never fills the pipeline and measures one message's latency, not a rate."""
    return min(2 * _window(size), MIN_ROUND_MESSAGES)


# -- ceilings -----------------------------------------------------------------------------


def ceiling_write(directory: Path, value: bytes, n: int) -> float:
    """MiB/s of a sequential buffered write of ``n`` copies of ``value`` (no fsync)."""
    path = directory / "ceiling.bin"
    start = time.perf_counter()
    with open(path, "wb") as f:
        write = f.write
        for _ in range(n):
            write(value)
    elapsed = time.perf_counter() - start
    path.unlink()
    return n * len(value) / MIB / elapsed


def ceiling_memcpy(value: bytes, n: int) -> float:
    """MiB/s of copying ``n`` values one by one into a preallocated buffer (bounded size)."""
    size = len(value)
    slots = max(1, min(n, (64 * MIB) // size))
    buf = memoryview(bytearray(slots * size))
    start = time.perf_counter()
    for i in range(n):
        pos = (i % slots) * size
        buf[pos : pos + size] = value
    return n * size / MIB / (time.perf_counter() - start)


# -- jet ----------------------------------------------------------------------------------


def _in_flight(size: int) -> int:
    """Produce requests in flight per partition: enough batches of the producer's
    ``max_batch_bytes`` to hold the window's bytes (JetStream's side has the whole window
    in flight), at least 4 (bench sdk's) and at most MAX_IN_FLIGHT;
    ``JET_BENCH_MAX_IN_FLIGHT`` overrides it."""
    env = os.environ.get("JET_BENCH_MAX_IN_FLIGHT")
    if env:
        return int(env)
    batches = -(-_window(size) * size // DEFAULT_MAX_BATCH_BYTES)
    return max(4, min(MAX_IN_FLIGHT, batches))


async def jet_publish(
    client: Client,
    stream: str,
    value: bytes,
    n: int,
    ack: AckPolicy,
    compression: str | None = None,
    offload: int | None = DEFAULT_OFFLOAD_BYTES,
) -> float:
    """bench_sdk's acked publish, with this size's value, window and requests in flight
    (``offload``: the producer's ``compression_offload_bytes``, its default unless given)."""
    size = len(value)
    return await bench_sdk.jet_publish(
        client, stream, n, ack, value, _window(size), _in_flight(size), compression, offload
    )


async def jet_consume(client: Client, stream: str, n: int) -> float:
    return await bench_sdk.jet_consume(
        client, stream, n, timeout_s=TIMEOUT_S, max_bytes=CONSUME_MAX_BYTES, auto_commit=None
    )


# -- JetStream ----------------------------------------------------------------------------


async def js_connect(url: str, window: int) -> tuple[Any, Any]:
    import nats

    nc = await nats.connect(url, pending_size=8 * WINDOW_BYTES)
    return nc, nc.jetstream(publish_async_max_pending=window)


async def js_stream(
    js: Any, name: str, subject: str, *, s2: bool = False, replicas: int = 1
) -> None:
    """A JetStream file stream, uncapped message size; S2-compressed if ``s2``."""
    from nats.js.api import StorageType, StoreCompression, StreamConfig

    await js.add_stream(
        StreamConfig(
            name=name,
            subjects=[subject],
            storage=StorageType.FILE,
            num_replicas=replicas,
            max_msg_size=-1,
            compression=StoreCompression.S2 if s2 else StoreCompression.NONE,
        )
    )


# -- rounds -------------------------------------------------------------------------------


Pids = int | tuple[int, ...] | None
"""A process, several (summed), or none (unknown)."""


class Row:
    """One printed comparison: per-round rates of both sides and their CPU per MiB."""

    def __init__(self, label: str, size: int, target: float) -> None:
        self.label = label
        self.size = size
        self.target = target
        self.jet: list[float] = []
        self.js: list[float] = []
        self.cpu_ms_per_mib: list[float] = []
        """jet's CPU per MiB of values: this process (the client) + the jet server(s)."""
        self.nats_ms_per_mib: list[float] = []
        """The CPU per MiB of jet's nats-server in jet's rounds (the records' NATS copies)."""
        self.js_ms_per_mib: list[float] = []
        """JetStream's: this process (the publisher) + its nats-server(s)."""

    def ratio(self) -> float:
        return statistics.median(a / b for a, b in zip(self.jet, self.js, strict=True))

    def mib(self, rates: list[float]) -> float:
        return statistics.median(rates) * self.size / MIB


def _servers_cpu_s(pids: Pids) -> float:
    """CPU seconds of the server process(es) (0.0 if unknown)."""
    if isinstance(pids, tuple):
        return sum(_process_cpu_s(pid) for pid in pids)
    return _process_cpu_s(pids)


async def alternate(
    row: Row,
    rounds: int,
    n: int,
    jet: Callable[[int], Awaitable[float]],
    js: Callable[[int], Awaitable[float]],
    server_pid: Pids,
    warm: int,
    nats_pid: Pids = None,
    js_pid: Pids = None,
) -> None:
    """A warm-up of ``warm`` messages per side (if any), then ``rounds`` alternating rounds.
    ``server_pid``: the jet server(s); ``nats_pid``: jet's nats-server; ``js_pid``:
    JetStream's nats-server(s), for the CPU per MiB of each side."""
    if warm:
        await jet(warm)
        await js(warm)
    mib = n * row.size / MIB
    for i in range(rounds):
        server, nats, client = (
            _servers_cpu_s(server_pid),
            _servers_cpu_s(nats_pid),
            time.process_time(),
        )
        row.jet.append(await jet(n))
        used = _servers_cpu_s(server_pid) - server + time.process_time() - client
        row.cpu_ms_per_mib.append(used * 1000 / mib)
        row.nats_ms_per_mib.append((_servers_cpu_s(nats_pid) - nats) * 1000 / mib)
        server, client = _servers_cpu_s(js_pid), time.process_time()
        row.js.append(await js(n))
        used = _servers_cpu_s(js_pid) - server + time.process_time() - client
        row.js_ms_per_mib.append(used * 1000 / mib)
        print(
            f"    {row.label} round {i + 1}: jet {row.jet[-1]:,.0f} msg/s, jetstream "
            f"{row.js[-1]:,.0f} msg/s, ratio {row.jet[-1] / row.js[-1]:.2f}x, CPU ms/MiB jet "
            f"{row.cpu_ms_per_mib[-1]:.1f} + its nats {row.nats_ms_per_mib[-1]:.1f}, "
            f"jetstream {row.js_ms_per_mib[-1]:.1f} (load {_load()})",
            flush=True,
        )


def _size_label(size: int) -> str:
    if size >= MIB:
        return f"{size // MIB} MiB"
    if size >= 1024:
        return f"{size // 1024} KiB"
    return f"{size} B"


async def one_size(
    size: int,
    quick: bool,
    client: Client,
    js_url: str,
    js_sync_url: str,
    server_pid: int | None,
    data_dir: Path,
    nats_pid: int | None = None,
) -> list[tuple[Row, float, float]]:
    """The rows of one value size; ``server_pid``, ``nats_pid``: jet's server and
    nats-server (JetStream's from JETSTREAM_PIDS), for the CPU per MiB."""
    rounds = QUICK_ROUNDS if quick else int(os.environ.get("JET_BENCH_ROUNDS", ROUNDS))
    round_bytes = QUICK_ROUND_BYTES if quick else ROUND_BYTES
    cap = QUICK_MAX_ROUND_MESSAGES if quick else MAX_ROUND_MESSAGES
    n = max(_min_round(size), min(cap, round_bytes // size))
    all_floor = 0 if quick else min(ALL_MAX_FLOOR_MESSAGES, ALL_MIN_ROUND_BYTES // size)
    n_all = max(_min_round(size), n // ALL_DIVISOR, all_floor)
    warm = min(n // 4, 1000)
    value = _value(size)
    window = _window(size)
    tag = f"s{size}"
    print(
        f"  {_size_label(size)}: {n:,} messages per round ({n_all:,} for ack ALL), window "
        f"{window}, {rounds} round(s) (load {_load()})",
        flush=True,
    )
    no_copies = size in _no_copies_sizes()
    names = (f"{tag}pub", f"{tag}all", f"{tag}cons") + ((f"{tag}nc",) if no_copies else ())
    for name in names:
        await client.create_stream(
            name,
            f"bench.{name}",
            max_message_bytes=max(size, 1024),
            no_nats_copies=name == f"{tag}nc",
            exist_ok=True,
        )
    nc, js = await js_connect(js_url, window)
    snc, sjs = await js_connect(js_sync_url, window)
    try:
        await js_stream(js, f"P{tag}", f"js.{tag}.pub")
        await js_stream(js, f"C{tag}", f"js.{tag}.cons")
        await js_stream(sjs, f"A{tag}", f"js.{tag}.all")

        async def publish_row(
            label: str,
            stream: str,
            ack: AckPolicy,
            ctx: Any,
            subject: str,
            count: int,
            js_pid: int | None,
        ) -> Row:
            """Publishes of ``count`` values to jet ``stream`` with ``ack`` alternating with
            as many to JetStream ``subject`` through ``ctx``."""
            row = Row(label, size, TARGET_PUBLISH)
            await alternate(
                row,
                rounds,
                count,
                lambda k: jet_publish(client, stream, value, k, ack),
                lambda k: js_publish(ctx, subject, k, value),
                server_pid,
                min(warm, count // 4),
                nats_pid,
                js_pid,
            )
            return row

        rows = [
            await publish_row(
                "publish ack LEADER",
                f"{tag}pub",
                AckPolicy.LEADER,
                js,
                f"js.{tag}.pub",
                n,
                JETSTREAM_PIDS.get(js_url),
            )
        ]
        if no_copies:
            label = "ack LEADER, no NATS copies"
            rows.append(
                await publish_row(
                    label,
                    f"{tag}nc",
                    AckPolicy.LEADER,
                    js,
                    f"js.{tag}.pub",
                    n,
                    JETSTREAM_PIDS.get(js_url),
                )
            )
        all_row = await publish_row(
            "publish ack ALL / sync always",
            f"{tag}all",
            AckPolicy.ALL,
            sjs,
            f"js.{tag}.all",
            n_all,
            JETSTREAM_PIDS.get(js_sync_url),
        )
        await jet_publish(client, f"{tag}cons", value, n, AckPolicy.LEADER)
        await js_publish(js, f"js.{tag}.cons", n, value)
        cons = Row("consume from 0 / ordered", size, TARGET_CONSUME)
        await alternate(
            cons,
            rounds,
            n,
            lambda k: jet_consume(client, f"{tag}cons", k),
            lambda k: js_consume_ordered(js, f"js.{tag}.cons", k),
            server_pid,
            0,
            nats_pid,
            JETSTREAM_PIDS.get(js_url),
        )
    finally:
        for name in names:
            await client.delete_stream(name)
        for ctx, name in ((js, f"P{tag}"), (js, f"C{tag}"), (sjs, f"A{tag}")):
            await ctx.delete_stream(name)
        await nc.close()
        await snc.close()
    n_ceiling = max(8, round_bytes // size)
    write = ceiling_write(data_dir, value, n_ceiling)
    memcpy = ceiling_memcpy(value, n_ceiling)
    return [(row, write, memcpy) for row in (*rows, all_row, cons)]


def _table(rows: list[tuple[Row, float, float]]) -> None:
    print(
        "\n  summary: medians of alternating rounds; ratio = jet / JetStream; ceiling = this "
        "machine's buffered write to the data dir / memory copy of the same values; CPU ms "
        "per MiB of values: jet = client + jet server(s), +nats = jet's nats-server (the "
        "records' NATS copies), js = publisher + JetStream server(s)"
    )
    print(
        f"  {'size':>7} {'row':<30} {'jet MiB/s':>10} {'js MiB/s':>9} {'ratio':>6} "
        f"{'target':<14} {'write MiB/s':>11} {'jet/write':>9} {'memcpy MiB/s':>12} "
        f"{'jet/memcpy':>10} {'jet CPU ms/MiB':>14} {'+nats':>6} {'js CPU':>7}"
    )
    for row, write, memcpy in rows:
        ratio = row.ratio()
        jet_mib = row.mib(row.jet)
        verdict = "met" if ratio >= row.target else "NOT met"
        print(
            f"  {_size_label(row.size):>7} {row.label:<30} {jet_mib:>10,.1f} "
            f"{row.mib(row.js):>9,.1f} {ratio:>5.2f}x {f'>= {row.target:g}x {verdict}':<14} "
            f"{write:>11,.0f} {jet_mib / write:>9.1%} {memcpy:>12,.0f} "
            f"{jet_mib / memcpy:>10.2%} {statistics.median(row.cpu_ms_per_mib):>14.1f} "
            f"{statistics.median(row.nats_ms_per_mib):>6.1f} "
            f"{statistics.median(row.js_ms_per_mib):>7.1f}"
        )


async def _main(
    quick: bool,
    sizes: tuple[int, ...],
    jet_servers: list[str],
    js_url: str,
    js_sync_url: str,
    server_pid: int | None,
    data_dir: Path,
    compression_sizes: tuple[int, ...],
    nats_pid: int | None = None,
) -> list[tuple[Row, float, float]]:
    rows: list[tuple[Row, float, float]] = []
    async with Client(jet_servers) as client:
        for size in sizes:
            rows.extend(
                await one_size(
                    size, quick, client, js_url, js_sync_url, server_pid, data_dir, nats_pid
                )
            )
        from bench.sizes_extra import compression_size, json_like

        for size in compression_sizes:
            value = json_like(size)
            n_ceiling = max(8, (QUICK_ROUND_BYTES if quick else ROUND_BYTES) // size)
            write = ceiling_write(data_dir, value, n_ceiling)
            memcpy = ceiling_memcpy(value, n_ceiling)
            for row in await compression_size(size, quick, client, js_url, server_pid, nats_pid):
                rows.append((row, write, memcpy))
    return rows


def run(quick: bool) -> None:
    """Every size in SIZES (or JET_BENCH_VALUE_SIZES), side by side with JetStream and ceilings."""
    from bench import sizes_extra as extra

    env = os.environ.get("JET_BENCH_VALUE_SIZES")
    sizes = SIZES if env is None else tuple(int(s) for s in env.split(",") if s)
    z_env = os.environ.get("JET_BENCH_COMPRESSION_SIZES")
    z_sizes = (
        extra.COMPRESSION_SIZES if z_env is None else tuple(int(s) for s in z_env.split(",") if s)
    )
    rf3_env = os.environ.get("JET_BENCH_RF3_SIZES")
    rf3_sizes = (
        extra.RF3_SIZES if rf3_env is None else tuple(int(s) for s in rf3_env.split(",") if s)
    )
    print(f"load {_load()}; sizes {', '.join(map(_size_label, sizes))}", flush=True)
    rows: list[tuple[Row, float, float]] = []
    if sizes or z_sizes:  # none: the RF 3 row only
        with compared_servers() as (dev, js_url, js_sync_url):
            server_pid = dev.servers[0].pid if dev.servers else None
            nats = dev.nats.proc if dev.nats is not None else None
            assert dev.root is not None
            rows += anyio.run(
                _main,
                quick,
                sizes,
                dev.addresses,
                js_url,
                js_sync_url,
                server_pid,
                Path(dev.root),
                z_sizes,
                nats.pid if nats is not None else None,
                backend="asyncio",
            )
    if rf3_sizes:
        root = Path(tempfile.mkdtemp(prefix="bench-sizes-rf3-"))
        try:
            with (
                open(os.devnull, "wb") as devnull,
                DevCluster(size=3, log_file=devnull) as dev3,
                extra.JetStreamCluster(root / "js").running() as jsc,
            ):
                assert dev3.root is not None
                rows += anyio.run(
                    extra.rf3_main,
                    quick,
                    rf3_sizes,
                    dev3.addresses,
                    jsc.urls,
                    Path(dev3.root),
                    tuple(s.pid for s in dev3.servers if s.pid is not None),
                    dev3.nats.proc.pid if dev3.nats and dev3.nats.proc else None,
                    tuple(n.proc.pid for n in jsc.nodes if n.proc is not None),
                    backend="asyncio",
                )
        finally:
            shutil.rmtree(root, ignore_errors=True)
    _table(rows)


if __name__ == "__main__":
    import sys

    run(quick="--quick" in sys.argv)
