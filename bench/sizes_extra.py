"""The extra rows of ``bench sizes`` (:mod:`bench.bench_sizes`): compression, and RF 3 ack
ALL against JetStream R3. Kept apart for size; run by :func:`bench.bench_sizes.run`."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import anyio

from bench.bench_cluster import JetStreamCluster
from bench.bench_sdk import JETSTREAM_PIDS
from bench.bench_sizes import (
    MAX_ROUND_MESSAGES,
    QUICK_MAX_ROUND_MESSAGES,
    QUICK_ROUND_BYTES,
    QUICK_ROUNDS,
    ROUND_BYTES,
    ROUNDS,
    TARGET_PUBLISH,
    Row,
    _load,
    _min_round,
    _size_label,
    _value,
    _window,
    alternate,
    ceiling_memcpy,
    ceiling_write,
    jet_publish,
    js_connect,
    js_publish,
    js_stream,
)
from jetsdk import AckPolicy, Client
from jetsdk.producer.compression_stage import DEFAULT_OFFLOAD_BYTES

__all__ = [
    "COMPRESSION_SIZES",
    "RF3_SIZES",
    "JetStreamCluster",
    "compression_size",
    "json_like",
    "rf3_main",
]

TARGET_RF3 = 1.5
COMPRESSION_SIZES = (16 * 1024,)
"""Sizes of the compression rows (``JET_BENCH_COMPRESSION_SIZES``; empty: none)."""
LOOP = None
"""The ``compression_offload_bytes`` of the "zstd on the loop" row: the same values
compressed on the producer's event loop, an A/B of the compression stage (the producer's
default, jetsdk.producer.compression_stage) against the "zstd" row beside it (each against
the same JetStream)."""
RF3_SIZES = (16 * 1024,)
"""Sizes of the RF 3 row (the issue's target is at 16 KiB)."""
RF3_READY_TIMEOUT_S = 60.0
"""Bound on the JetStream R3 stream getting a leader and current replicas."""


def json_like(size: int) -> bytes:
    """A compressible value of ``size`` bytes: JSON records of varying numbers and names."""
    out = bytearray()
    i = 0
    while len(out) < size:
        out += b'{"id":%d,"user":"user-%d","amount":%d.%02d,"status":"settled"},' % (
            i,
            (i * 7919) % 100_003,
            (i * 31) % 10_000,
            i % 100,
        )
        i += 1
    return bytes(out[:size])


async def compression_size(
    size: int,
    quick: bool,
    client: Client,
    js_url: str,
    server_pid: int | None,
    nats_pid: int | None = None,
) -> list[Row]:
    """Publish ack LEADER of a JSON-like and a random value, with and without zstd (and the
    JSON-like one with lz4, jetsdk's fast codec, and with zstd on the producer's event loop,
    ``compression_offload_bytes`` None, not in its worker thread, the default), vs
    JetStream's publish_async to a stream with and without s2 (its store compression: in
    the server, at S2's fast level, with its skipping of incompressible input); jet
    compresses in the producer, one value at a time (spec/envelope.md). The MiB/s are of
    payload as sent (before compression)."""
    rounds = QUICK_ROUNDS if quick else ROUNDS
    round_bytes = QUICK_ROUND_BYTES if quick else ROUND_BYTES
    cap = QUICK_MAX_ROUND_MESSAGES if quick else MAX_ROUND_MESSAGES
    n = max(_min_round(size), min(cap, round_bytes // size))
    window = _window(size)
    print(
        f"  {_size_label(size)} compression: {n:,} messages per round, window {window}, "
        f"{rounds} round(s) (load {_load()})",
        flush=True,
    )
    cases = [
        ("JSON-like, none / none", json_like(size), None, DEFAULT_OFFLOAD_BYTES),
        ("JSON-like, zstd / s2", json_like(size), "zstd", DEFAULT_OFFLOAD_BYTES),
        ("JSON-like, zstd on loop / s2", json_like(size), "zstd", LOOP),
        ("JSON-like, lz4 / s2", json_like(size), "lz4", DEFAULT_OFFLOAD_BYTES),
        ("random, zstd / s2", _value(size), "zstd", DEFAULT_OFFLOAD_BYTES),
    ]
    nc, js = await js_connect(js_url, window)
    rows = []
    try:
        for i, (label, value, codec, offload) in enumerate(cases):
            name, js_name = f"z{size}c{i}", f"Z{size}C{i}"
            await client.create_stream(
                name, f"bench.{name}", max_message_bytes=max(size, 1024), exist_ok=True
            )
            await js_stream(js, js_name, f"js.{name}", s2=codec is not None)
            row = Row(label, size, TARGET_PUBLISH)
            try:
                await alternate(
                    row,
                    rounds,
                    n,
                    lambda k, v=value, c=codec, s=name, o=offload: jet_publish(
                        client, s, v, k, AckPolicy.LEADER, c, o
                    ),
                    lambda k, v=value, s=name: js_publish(js, f"js.{s}", k, v),
                    server_pid,
                    min(n // 4, 1000),
                    nats_pid,
                    JETSTREAM_PIDS.get(js_url),
                )
            finally:
                await client.delete_stream(name)
                await js.delete_stream(js_name)
            rows.append(row)
    finally:
        await nc.close()
    return rows


async def _js_r3_stream(js: Any, name: str, subject: str) -> None:
    """An R3 file stream, once the JetStream cluster has a meta leader (bounded)."""
    deadline = time.monotonic() + RF3_READY_TIMEOUT_S
    while True:
        try:
            await js_stream(js, name, subject, replicas=3)
            break
        except Exception as exc:  # no meta leader yet, peers not connected
            if time.monotonic() > deadline:
                raise RuntimeError(f"JetStream R3 stream not created: {exc}") from exc
            await anyio.sleep(0.25)
    while True:
        info = await js.stream_info(name)
        current = [r for r in (info.cluster.replicas or []) if r.current] if info.cluster else []
        if info.cluster is not None and info.cluster.leader and len(current) == 2:
            return
        if time.monotonic() > deadline:
            raise RuntimeError("JetStream R3 stream has no leader with 2 current replicas")
        await anyio.sleep(0.1)


async def rf3_size(
    size: int,
    quick: bool,
    client: Client,
    js_urls: list[str],
    data_dir: Path,
    server_pids: tuple[int, ...],
    nats_pid: int | None = None,
    js_pids: tuple[int, ...] = (),
) -> tuple[Row, float, float]:
    """Publish ack ALL to an RF 3 stream vs publish_async to a JetStream R3 stream."""
    rounds = QUICK_ROUNDS if quick else ROUNDS
    round_bytes = QUICK_ROUND_BYTES if quick else ROUND_BYTES
    cap = QUICK_MAX_ROUND_MESSAGES if quick else MAX_ROUND_MESSAGES
    n = max(_min_round(size), min(cap, round_bytes // size))
    value = _value(size)
    window = _window(size)
    name = f"r{size}"
    print(
        f"  {_size_label(size)} RF 3: {n:,} messages per round, window {window}, "
        f"{rounds} round(s) (load {_load()})",
        flush=True,
    )
    await client.create_stream(
        name,
        f"bench.{name}",
        replication_factor=3,
        max_message_bytes=max(size, 1024),
        exist_ok=True,
    )
    nc, js = await js_connect(js_urls[0], window)
    try:
        await _js_r3_stream(js, f"R{size}", f"js.r{size}")
        row = Row("RF 3 ack ALL / R3", size, TARGET_RF3)
        await alternate(
            row,
            rounds,
            n,
            lambda k: jet_publish(client, name, value, k, AckPolicy.ALL),
            lambda k: js_publish(js, f"js.r{size}", k, value),
            server_pids,
            min(n // 4, 1000),
            nats_pid,
            js_pids or None,
        )
    finally:
        await client.delete_stream(name)
        await js.delete_stream(f"R{size}")
        await nc.close()
    n_ceiling = max(8, round_bytes // size)
    return row, ceiling_write(data_dir, value, n_ceiling), ceiling_memcpy(value, n_ceiling)


async def rf3_main(
    quick: bool,
    sizes: tuple[int, ...],
    jet_servers: list[str],
    js_urls: list[str],
    data_dir: Path,
    server_pids: tuple[int, ...],
    nats_pid: int | None = None,
    js_pids: tuple[int, ...] = (),
) -> list[tuple[Row, float, float]]:
    async with Client(jet_servers) as client:
        return [
            await rf3_size(size, quick, client, js_urls, data_dir, server_pids, nats_pid, js_pids)
            for size in sizes
        ]
