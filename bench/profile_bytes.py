"""CPU per MiB of jet's byte path, server and client in one process (issue 39).

A jet server runs in this process's event loop (:func:`jetserver.testing.running_server`)
beside the SDK, so one ``time.process_time`` and one cProfile cover the whole path: SDK
encode, socket, server parse, record framing, CRC, write; and for consume the read, the
fetch answer and the SDK decode. CPU time per MiB is steadier than a rate on a loaded
machine, which is what the before/after comparisons of copies use.

Run: ``PYTHONPATH=. python -m bench.profile_bytes [SIZE ...] [--profile] [--mib N]``
(default sizes 16384 262144 1048576, 64 MiB each).
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

from jetsdk import AckPolicy, Client, Consumer, Producer
from jetserver.testing import NatsServer
from jetserver.testing.in_process import running_server

MIB = 1024 * 1024


async def _one(address: str, size: int, mib: int, profile: cProfile.Profile | None) -> None:
    n = max(8, mib * MIB // size)
    value = os.urandom(size)
    window = max(4, min(4000, 64 * MIB // size))
    stream = f"p{size}"
    async with Client([address]) as client:
        await client.create_stream(stream, f"prof.{stream}", max_message_bytes=max(size, 1024))
        cpu, wall = time.process_time(), time.perf_counter()
        if profile is not None:
            profile.enable()
        async with Producer(
            client, stream, ack=AckPolicy.LEADER, max_pending=window, max_in_flight=4
        ) as p:
            for _ in range(n):
                await p.send_soon(value)
            await p.flush()
        if profile is not None:
            profile.disable()
        pub_cpu, pub_wall = time.process_time() - cpu, time.perf_counter() - wall
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
        await client.delete_stream(stream)
    total = n * size / MIB
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


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.profile_bytes")
    parser.add_argument("sizes", nargs="*", type=int, default=[16384, 262144, 1048576])
    parser.add_argument("--mib", type=int, default=64)
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args()
    profile = cProfile.Profile() if args.profile else None
    anyio.run(_main, args.sizes, args.mib, profile, backend="asyncio")
    if profile is not None:
        pstats.Stats(profile).sort_stats("tottime").print_stats(30)


if __name__ == "__main__":
    main()
