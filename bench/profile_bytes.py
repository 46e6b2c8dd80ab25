"""CPU per MiB of jet's byte path, server and client in one process (issue 39).

A jet server runs in this process's event loop (:func:`jetserver.testing.running_server`)
beside the SDK, so one ``time.process_time`` and one cProfile cover the whole path: SDK
encode, socket, server parse, record framing, CRC, write; and for consume the read, the
fetch answer and the SDK decode. CPU time per MiB is steadier than a rate on a loaded
machine, which is what the before/after comparisons of copies use.

``--processes RF``: the servers run as ``jet server`` processes instead (RF 1: one server;
RF 3: a cluster of three, the stream replicated, ack ALL), as in production (uvloop), and
the CPU per MiB is printed apart for the SDK (this process), each jet server (the
partition's leader named) and nats-server: user + system ms/MiB (from ``/proc/PID/stat``,
every thread), the user part, and minor page faults per MiB (a large buffer freshly
allocated for each copy costs its page faults; a reused one does not).

``--repeat N`` runs the sizes N times on the same servers: the first round also pays for
the servers' memory growing to its peak (page faults), the later ones show the steady state.

Run: ``PYTHONPATH=. python -m bench.profile_bytes [SIZE ...] [--profile] [--mib N]
[--processes RF [--repeat N]]`` (``JET_PROFILE_IN_FLIGHT``: Produce requests in flight, 4;
``JET_PROFILE_COMPRESSION``, ``JET_PROFILE_OFFLOAD``, ``JET_PROFILE_VALUES``,
``JET_PROFILE_ACK``: the producer's codec and ``compression_offload_bytes``, the values and
its ack, ``all`` or ``leader``;
peak RSS per process is printed with ``--processes``) (default sizes 16384 262144
1048576, 64 MiB each).
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import tempfile
import time
from pathlib import Path

import anyio
import orjson

from jetsdk import AckPolicy, Client, Consumer, Producer
from jetsdk.producer.compression_stage import DEFAULT_OFFLOAD_BYTES
from jetserver.testing import NatsServer
from jetserver.testing.cluster import Cluster
from jetserver.testing.in_process import running_server

MIB = 1024 * 1024
_TICK_S = 1.0 / os.sysconf("SC_CLK_TCK")
IN_FLIGHT = int(os.environ.get("JET_PROFILE_IN_FLIGHT", "4"))
"""Produce requests in flight (``JET_PROFILE_IN_FLIGHT``; bench sizes holds up to 32)."""
COMPRESSION = os.environ.get("JET_PROFILE_COMPRESSION") or None
"""The producer's compression (``JET_PROFILE_COMPRESSION``: zstd or lz4; none by default)."""
OFFLOAD = int(os.environ.get("JET_PROFILE_OFFLOAD", DEFAULT_OFFLOAD_BYTES)) or None
"""The producer's ``compression_offload_bytes`` (``JET_PROFILE_OFFLOAD``; 0: none, every
value compressed on the event loop; the producer's default if not set)."""
ACK = os.environ.get("JET_PROFILE_ACK", "")
"""``all`` or ``leader`` (``JET_PROFILE_ACK``); default: LEADER at RF 1, ALL at RF 3."""
VALUES = os.environ.get("JET_PROFILE_VALUES", "random")
"""``random`` (incompressible) or ``json`` (JSON-like lines) values (``JET_PROFILE_VALUES``)."""


def _value(size: int) -> bytes:
    if VALUES != "json":
        return os.urandom(size)
    lines = b"".join(
        b'{"id":%d,"name":"user-%d","email":"user-%d@example.com","score":%d,"tags":["a","b"]}\n'
        % (i, i, i, i * 37 % 1000)
        for i in range(size // 60 + 1)
    )
    return lines[:size]


def _peak_rss_mib(pid: int) -> float:
    """Peak resident memory of process ``pid`` so far (VmHWM), MiB."""
    with open(f"/proc/{pid}/status", "rb") as f:
        for line in f:
            if line.startswith(b"VmHWM:"):
                return int(line.split()[1]) / 1024
    return 0.0


def _process_use(pid: int) -> tuple[float, float, int]:
    """(user, system) CPU seconds and minor page faults of process ``pid`` (every thread,
    dead ones too)."""
    with open(f"/proc/{pid}/stat", "rb") as f:
        fields = f.read().rpartition(b")")[2].split()
    return int(fields[11]) * _TICK_S, int(fields[12]) * _TICK_S, int(fields[7])


class _Meter:
    """CPU seconds (user, system) and minor page faults of this process and of the given
    child processes, between marks."""

    def __init__(self, pids: dict[str, int]) -> None:
        self.pids = pids
        self._start = self._now()

    def _now(self) -> dict[str, tuple[float, float, int]]:
        now = {"sdk": _process_use(os.getpid())}
        now.update({name: _process_use(pid) for name, pid in self.pids.items()})
        return now

    def lap(self) -> dict[str, tuple[float, float, int]]:
        """Use per process since the last lap (or since created)."""
        now = self._now()
        used = {
            name: (u - self._start[name][0], s - self._start[name][1], f - self._start[name][2])
            for name, (u, s, f) in now.items()
        }
        self._start = now
        return used


def _per_mib(used: dict[str, tuple[float, float, int]], total_mib: float) -> str:
    """Per process: CPU ms/MiB (user+system) and minor faults per MiB."""
    return " ".join(
        f"{name} {(u + s) * 1000 / total_mib:5.2f} ({u * 1000 / total_mib:4.2f}u "
        f"{f / total_mib:4.0f}flt)"
        for name, (u, s, f) in used.items()
    )


async def _one(
    address: str | list[str],
    size: int,
    mib: int,
    profile: cProfile.Profile | None,
    meter: _Meter | None = None,
    rf: int = 1,
) -> None:
    n = max(8, mib * MIB // size)
    value = _value(size)
    window = max(4, min(4000, 64 * MIB // size))
    stream = f"p{size}"
    ack = AckPolicy.LEADER if rf == 1 else AckPolicy.ALL
    if ACK:
        ack = AckPolicy.ALL if ACK.lower() == "all" else AckPolicy.LEADER
    async with Client([address] if isinstance(address, str) else address) as client:
        await client.create_stream(
            stream, f"prof.{stream}", max_message_bytes=max(size, 1024), replication_factor=rf
        )
        leader = (await client.partition_info(stream, 0)).leader if rf > 1 else None
        if meter is not None:
            meter.lap()
        cpu, wall = time.process_time(), time.perf_counter()
        if profile is not None:
            profile.enable()
        async with Producer(
            client,
            stream,
            ack=ack,
            max_pending=window,
            max_in_flight=IN_FLIGHT,
            compression=COMPRESSION,
            compression_offload_bytes=OFFLOAD,
        ) as p:
            for _ in range(n):
                await p.send_soon(value)
            await p.flush()
        if profile is not None:
            profile.disable()
        pub_cpu, pub_wall = time.process_time() - cpu, time.perf_counter() - wall
        pub_used = meter.lap() if meter is not None else {}
        cpu, wall = time.process_time(), time.perf_counter()
        if profile is not None:
            profile.enable()
        async with Consumer(
            client, stream, start="earliest", max_bytes=8 * MIB, auto_commit=None
        ) as consumer:
            got = 0
            with anyio.fail_after(300):
                while got < n:
                    got += len(await consumer.fetch(max_records=10_000, timeout=10))
        if profile is not None:
            profile.disable()
        con_cpu, con_wall = time.process_time() - cpu, time.perf_counter() - wall
        con_used = meter.lap() if meter is not None else {}
        await client.delete_stream(stream)
    total = n * size / MIB
    if meter is not None:
        print(
            f"{size:>8} B x {n:>6} RF {rf}{f' (leader {leader})' if leader else ''}: publish CPU "
            f"ms/MiB {_per_mib(pub_used, total)} "
            f"({total / pub_wall:6.1f} MiB/s) | consume {_per_mib(con_used, total)} "
            f"({total / con_wall:6.1f} MiB/s) | load {os.getloadavg()[0]:.1f} | peak RSS MiB "
            + " ".join(f"{name} {_peak_rss_mib(pid):.0f}" for name, pid in meter.pids.items()),
            flush=True,
        )
        return
    print(
        f"{size:>8} B x {n:>6}: publish {pub_cpu * 1000 / total:6.2f} CPU ms/MiB "
        f"({total / pub_wall:6.1f} MiB/s)   consume {con_cpu * 1000 / total:6.2f} CPU ms/MiB "
        f"({total / con_wall:6.1f} MiB/s)   load {os.getloadavg()[0]:.1f}",
        flush=True,
    )


async def _main(sizes: list[int], mib: int, profile: cProfile.Profile | None) -> None:
    with tempfile.TemporaryDirectory(prefix="jet-prof-") as tmp, NatsServer() as nats:
        async with running_server(nats.url, Path(tmp) / "data", logging__level="WARNING") as srv:
            for size in sizes:
                await _one(srv.address, size, mib, profile)


async def _main_processes(sizes: list[int], mib: int, rf: int, repeat: int) -> None:
    settings = orjson.loads(os.environ.get("JET_PROFILE_SETTINGS", "{}"))
    with Cluster(size=rf, log_level="WARNING", settings=settings) as cluster:
        assert cluster.nats is not None
        pids = {s.server_id: s.pid for s in cluster.servers}
        pids["nats"] = cluster.nats.pid
        print("pids " + " ".join(f"{name}={pid}" for name, pid in pids.items()), flush=True)
        await anyio.sleep(float(os.environ.get("JET_PROFILE_PAUSE_S", "0")))
        meter = _Meter(pids)
        for _ in range(repeat):
            for size in sizes:
                await _one(cluster.addresses, size, mib, None, meter, rf)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.profile_bytes")
    parser.add_argument("sizes", nargs="*", type=int, default=[16384, 262144, 1048576])
    parser.add_argument("--mib", type=int, default=64)
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--processes", type=int, default=0, metavar="RF")
    parser.add_argument("--repeat", type=int, default=1, metavar="N")
    args = parser.parse_args()
    if args.processes:
        anyio.run(
            _main_processes,
            args.sizes,
            args.mib,
            args.processes,
            args.repeat,
            backend="asyncio",
        )
        return
    profile = cProfile.Profile() if args.profile else None
    anyio.run(_main, args.sizes, args.mib, profile, backend="asyncio")
    if profile is not None:
        pstats.Stats(profile).sort_stats("tottime").print_stats(30)


if __name__ == "__main__":
    main()
