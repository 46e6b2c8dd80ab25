"""Large writes on the event loop vs from a worker thread (issue 39): the A/B of
``[storage] large_writes_in_thread``.

Two jet servers (RF 1, one partition each) run side by side, A with
``large_writes_in_thread = false`` (every append on the loop, as before) and B with the
default (a batch of a few large records written from a worker thread,
:mod:`jetserver.storage.fsync_runner`). Rounds of ack-ALL publishes of 1 MiB and 256 KiB
values alternate between them (the order flips every round). Per round: MiB/s, the
server's CPU per MiB (/proc), and from its metrics the large writes by place and, on A,
the event-loop time per large write (``jet_large_write_loop_seconds_total``: exact, where
MiB/s is noisy on a shared machine). Medians at the end, with the load.

Run: ``python -m bench large_writes [--quick]``. ``JET_BENCH_ROUNDS`` (default 6) and
``JET_BENCH_ROUND_MIB`` (default 384; 96 with ``--quick``, 2 rounds) set the rounds.
"""

from __future__ import annotations

import os
import socket
import statistics
import urllib.request
from typing import Any

import anyio

from bench.bench_sdk import _load, _process_cpu_s
from bench.bench_sizes import jet_publish
from jetsdk import AckPolicy, Client
from jetserver.testing.devcluster import DevCluster

SIZES = (1024 * 1024, 256 * 1024)
MIB = 1024 * 1024
LOOP = 'jet_large_writes_total{place="loop"}'
THREAD = 'jet_large_writes_total{place="thread"}'
LOOP_S = "jet_large_write_loop_seconds_total"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _scrape(port: int) -> dict[str, float]:
    url = f"http://127.0.0.1:{port}/metrics"
    with urllib.request.urlopen(url, timeout=5) as answer:
        text = answer.read().decode()
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith(("jet_large_write", "jet_fsyncs_total")):
            name, value = line.rsplit(" ", 1)
            out[name] = float(value)
    return out


async def _main(setups: list[tuple[str, DevCluster, int]], rounds: int, round_mib: int) -> None:
    results: dict[tuple[str, int], list[tuple[float, float, float]]] = {}
    clients: dict[str, Client] = {}
    try:
        for name, dev, _port in setups:
            clients[name] = await Client(dev.addresses).__aenter__()
        for size in SIZES:
            n = max(24, round_mib * MIB // size)
            value = os.urandom(size)
            for name, _dev, _port in setups:
                await clients[name].create_stream(
                    f"lw{size}", f"lw.{size}", max_message_bytes=size, exist_ok=True
                )
                await jet_publish(clients[name], f"lw{size}", value, n // 4, AckPolicy.ALL)
            for r in range(rounds):
                for name, dev, port in setups if r % 2 == 0 else setups[::-1]:
                    pid = dev.servers[0].pid
                    before, cpu0 = _scrape(port), _process_cpu_s(pid)
                    rate = await jet_publish(clients[name], f"lw{size}", value, n, AckPolicy.ALL)
                    after, cpu1 = _scrape(port), _process_cpu_s(pid)
                    d = {k: after[k] - before.get(k, 0.0) for k in after}
                    mib_s, ms_mib = rate * size / MIB, (cpu1 - cpu0) * 1000 / (n * size / MIB)
                    on_loop = d.get(LOOP, 0.0)
                    loop_ms = d.get(LOOP_S, 0.0) * 1000 / on_loop if on_loop else 0.0
                    results.setdefault((name, size), []).append((mib_s, ms_mib, loop_ms))
                    print(
                        f"  {name} {size // 1024} KiB round {r}: {mib_s:.0f} MiB/s, server "
                        f"{ms_mib:.2f} CPU ms/MiB, large writes on the loop {on_loop:.0f} "
                        f"({loop_ms:.3f} ms each), in a thread {d.get(THREAD, 0.0):.0f} "
                        f"(load {_load()})",
                        flush=True,
                    )
    finally:
        for client in reversed(list(clients.values())):
            await client.__aexit__(None, None, None)
    print(f"\n  medians (load {_load()}):")
    for (name, size), rows in results.items():
        print(
            f"  {name:<9} {size // 1024:>5} KiB: {statistics.median(r[0] for r in rows):.0f} "
            f"MiB/s, server {statistics.median(r[1] for r in rows):.2f} CPU ms/MiB, loop "
            f"{statistics.median(r[2] for r in rows):.3f} ms per large write "
            f"(rounds {[round(r[0]) for r in rows]})"
        )


def run(quick: bool) -> None:
    """A (large writes on the loop) against B (from a worker thread), interleaved."""
    rounds = 2 if quick else int(os.environ.get("JET_BENCH_ROUNDS", "6"))
    round_mib = 96 if quick else int(os.environ.get("JET_BENCH_ROUND_MIB", "384"))
    port_a, port_b = _free_port(), _free_port()

    def settings(in_thread: bool, port: int) -> dict[str, Any]:
        return {"storage": {"large_writes_in_thread": in_thread}, "metrics": {"port": port}}

    print(f"load {_load()}; {rounds} rounds of {round_mib} MiB per side and size", flush=True)
    with (
        open(os.devnull, "wb") as devnull,
        DevCluster(size=1, log_file=devnull, settings=settings(False, port_a)) as a,
        DevCluster(size=1, log_file=devnull, settings=settings(True, port_b)) as b,
    ):
        setups = [("A loop", a, port_a), ("B thread", b, port_b)]
        anyio.run(_main, setups, rounds, round_mib, backend="asyncio")
