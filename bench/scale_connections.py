"""Many long-polling consumer connections on one server (a part of ``bench scale``).

A child process (``python -m bench.scale_connections HOST:PORT N STREAM``) opens N client
connections, each with one Fetch parked on an idle partition (re-sent whenever the server
answers it), and prints ``parked`` once every connection has sent its Fetch. The bench
measures the server's RSS and open files above the idle server, and the latency of acked
Produce requests to another stream before and while the connections wait.
"""

from __future__ import annotations

import asyncio
import os
import resource
import struct
import subprocess
import sys
import time
from pathlib import Path

import anyio

from bench.stats import pct
from jetsdk import AckPolicy, Client, Producer
from jetsdk.codec.fetch_messages import FetchRequest, encode_fetch_request
from jetsdk.codec.frames import Api, encode_frame
from jetserver.testing import reap
from jetserver.testing.devcluster import DevCluster

WAIT_MS = 60_000
"""Each parked Fetch's max_wait (re-sent when answered)."""
DIAL_CONCURRENCY = 256
"""Connections being opened at once."""
PRODUCE_SAMPLES = 400
"""Acked Produce requests timed, one at a time, for each latency figure."""
_PAGE = os.sysconf("SC_PAGE_SIZE")


class _Parked:
    """Counts the connections whose first Fetch is written; ``all`` is set at ``n``."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.count = 0
        self.all = asyncio.Event()

    def one(self) -> None:
        self.count += 1
        if self.count == self.n:
            self.all.set()


async def _waiter(
    host: str, port: int, body: bytes, dialling: asyncio.Semaphore, parked: _Parked
) -> None:
    async with dialling:
        reader, writer = await asyncio.open_connection(host, port)
    cid = 1
    while True:
        writer.write(encode_frame(Api.FETCH, cid, body))
        await writer.drain()
        if cid == 1:
            parked.one()
        (length,) = struct.unpack(">I", await reader.readexactly(4))
        await reader.readexactly(length)
        cid += 1


async def _hold(address: str, n: int, stream: str) -> None:
    host, port = address.rsplit(":", 1)
    body = encode_fetch_request(FetchRequest(stream, 0, 0, 1024, WAIT_MS))
    dialling = asyncio.Semaphore(DIAL_CONCURRENCY)
    parked = _Parked(n)
    tasks = [
        asyncio.create_task(_waiter(host, int(port), body, dialling, parked)) for _ in range(n)
    ]
    done = asyncio.create_task(parked.all.wait())
    await asyncio.wait([done, *tasks], timeout=120, return_when=asyncio.FIRST_COMPLETED)
    for task in tasks:
        if task.done():
            task.result()  # a waiter failed: raise its error
    if not done.done():
        raise TimeoutError(f"only {parked.count} of {n} connections parked in 120 s")
    print("parked", flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)


def rss_bytes(pid: int) -> int:
    """Resident memory of process ``pid`` (from /proc)."""
    with open(f"/proc/{pid}/statm", encoding="ascii") as f:
        return int(f.read().split()[1]) * _PAGE


def open_files(pid: int) -> int:
    """Files (and sockets) process ``pid`` holds open."""
    return len(os.listdir(f"/proc/{pid}/fd"))


async def _produce_latencies(address: list[str], stream: str, n: int) -> list[float]:
    async with Client(address) as client, Producer(client, stream, ack=AckPolicy.LEADER) as p:
        for _ in range(20):  # warm the connection and the partition
            await p.send(b"w" * 100)
        out = []
        for _ in range(n):
            started = time.perf_counter()
            await p.send(b"x" * 100)
            out.append((time.perf_counter() - started) * 1000)
        return sorted(out)


async def _setup(address: list[str]) -> None:
    async with Client(address) as client:
        await client.create_stream("idle", "idle", partitions=1)
        await client.create_stream("busy", "busy", partitions=1)


def measure(connections: int) -> dict[str, float]:
    """Server costs per waiting connection, and Produce latency before and while they wait."""
    limits = {"limits": {"max_connections": connections + 1000}}
    with (
        open(os.devnull, "wb") as devnull,
        DevCluster(size=1, log_file=devnull, settings=limits) as dev,
    ):
        sid = next(iter(dev.servers)).server_id
        pid = dev.server(sid).pid
        anyio.run(_setup, dev.addresses, backend="asyncio")
        before = anyio.run(_produce_latencies, dev.addresses, "busy", PRODUCE_SAMPLES)
        rss0, files0 = rss_bytes(pid), open_files(pid)
        started = time.perf_counter()
        child = subprocess.Popen(
            [sys.executable, "-m", "bench.scale_connections", dev.addresses[0], str(connections)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            cwd=Path(__file__).resolve().parent.parent,
        )
        try:
            assert child.stdout is not None
            line = child.stdout.readline().strip()
            if line != "parked":
                raise RuntimeError(f"the connection holder failed: {line!r}")
            parked_s = time.perf_counter() - started
            # Until the server holds every connection (its accept loop may lag the client).
            deadline = time.monotonic() + 60
            while open_files(pid) - files0 < connections and time.monotonic() < deadline:
                time.sleep(0.1)
            time.sleep(1.0)
            rss, files = rss_bytes(pid), open_files(pid)
            during = anyio.run(_produce_latencies, dev.addresses, "busy", PRODUCE_SAMPLES)
        finally:
            if child.stdin is not None:
                child.stdin.close()
            reap(child, 30.0)
    return {
        "connections": connections,
        "parked_s": parked_s,
        "rss_kb_per_connection": (rss - rss0) / 1024 / connections,
        "files_per_connection": (files - files0) / connections,
        "produce_p50_before_ms": pct(before, 0.5),
        "produce_p99_before_ms": pct(before, 0.99),
        "produce_p50_ms": pct(during, 0.5),
        "produce_p99_ms": pct(during, 0.99),
    }


def main() -> None:
    """Child entry point: hold N parked Fetches until stdin closes."""
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    address, n = sys.argv[1], int(sys.argv[2])
    asyncio.run(_hold(address, n, "idle"))


if __name__ == "__main__":
    main()
