"""The sync API against the async one it wraps: ``python -m bench sync [--quick]``.

One ``jet dev`` server, 100 B messages, rounds alternating the two sides; per row the
median of the per-round ratios (sync / async; targets from issue 18):

- iterate ``for msg in consumer`` over stored messages from offset 0 (target >= 0.8x);
  also the client process's CPU per message (both threads of the sync client), which a
  shared machine disturbs less than the rates;
- ``send_soon`` x N then ``flush`` with ack LEADER (target >= 0.8x);
- ``send`` (wait for each ack), for the record: a sync call is a round trip to the loop
  thread, so it pays one thread hop per message.
"""

from __future__ import annotations

import os
import statistics
import time
import uuid

import anyio

from jetsdk import AckPolicy, Client, Consumer, Producer, sync
from jetserver.testing.devcluster import DevCluster

VALUE = b"x" * 100


Measured = tuple[float, float]
"""msg/s, and the client process's CPU µs per message."""


def _sync_iterate(addresses: list[str], stream: str, n: int) -> Measured:
    with sync.Client(addresses) as client, sync.Consumer(client, stream) as consumer:
        started, cpu = time.perf_counter(), time.process_time()
        for seen, _msg in enumerate(consumer, 1):
            if seen == n:
                break
        cpu = time.process_time() - cpu
        return n / (time.perf_counter() - started), cpu / n * 1e6


async def _async_iterate(addresses: list[str], stream: str, n: int) -> Measured:
    async with Client(addresses) as client, Consumer(client, stream) as consumer:
        started, cpu, seen = time.perf_counter(), time.process_time(), 0
        async for _msg in consumer:
            seen += 1
            if seen == n:
                break
        cpu = time.process_time() - cpu
        return n / (time.perf_counter() - started), cpu / n * 1e6


def _sync_send_soon(addresses: list[str], stream: str, n: int) -> float:
    with (
        sync.Client(addresses) as client,
        sync.Producer(client, stream, ack=AckPolicy.LEADER) as producer,
    ):
        started = time.perf_counter()
        for _ in range(n):
            producer.send_soon(VALUE)
        producer.flush()
        return n / (time.perf_counter() - started)


async def _async_send_soon(addresses: list[str], stream: str, n: int) -> float:
    async with (
        Client(addresses) as client,
        Producer(client, stream, ack=AckPolicy.LEADER) as producer,
    ):
        started = time.perf_counter()
        for _ in range(n):
            await producer.send_soon(VALUE)
        await producer.flush()
        return n / (time.perf_counter() - started)


def _sync_send(addresses: list[str], stream: str, n: int) -> float:
    with (
        sync.Client(addresses) as client,
        sync.Producer(client, stream, ack=AckPolicy.LEADER, linger=0) as producer,
    ):
        started = time.perf_counter()
        for _ in range(n):
            producer.send(VALUE)
        return n / (time.perf_counter() - started)


async def _async_send(addresses: list[str], stream: str, n: int) -> float:
    async with (
        Client(addresses) as client,
        Producer(client, stream, ack=AckPolicy.LEADER, linger=0) as producer,
    ):
        started = time.perf_counter()
        for _ in range(n):
            await producer.send(VALUE)
        return n / (time.perf_counter() - started)


def _split(result: float | Measured) -> tuple[float, float | None]:
    """(msg/s, CPU µs per message or None) of a row's result."""
    return result if isinstance(result, tuple) else (result, None)


def _stream(addresses: list[str], fill: int) -> str:
    name = f"bs-{uuid.uuid4().hex[:8]}"
    with sync.Client(addresses) as client:
        client.create_stream(name, name)
        if fill:
            with sync.Producer(client, name, ack=AckPolicy.LEADER) as producer:
                for _ in range(fill):
                    producer.send_soon(VALUE)
                producer.flush()
    return name


def run(quick: bool) -> None:
    """Print each row: sync and async msg/s per round, and the median ratio."""
    rounds = 3
    n_iter, n_soon, n_send = (50_000, 20_000, 1_000) if quick else (100_000, 50_000, 3_000)
    with open(os.devnull, "wb") as devnull, DevCluster(size=1, log_file=devnull) as dev:
        addr = dev.addresses
        stored = _stream(addr, n_iter)
        rows = (
            (
                f"iterate {n_iter:,} stored",
                lambda: _sync_iterate(addr, stored, n_iter),
                lambda: anyio.run(_async_iterate, addr, stored, n_iter),
                0.8,
            ),
            (
                f"send_soon x {n_soon:,} + flush",
                lambda: _sync_send_soon(addr, _stream(addr, 0), n_soon),
                lambda: anyio.run(_async_send_soon, addr, _stream(addr, 0), n_soon),
                0.8,
            ),
            (
                f"send x {n_send:,} (one ack each)",
                lambda: _sync_send(addr, _stream(addr, 0), n_send),
                lambda: anyio.run(_async_send, addr, _stream(addr, 0), n_send),
                None,
            ),
        )
        print(f"one jet dev server, 100 B, ack LEADER, {rounds} rounds (sync / async)")
        for label, sync_fn, async_fn, target in rows:
            ratios, cpu_ratios = [], []
            for r in range(rounds):
                (s, s_cpu), (a, a_cpu) = _split(sync_fn()), _split(async_fn())
                cpu = ""
                if s_cpu is not None and a_cpu is not None:
                    cpu_ratios.append(a_cpu / s_cpu)
                    cpu = f"  (client CPU sync {s_cpu:.2f}  async {a_cpu:.2f} us/msg)"
                ratios.append(s / a)
                print(f"  {label:<32} round {r + 1}: sync {s:>9,.0f}  async {a:>9,.0f} msg/s{cpu}")
            if cpu_ratios:
                print(
                    f"  {label:<32} median CPU per message async / sync "
                    f"{statistics.median(cpu_ratios):.2f}x"
                )
            median = statistics.median(ratios)
            verdict = (
                ""
                if target is None
                else (f"  target >= {target}x {'met' if median >= target else 'NOT met'}")
            )
            print(f"  {label:<32} median ratio {median:.2f}x{verdict}", flush=True)
