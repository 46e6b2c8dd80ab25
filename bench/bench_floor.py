"""The floor under a message's server CPU: a bare uvloop server making a jet message's
system calls and loop turns, with none of jet's code.

Per request (139 B in, one at a time at 500/s): ``pwrite`` of 146 B, the 32 B answer
sent back, a loop turn (the fsync runner's free-loop probe), ``fdatasync`` (with fsync),
a loop turn (the consumer's task woken by the commit), the 186 B consumer answer sent on
a second connection and a 200 B write to a third (the NATS copy; a thread of this process
reads it). These are the system calls and turns of jet's ``flushed`` message with the
fsync on the loop (``python -m bench cost`` kinds ``strace``/``turns``). The server's CPU
per message (user + system, /proc) is what the machine charges for them from Python on
uvloop: jet's own work is what its figure adds (compare ``bench light``/``bench cost``
run at the same load).

Each request's latency (its send to the consumer's answer read, by a blocking client that
does nothing else) is the floor of a Python server's publish -> consume latency on this
machine: rounds of JetStream (``sync_interval: always`` and its default, through nats-py,
as ``bench light`` measures it) alternate with the bare server's, so the two are read side
by side. Run: ``python -m bench floor [--quick]`` (quick: 2 rounds of 1,000 per case,
else 4 of 2,000).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

RATE = 500
REQUEST = b"q" * 139


def _serve(port_file: str, data_file: str, fsync: bool) -> None:
    """The bare server (run as a script: ``python bench_floor.py <port file> <data> 0|1``)."""
    import uvloop

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    Path(port_file + ".new").write_text(str(listener.getsockname()[1]))
    os.rename(port_file + ".new", port_file)  # whole when seen

    async def main() -> None:
        loop = asyncio.get_running_loop()
        fd = os.open(data_file, os.O_RDWR | os.O_CREAT, 0o600)
        producer, _ = await loop.sock_accept(listener)
        consumer, _ = await loop.sock_accept(listener)
        copies, _ = await loop.sock_accept(listener)
        for s in (producer, consumer, copies):
            s.setblocking(False)
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        position = 0
        record, answer, fetched, copy = b"r" * 146, b"a" * 32, b"f" * 186, b"c" * 200
        while await loop.sock_recv(producer, 65536):
            os.pwrite(fd, record, position)
            position += len(record)
            producer.send(answer)
            await asyncio.sleep(0)  # the free-loop probe
            if fsync:
                os.fdatasync(fd)
            await asyncio.sleep(0)  # the consumer's task, woken by the commit
            consumer.send(fetched)
            copies.send(copy)
        os.close(fd)

    uvloop.run(main())


def _cpu_s(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _drain(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        while sock.recv(65536):
            pass


def _round(fsync: bool, n: int, work: Path) -> tuple[float, list[float]]:
    """Start a bare server, send ``n`` requests one at a time; its CPU µs per request and
    each request's latency (ms: from the request's send to the consumer's copy read)."""
    port_file = work / "port"
    port_file.unlink(missing_ok=True)
    proc = subprocess.Popen(
        [sys.executable, __file__, str(port_file), str(work / "data"), "1" if fsync else "0"]
    )
    try:
        deadline = time.monotonic() + 30
        while not port_file.exists():
            if time.monotonic() > deadline or proc.poll() is not None:
                raise RuntimeError("the bare server did not start")
            time.sleep(0.01)
        port = int(port_file.read_text())
        conns = [socket.create_connection(("127.0.0.1", port), timeout=10) for _ in range(3)]
        producer, consumer, copies = conns
        reader = threading.Thread(target=_drain, args=(copies,), daemon=True)
        reader.start()
        for s in (producer, consumer):
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        cpu0 = _cpu_s(proc.pid)
        start = time.perf_counter()
        latencies: list[float] = []
        for i in range(n):
            delay = start + i / RATE - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
            sent = time.perf_counter()
            producer.sendall(REQUEST)
            consumer.recv(1000)
            latencies.append((time.perf_counter() - sent) * 1e3)
            producer.recv(100)  # sent before the consumer's copy: already here
        used = _cpu_s(proc.pid) - cpu0
        for s in conns:
            s.close()
        proc.wait(timeout=30)
        reader.join(timeout=10)
        return used / n * 1e6, latencies
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)


def _js_round(url: str, n: int, tag: str) -> tuple[float, list[float]]:
    """``n`` messages published and consumed through JetStream at ``url`` at :data:`RATE`
    with nats-py (``bench sdk``'s latency loop); nats-server's CPU µs per message and the
    latencies (ms)."""
    import anyio

    from bench.bench_sdk import JETSTREAM_PIDS, _process_cpu_s, js_latency, js_setup

    async def go() -> tuple[float, list[float]]:
        nc, js = await js_setup(url, f"FLOOR{tag}", f"floor.{tag}")
        try:
            pid = JETSTREAM_PIDS[url]
            cpu0 = _process_cpu_s(pid)
            latencies = await js_latency(js, f"floor.{tag}", RATE, n / RATE)
            return (_process_cpu_s(pid) - cpu0) / len(latencies) * 1e6, latencies
        finally:
            await nc.close()

    return anyio.run(go, backend="asyncio")


def _load() -> str:
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def run(quick: bool) -> None:
    """Alternate rounds of the bare server with and without the fsync and of JetStream
    (``sync_interval: always`` and its default) through nats-py (see the module docstring)."""
    from bench.bench_sdk import jetstream_server
    from bench.stats import pct

    rounds, n = (2, 1000) if quick else (4, 2000)
    print(
        f"a bare uvloop server making a jet message's system calls, and JetStream, {RATE}/s"
        f" (load {_load()})"
    )
    per: dict[str, list[tuple[float, float, float]]] = {}
    with contextlib.ExitStack() as stack:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="jet-floor-")))
        js_sync = stack.enter_context(jetstream_server(sync_always=True))
        js_default = stack.enter_context(jetstream_server(sync_always=False))
        cases: list[tuple[str, Callable[[int], tuple[float, list[float]]]]] = [
            ("bare fdatasync", lambda r: _round(True, n, tmp)),
            ("bare no fsync", lambda r: _round(False, n, tmp)),
            ("js sync_always", lambda r: _js_round(js_sync, n, f"s{r}")),
            ("js default", lambda r: _js_round(js_default, n, f"d{r}")),
        ]
        for r in range(rounds):
            for name, case in cases if r % 2 == 0 else cases[::-1]:
                us, latencies = case(r)
                p50, p99 = pct(latencies, 0.5), pct(latencies, 0.99)
                per.setdefault(name, []).append((us, p50, p99))
                print(
                    f"  r{r} {name:<15} server {us:5.0f} us/msg, p50 {p50:5.2f} p99 {p99:5.2f} ms"
                    f" (load {_load()})",
                    flush=True,
                )
    for name, values in per.items():
        us, p50, p99 = (statistics.median(v[i] for v in values) for i in range(3))
        print(f"  median {name:<15} server {us:5.0f} us/msg, p50 {p50:5.2f} p99 {p99:5.2f} ms")
    print(
        "  (the bare rows: a blocking client, jet's `flushed` calls and turns with the fsync on"
        " the loop, no other work; JetStream's: nats-py, publish -> ordered consumer)"
    )


if __name__ == "__main__":
    _serve(sys.argv[1], sys.argv[2], sys.argv[3] == "1")
