"""One round of ``python -m bench fanout``, in a process of its own (run by file path, with
the measured tree's ``jetsdk`` and ``jetserver`` on PYTHONPATH): a fresh one-server
``jet dev`` of that tree; keyed produce of ``n`` x 100 B (ack LEADER) to a stream of
``partitions`` partitions, then to one of 1; one JSON line of figures per message.

With ``SECTION`` > 0 it then runs the fixed-batch variant too (``wide_fixed``,
``one_fixed``): the producer lingers (no batch is cut but by ``flush``) and sends bursts of
``SECTION x PARTITIONS`` messages, each burst then flushed, the same bursts to both
streams. To the wide stream a burst goes as one request of ``PARTITIONS`` sections of
``SECTION`` messages (partitions given, round-robin: every section the same size); to
the one-partition stream as one request of one section holding the whole burst. Both
sides then carry the same messages per request, whatever the server's speed (in the
closed loop above, a faster server means smaller sections), so wide minus one is the
cost of the extra sections alone, client and server each.

    python bench/fanout_round.py N PARTITIONS [SECTION]
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


class _Bursts:
    """The fixed-batch variant's sends: bursts of ``burst`` messages, round-robin over
    ``partitions``, each flushed (module docstring)."""

    def __init__(self, burst: int, partitions: int) -> None:
        self.burst, self.partitions = burst, partitions

    async def send(self, p: Producer, n: int, prefix: bytes) -> None:
        """Send ``n`` messages (whole bursts), flushing after each burst."""
        value, partitions = b"x" * 100, self.partitions
        for start in range(0, n - self.burst + 1, self.burst):
            for i in range(start, start + self.burst):
                await p.send_soon(value, key=prefix + b"%d" % i, partition=i % partitions)
            await p.flush()


def _producer(client: Client, stream: str, bursts: _Bursts | None) -> Producer:
    if bursts is None:
        return Producer(client, stream, ack=AckPolicy.LEADER)
    # Only flush cuts a batch: one batch per partition per burst, whole.
    return Producer(
        client,
        stream,
        ack=AckPolicy.LEADER,
        linger=3600.0,
        max_batch_messages=bursts.burst,
        max_batch_bytes=64 * 1024 * 1024,
    )


async def _rate(
    address: list[str], stream: str, n: int, pid: int, bursts: _Bursts | None = None
) -> dict[str, float]:
    process, loop_thread = f"/proc/{pid}/stat", f"/proc/{pid}/task/{pid}/stat"
    async with Client(address) as client, _producer(client, stream, bursts) as p:
        if bursts is None:
            for i in range(WARM_UP):
                await p.send_soon(b"x" * 100, key=b"w%d" % i)
            await p.flush()
        else:
            await bursts.send(p, max(WARM_UP, bursts.burst), b"w")
            n -= n % bursts.burst
        # The fan-in's counters where the tree has them (private: absent in older trees).
        fan: Any = getattr(getattr(p, "_sender", None), "fan_in", None)
        requests0, sections0 = getattr(fan, "requests", 0), getattr(fan, "sections", 0)
        server0, main0, client0 = _cpu_s(process), _cpu_s(loop_thread), time.process_time()
        switches0 = _switches(pid)
        started = time.perf_counter()
        if bursts is None:
            for i in range(n):
                await p.send_soon(b"x" * 100, key=b"k%d" % i)
            await p.flush()
        else:
            await bursts.send(p, n, b"k")
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


async def _both(
    address: list[str], n: int, partitions: int, section: int, pid: int
) -> dict[str, Any]:
    async with Client(address) as client:
        await client.create_stream("wide", "wide", partitions=partitions)
        await client.create_stream("one", "one", partitions=1)
    figures = {
        "wide": await _rate(address, "wide", n, pid),
        "one": await _rate(address, "one", n, pid),
    }
    if section > 0:
        burst = section * partitions
        figures["wide_fixed"] = await _rate(address, "wide", n, pid, _Bursts(burst, partitions))
        figures["one_fixed"] = await _rate(address, "one", n, pid, _Bursts(burst, 1))
    return figures


def main() -> None:
    n, partitions = int(sys.argv[1]), int(sys.argv[2])
    section = int(sys.argv[3]) if len(sys.argv) > 3 else 0
    with open(os.devnull, "wb") as devnull, DevCluster(size=1, log_file=devnull) as dev:
        pid = dev.servers[0].pid
        figures = anyio.run(_both, dev.addresses, n, partitions, section, pid, backend="asyncio")
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
