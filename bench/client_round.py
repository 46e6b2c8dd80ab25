"""One client-side round of ``python -m bench client``, run as a script by that bench with
the jetsdk of the tree it measures on its PYTHONPATH (so it imports nothing of ``bench``).

    python bench/client_round.py <address> <stream> <durability> <messages> [profile]

One Producer (linger 0) and one Consumer (``start="new-only"``) in this process, one
task, one message at a time: send it, fetch until it is back, sleep 1.5 ms, next. Each
message then takes the same way through the client whatever the machine's load (paced
sends batch differently as latency varies). Prints one JSON line: the client's CPU per
message (user + system, and user alone, both threads), context switches per message,
p50/p99 in ms, and with ``profile`` the Python calls per message (cProfile).
"""

from __future__ import annotations

import contextlib
import cProfile
import pstats
import resource
import sys
import time

import anyio
import orjson

from jetsdk import Client, Consumer, Producer
from jetsdk.errors import JetError

VALUE = b"x" * 100
PAUSE_S = 0.0015
"""Between a message's arrival at the consumer and the next send."""


async def _round(
    client: Client, stream: str, total: int, profiler: cProfile.Profile | None
) -> dict[str, float]:
    latencies: list[float] = []
    async with (
        Consumer(client, stream, start="new-only", max_wait=5.0) as consumer,
        Producer(client, stream, linger=0) as producer,
    ):
        # Warm-up messages (stamped 0) until one comes back, then none left on the way.
        with anyio.fail_after(60):
            while not await consumer.fetch(max_records=1000, timeout=0.5):
                await producer.send_soon(bytes(8) + VALUE[8:])
            while await consumer.fetch(max_records=1000, timeout=0.2):
                pass
        cpu0, usage0 = time.process_time(), resource.getrusage(resource.RUSAGE_SELF)
        if profiler is not None:
            profiler.enable()
        with anyio.fail_after(total * 0.1 + 60):
            for _ in range(total):
                # One task sends and then takes the message back: nothing else runs here.
                await producer.send_soon(time.perf_counter_ns().to_bytes(8, "big") + VALUE[8:])
                got: list[float] = []
                while not got:
                    stamps = [int.from_bytes(m.value[:8], "big") for m in await consumer.fetch()]
                    got = [(time.perf_counter_ns() - t) / 1e6 for t in stamps if t]
                latencies.extend(got)
                await anyio.sleep(PAUSE_S)
        if profiler is not None:
            profiler.disable()
        cpu1, usage1 = time.process_time(), resource.getrusage(resource.RUSAGE_SELF)
    latencies.sort()
    switches = usage1.ru_nvcsw - usage0.ru_nvcsw + usage1.ru_nivcsw - usage0.ru_nivcsw
    return {
        "cpu_us": (cpu1 - cpu0) / total * 1e6,
        "user_us": (usage1.ru_utime - usage0.ru_utime) / total * 1e6,
        "switches": switches / total,
        "p50": latencies[len(latencies) // 2],
        "p99": latencies[int(len(latencies) * 0.99)],
    }


async def _main(address: str, stream: str, durability: str, total: int, profile: bool) -> None:
    async with Client([address]) as client:
        with contextlib.suppress(JetError):  # made by an earlier round
            await client.create_stream(
                stream, stream, durability="written" if durability == "written" else None
            )
        await _round(client, stream, 200, None)  # warm-up
        profiler = cProfile.Profile() if profile else None
        result = await _round(client, stream, total, profiler)
        if profiler is not None:
            result["calls"] = pstats.Stats(profiler).total_calls / total  # type: ignore[attr-defined]
    print(orjson.dumps(result).decode(), flush=True)


if __name__ == "__main__":
    args = sys.argv[1:]
    anyio.run(
        _main, args[0], args[1], args[2], int(args[3]), args[4:] == ["profile"], backend="asyncio"
    )
