"""Share groups end to end on real processes: a real `jet dev` (nats-server + jet server) and
ShareConsumer workers as separate processes (tests/sdk/share_worker.py), one of them killed
with SIGKILL while it holds messages (spec/share-groups.md §8)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections import defaultdict
from pathlib import Path

import anyio
import attrs

from jetsdk import Client, Producer
from jetsdk.codec.record import Record, iter_records
from jetsdk.consumer.share_consumer import read_share_group
from jetsdk.share.state import ShareState
from jetserver.testing import wait_until
from support.jet_dev import JetDev
from support.names import unique

WORKER = Path(__file__).with_name("share_worker.py")
DEADLINE = 6.0
"""The holder's ack deadline: longer than starting the other workers takes on a loaded
machine, so that its leases run out only after its kill. At 2 s the test failed 3 times in
8 at load 10-12, a held message reaching the others counted 3, not 2: most likely a lease
that ran out while the others started, the record acquired again (count 2) by the live
holder's prefetch and then, after the kill, by the others (count 3)."""
OTHERS_DEADLINE_S = 15.0
"""The ack deadline the workers that take over from a killed holder ask for (the group
keeps the holder's: its settings are the first member's)."""


@attrs.frozen
class Line:
    partition: int
    offset: int
    count: int
    at: float


@attrs.define
class Worker:
    proc: subprocess.Popen[bytes]
    out: Path

    def lines(self) -> list[Line]:
        if not self.out.exists():
            return []
        out = []
        for raw in self.out.read_text().splitlines():
            parts = raw.split()
            if len(parts) == 5 and parts[0] == "m":
                out.append(Line(int(parts[1]), int(parts[2]), int(parts[3]), float(parts[4])))
        return out


def start(
    started: list[Worker], dev: JetDev, stream: str, group: str, tmp: Path, stop: Path, *extra: str
) -> Worker:
    out = tmp / f"w-{uuid.uuid4().hex[:6]}.log"
    args = [sys.executable, str(WORKER), ",".join(dev.servers), stream, group, str(out), str(stop)]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    proc = subprocess.Popen([*args, *extra], env=env, stdin=subprocess.DEVNULL)
    worker = Worker(proc, out)
    started.append(worker)
    return worker


async def produce(servers: list[str], stream: str, count: int) -> None:
    async with Client(servers) as client:
        await client.create_stream(stream, stream)
        async with Producer(client, stream, linger=0.002) as producer:
            for i in range(count):
                await producer.send_soon(b"m%d" % i, key=b"k%d" % i, headers={"n": str(i)})


def share_state(servers: list[str], group: str) -> ShareState:
    async def read() -> ShareState:
        async with Client(servers) as client:
            state = await read_share_group(client, group)
            assert state is not None
            return state

    return anyio.run(read)


def finished(servers: list[str], group: str, stream: str, count: int) -> bool:
    return share_state(servers, group).partition(stream, 0).spso >= count


def read_all(servers: list[str], stream: str) -> list[Record]:
    async def read() -> list[Record]:
        async with Client(servers) as client:
            _, raw = await client.fetch(stream, 0, 0, max_bytes=1 << 22, max_wait=0.0)
            return list(iter_records(raw))

    return anyio.run(read)


def test_sigkill_holder_messages_go_to_the_others_after_the_deadline(
    jet_dev: JetDev, tmp_path: Path, workers: list[Worker]
) -> None:
    stream, group, count = unique("jobs"), unique("g"), 300
    servers = jet_dev.servers
    anyio.run(produce, servers, stream, count)
    stop = tmp_path / "stop"
    holder = start(
        workers,
        jet_dev,
        stream,
        group,
        tmp_path,
        stop,
        "--mode",
        "hold",
        "--deadline",
        str(DEADLINE),
    )
    wait_until(lambda: len(holder.lines()) >= 100, 30, "the holder to hold 100 messages")
    # The others ask for long leases, but the group keeps the holder's deadline: what is
    # asserted below allows a taker's lease running out too (a count above 2).
    deadline = ("--deadline", str(OTHERS_DEADLINE_S))
    others = [
        start(workers, jet_dev, stream, group, tmp_path, stop, "--backend", backend, *deadline)
        for backend in ("asyncio", "trio")
    ]
    wait_until(lambda: all(w.out.exists() for w in others), 30, "the other workers to start")
    held = {line.offset: line for line in holder.lines()}
    holder.proc.send_signal(signal.SIGKILL)
    killed_at = time.time()
    holder.proc.wait(timeout=10)
    held = {line.offset: line for line in holder.lines()}  # everything it handed out
    wait_until(
        lambda: finished(servers, group, stream, count),
        40,
        "every message to be acked",
        interval_s=0.1,
    )
    stop.touch()
    for w in others:
        assert w.proc.wait(timeout=30) == 0

    got: dict[int, list[Line]] = defaultdict(list)
    for w in others:
        for line in w.lines():
            got[line.offset].append(line)
    assert sorted(got) == list(range(count))  # nothing lost
    for offset, lines in got.items():
        if offset in held:
            # The holder's messages came back only after its lease ran out, counted once more
            # (or more: the group keeps the holder's deadline, so a taker's own lease on a
            # record it acquired but had not handed out yet can run out too on a loaded
            # machine, and that counts, spec §7; count 3 was seen at load 25-35). Handed out
            # once.
            assert len(lines) == 1
            assert lines[0].count >= 2
            first = min(line.at for line in lines)
            assert first >= held[offset].at + DEADLINE - 1.0
            assert first <= killed_at + DEADLINE + 10.0
        else:
            # Acked messages never came back; the holder may have acquired (not handed out)
            # some of these before it died, which counts (spec §7).
            assert len(lines) == 1
            assert lines[0].count in (1, 2)
    ps = share_state(servers, group).partition(stream, 0)
    assert ps.acked_total == count
    assert ps.dead_total == 0
    assert not ps.ranges


def test_dead_letter_after_max_deliveries_exactly_once_across_a_kill(
    jet_dev: JetDev, tmp_path: Path, workers: list[Worker]
) -> None:
    stream, group, count = unique("jobs"), unique("g"), 100
    dlq = unique("dlq")
    servers = jet_dev.servers
    anyio.run(produce, servers, stream, count)
    stop = tmp_path / "stop"
    extra = ("--mode", "poison", "--max-deliveries", "3", "--batch", "10", "--dlq", dlq)
    racing = [start(workers, jet_dev, stream, group, tmp_path, stop, *extra) for _ in range(2)]
    # The two workers race for the messages: kill whichever got 10 first.
    wait_until(lambda: any(len(w.lines()) >= 10 for w in racing), 30, "a worker to get 10 messages")
    first = next(w for w in racing if len(w.lines()) >= 10)
    second = next(w for w in racing if w is not first)
    first.proc.send_signal(signal.SIGKILL)
    first.proc.wait(timeout=10)
    third = start(workers, jet_dev, stream, group, tmp_path, stop, *extra, "--backend", "trio")
    wait_until(
        lambda: finished(servers, group, stream, count),
        40,
        "every message to finish",
        interval_s=0.1,
    )
    stop.touch()
    for w in (second, third):
        assert w.proc.wait(timeout=30) == 0

    poison = [o for o in range(count) if o % 10 == 3]
    letters = read_all(servers, dlq)
    by_offset = defaultdict(list)
    for r in letters:
        h = dict(r.headers)
        assert h["Jet-Share-Stream"] == stream.encode()
        assert h["Jet-Share-Group"] == group.encode()
        assert h["Jet-Share-Partition"] == b"0"
        assert h["Jet-Share-Reason"] == b"max_deliveries"
        assert h["Jet-Share-Delivery-Count"] == b"3"
        offset = int(h["Jet-Share-Offset"])
        assert r.value == b"m%d" % offset  # the original record
        assert r.key == b"k%d" % offset
        assert h["n"] == str(offset).encode()  # original headers kept
        by_offset[offset].append(r)
    assert sorted(by_offset) == poison
    assert all(len(v) == 1 for v in by_offset.values())  # exactly once
    counts: dict[int, int] = defaultdict(int)
    for w in (first, second, third):
        for line in w.lines():
            counts[line.offset] = max(counts[line.offset], line.count)
    assert max(counts[o] for o in poison) <= 3  # never delivered past max_deliveries
    ps = share_state(servers, group).partition(stream, 0)
    assert ps.dead_total == len(poison)
    assert ps.acked_total == count - len(poison)
