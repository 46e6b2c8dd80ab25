"""One round of ``python -m bench fanout``, in a process of its own (run by file path, with
the measured tree's ``jetsdk`` and ``jetserver`` on PYTHONPATH): a fresh one-server
``jet dev`` of that tree; keyed produce of ``n`` x 100 B (ack LEADER) to a stream of
``partitions`` partitions, then to one of 1; one JSON line of figures per message.

    python bench/fanout_round.py N PARTITIONS
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

import anyio

from jetsdk import AckPolicy, Client, Producer
from jetserver.testing.devcluster import DevCluster

_TICKS = os.sysconf("SC_CLK_TCK")
WARM_UP = 2000
"""Messages sent first, not measured (every partition's sender started)."""


def _cpu_s(stat_path: str) -> float:
    with open(stat_path, encoding="ascii") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICKS  # utime + stime


def _switches(pid: int) -> int:
    with open(f"/proc/{pid}/status", encoding="ascii") as f:
        for line in f:
            if line.startswith("voluntary_ctxt_switches"):
                return int(line.split()[1])
    return 0


async def _rate(address: list[str], stream: str, n: int, pid: int) -> dict[str, float]:
    process, loop_thread = f"/proc/{pid}/stat", f"/proc/{pid}/task/{pid}/stat"
    async with Client(address) as client, Producer(client, stream, ack=AckPolicy.LEADER) as p:
        for i in range(WARM_UP):
            await p.send_soon(b"x" * 100, key=b"w%d" % i)
        await p.flush()
        # The fan-in's counters where the tree has them (private: absent in older trees).
        fan: Any = getattr(getattr(p, "_sender", None), "fan_in", None)
        requests0, sections0 = getattr(fan, "requests", 0), getattr(fan, "sections", 0)
        server0, main0, client0 = _cpu_s(process), _cpu_s(loop_thread), time.process_time()
        switches0 = _switches(pid)
        started = time.perf_counter()
        for i in range(n):
            await p.send_soon(b"x" * 100, key=b"k%d" % i)
        await p.flush()
        elapsed = time.perf_counter() - started
        requests = getattr(fan, "requests", 0) - requests0
        sections = getattr(fan, "sections", 0) - sections0
        return {
            "rate": n / elapsed,
            "client_us": (time.process_time() - client0) * 1e6 / n,
            "server_us": (_cpu_s(process) - server0) * 1e6 / n,
            "server_loop_us": (_cpu_s(loop_thread) - main0) * 1e6 / n,
            "server_switches_per_request": (_switches(pid) - switches0) / max(requests, 1),
            "messages_per_request": n / requests if requests else float("nan"),
            "messages_per_section": n / sections if sections else float("nan"),
        }


async def _both(address: list[str], n: int, partitions: int, pid: int) -> dict[str, Any]:
    async with Client(address) as client:
        await client.create_stream("wide", "wide", partitions=partitions)
        await client.create_stream("one", "one", partitions=1)
    return {
        "wide": await _rate(address, "wide", n, pid),
        "one": await _rate(address, "one", n, pid),
    }


def main() -> None:
    n, partitions = int(sys.argv[1]), int(sys.argv[2])
    with open(os.devnull, "wb") as devnull, DevCluster(size=1, log_file=devnull) as dev:
        pid = dev.servers[0].pid
        figures = anyio.run(_both, dev.addresses, n, partitions, pid, backend="asyncio")
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
