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

What the rest of a jet message's CPU is made of, with the same server and client: besides
each row's user and system CPU and the voluntary context switches of all its threads per
message,

- ``bare fdatasync thread``: the fsync in a worker thread woken by a lock, its end handed
  back with ``call_soon_threadsafe`` (jet's ``flushed`` message when the fsync runner
  sends fsyncs to threads: a wake-up of the thread, the GIL taken from the loop thread
  and back, a wake-up of the loop through its self-pipe);
- ``JET_FLOOR_CALLS=<n>`` adds rows with ``n`` distinct small Python functions called per
  request (each once: a message's path runs code it has not run for 2 ms, as jet's ~450
  calls per message do, ``python -m bench cost`` kind ``calls``), with and without the
  fsync; ``JET_FLOOR_TURNS=<k>`` a row with ``k`` more loop turns per request;
- ``JET_FLOOR_JETSTREAM=0`` leaves the JetStream rows out.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
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
from typing import Any

RATE = 500
REQUEST = b"q" * 139


def _distinct_functions(n: int) -> list[Callable[[Any, dict[str, Any]], object]]:
    """``n`` small Python functions, each with code of its own (a dict store, a tuple, an
    attribute read, a branch)."""
    source = "".join(
        f"def g{k}(o, d):\n"
        f"    x = o.a + {k}\n"
        f"    d['k{k}'] = (x, o.b * {k % 7})\n"
        f"    if x > {k + 3}:\n"
        f"        return [x, d.get('k{k}')]\n"
        f"    return len(d)\n"
        for k in range(n)
    )
    names: dict[str, Any] = {}
    exec(source, names)  # generated above from no input
    return [names[f"g{k}"] for k in range(n)]


class _Obj:
    __slots__ = ("a", "b")

    def __init__(self, a: int, b: int) -> None:
        self.a = a
        self.b = b


def _fsync_worker(jobs: list[tuple[asyncio.AbstractEventLoop, int, Any]], wake: Any) -> None:
    """The worker thread of ``bare fdatasync thread``: one job per release of ``wake``."""
    while True:
        wake.acquire()
        loop, fd, done = jobs.pop()
        os.fdatasync(fd)
        loop.call_soon_threadsafe(done.set_result, None)


def _serve(
    port_file: str, data_file: str, fsync: bool, thread: bool, calls: int, turns: int
) -> None:
    """The bare server (run as a script: ``python bench_floor.py <port file> <data> 0|1
    <loop|thread> <calls> <turns>``)."""
    import uvloop

    functions = _distinct_functions(calls)
    jobs: list[tuple[asyncio.AbstractEventLoop, int, Any]] = []
    wake = threading.Lock()
    wake.acquire()
    if thread:
        threading.Thread(target=_fsync_worker, args=(jobs, wake), daemon=True).start()

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
            obj = _Obj(1, 2)
            values: dict[str, Any] = {}
            for function in functions:
                function(obj, values)
            os.pwrite(fd, record, position)
            position += len(record)
            producer.send(answer)
            await asyncio.sleep(0)  # the free-loop probe
            if fsync and thread:
                done = loop.create_future()
                jobs.append((loop, fd, done))
                wake.release()
                await done
            elif fsync:
                os.fdatasync(fd)
            await asyncio.sleep(0)  # the consumer's task, woken by the commit
            for _ in range(turns):
                await asyncio.sleep(0)
            consumer.send(fetched)
            copies.send(copy)
        os.close(fd)

    uvloop.run(main())


def _cpu_s(pid: int) -> float:
    return sum(_user_system_s(pid))


def _user_system_s(pid: int) -> tuple[float, float]:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / tick, int(fields[12]) / tick


def _voluntary_switches(pid: int) -> int:
    """Voluntary context switches of all of process ``pid``'s threads so far."""
    total = 0
    for task in os.listdir(f"/proc/{pid}/task"):
        with contextlib.suppress(OSError), open(f"/proc/{pid}/task/{task}/status") as f:
            for line in f:
                if line.startswith("voluntary_ctxt_switches"):
                    total += int(line.split()[1])
    return total


@dataclasses.dataclass(frozen=True)
class _Bare:
    """A bare server's shape: fsync or not, in a worker thread or on the loop, distinct
    Python functions called and extra loop turns per request."""

    fsync: bool
    thread: bool = False
    calls: int = 0
    turns: int = 0


def _drain(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        while sock.recv(65536):
            pass


def _round(bare: _Bare, n: int, work: Path) -> tuple[float, list[float], str]:
    """Start a bare server, send ``n`` requests one at a time; its CPU µs per request,
    each request's latency (ms: from the request's send to the consumer's copy read) and
    a detail (user and system CPU, voluntary context switches per request)."""
    port_file = work / "port"
    port_file.unlink(missing_ok=True)
    proc = subprocess.Popen(
        [
            sys.executable,
            __file__,
            str(port_file),
            str(work / "data"),
            "1" if bare.fsync else "0",
            "thread" if bare.thread else "loop",
            str(bare.calls),
            str(bare.turns),
        ]
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
        cpu0, switches0 = _user_system_s(proc.pid), _voluntary_switches(proc.pid)
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
        cpu1, switches1 = _user_system_s(proc.pid), _voluntary_switches(proc.pid)
        user, system = ((b - a) / n * 1e6 for a, b in zip(cpu0, cpu1, strict=True))
        switches = (switches1 - switches0) / n
        for s in conns:
            s.close()
        proc.wait(timeout=30)
        reader.join(timeout=10)
        return (
            user + system,
            latencies,
            f"user {user:.0f} + sys {system:.0f}, {switches:.2f} vol sw",
        )
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)


def _js_round(url: str, n: int, tag: str) -> tuple[float, list[float], str]:
    """``n`` messages published and consumed through JetStream at ``url`` at :data:`RATE`
    with nats-py (``bench sdk``'s latency loop); nats-server's CPU µs per message and the
    latencies (ms)."""
    import anyio

    from bench.bench_sdk import JETSTREAM_PIDS, _process_cpu_s, js_latency, js_setup

    async def go() -> tuple[float, list[float], str]:
        nc, js = await js_setup(url, f"FLOOR{tag}", f"floor.{tag}")
        try:
            pid = JETSTREAM_PIDS[url]
            cpu0 = _process_cpu_s(pid)
            latencies = await js_latency(js, f"floor.{tag}", RATE, n / RATE)
            return (_process_cpu_s(pid) - cpu0) / len(latencies) * 1e6, latencies, ""
        finally:
            await nc.close()

    return anyio.run(go, backend="asyncio")


def _load() -> str:
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def _bare_round(bare: _Bare, n: int, work: Path, _r: int) -> tuple[float, list[float], str]:
    return _round(bare, n, work)


def _cases(
    n: int, tmp: Path, stack: contextlib.ExitStack
) -> list[tuple[str, Callable[[int], tuple[float, list[float], str]]]]:
    """The rows (see the module docstring), each a name and a round's function."""
    from bench.bench_sdk import jetstream_server

    bares = {
        "bare fdatasync": _Bare(fsync=True),
        "bare no fsync": _Bare(fsync=False),
        "bare fdatasync thread": _Bare(fsync=True, thread=True),
    }
    calls = int(os.environ.get("JET_FLOOR_CALLS", "0"))
    if calls:
        bares[f"bare fdatasync +{calls} calls"] = _Bare(fsync=True, calls=calls)
        bares[f"bare no fsync +{calls} calls"] = _Bare(fsync=False, calls=calls)
    turns = int(os.environ.get("JET_FLOOR_TURNS", "0"))
    if turns:
        bares[f"bare fdatasync +{turns} turns"] = _Bare(fsync=True, turns=turns)
    cases: list[tuple[str, Callable[[int], tuple[float, list[float], str]]]] = [
        (name, functools.partial(_bare_round, bare, n, tmp)) for name, bare in bares.items()
    ]
    if os.environ.get("JET_FLOOR_JETSTREAM", "1") != "0":
        js_sync = stack.enter_context(jetstream_server(sync_always=True))
        js_default = stack.enter_context(jetstream_server(sync_always=False))
        cases += [
            ("js sync_always", lambda r: _js_round(js_sync, n, f"s{r}")),
            ("js default", lambda r: _js_round(js_default, n, f"d{r}")),
        ]
    return cases


def run(quick: bool) -> None:
    """Alternate rounds of the bare server's shapes and of JetStream
    (``sync_interval: always`` and its default) through nats-py (see the module docstring)."""
    from bench.stats import pct

    rounds, n = (2, 1000) if quick else (4, 2000)
    print(
        f"a bare uvloop server making a jet message's system calls, and JetStream, {RATE}/s"
        f" (load {_load()})"
    )
    per: dict[str, list[tuple[float, float, float]]] = {}
    with contextlib.ExitStack() as stack:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="jet-floor-")))
        cases = _cases(n, tmp, stack)
        width = max(len(name) for name, _ in cases)
        for r in range(rounds):
            for name, case in cases if r % 2 == 0 else cases[::-1]:
                us, latencies, detail = case(r)
                p50, p99 = pct(latencies, 0.5), pct(latencies, 0.99)
                per.setdefault(name, []).append((us, p50, p99))
                print(
                    f"  r{r} {name:<{width}} server {us:5.0f} us/msg"
                    + (f" ({detail})" if detail else "")
                    + f", p50 {p50:5.2f} p99 {p99:5.2f} ms (load {_load()})",
                    flush=True,
                )
    for name, values in per.items():
        us, p50, p99 = (statistics.median(v[i] for v in values) for i in range(3))
        print(f"  median {name:<{width}} server {us:5.0f} us/msg, p50 {p50:5.2f} p99 {p99:5.2f} ms")
    print(
        "  (the bare rows: a blocking client, jet's `flushed` calls and turns with the fsync on"
        " the loop unless `thread`, no other work; JetStream's: nats-py, publish -> ordered"
        " consumer)"
    )


if __name__ == "__main__":
    _serve(
        sys.argv[1],
        sys.argv[2],
        sys.argv[3] == "1",
        sys.argv[4] == "thread",
        int(sys.argv[5]),
        int(sys.argv[6]),
    )
