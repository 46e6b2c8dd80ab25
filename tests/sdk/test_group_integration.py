"""Consumer groups end to end against a real `jet dev` (nats-server + one jet server).

The multi-process test runs three group members as separate processes (one on asyncio, one on
trio, one through the sync API) and kills one with SIGKILL mid-run. Timings are short
(session timeout 2 s) so the module stays well under two minutes.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter, defaultdict
from pathlib import Path

import anyio
import attrs
import pytest

from jetsdk import Client, Producer, sync
from jetsdk.consumer import Consumer, OffsetAndMetadata
from jetsdk.group.member import MemberConfig
from jetserver.testing import wait_until
from support.jet_dev import JetDev
from support.names import unique

WORKER = Path(__file__).with_name("group_worker.py")
SESSION = 2.5
HEARTBEAT = 0.25
AUTO_COMMIT = 0.5
CFG = MemberConfig(session_timeout=SESSION, heartbeat_interval=HEARTBEAT, release_timeout=4.0)


@attrs.define
class Line:
    kind: str
    partition: int
    offset: int
    count: int
    at: float


def read_lines(path: Path) -> list[Line]:
    out: list[Line] = []
    if not path.exists():
        return out
    for raw in path.read_text().splitlines():
        parts = raw.split()
        if parts and parts[0] == "m" and len(parts) == 5:
            out.append(Line("m", int(parts[1]), int(parts[2]), int(parts[3]), float(parts[4])))
        elif parts and parts[0] in ("a", "r", "l") and len(parts) == 3:
            for p in (int(x) for x in parts[1].split(",") if x):
                out.append(Line(parts[0], p, -1, 0, float(parts[2])))
    return out


@attrs.define
class Worker:
    proc: subprocess.Popen[bytes]
    out: Path
    backend: str


def start_worker(
    servers: list[str], stream: str, group: str, tmp: Path, backend: str, stop: Path
) -> Worker:
    out = tmp / f"{backend}-{uuid.uuid4().hex[:6]}.log"
    args = [
        sys.executable,
        str(WORKER),
        ",".join(servers),
        stream,
        group,
        str(out),
        str(stop),
        "--backend",
        backend,
        "--session",
        str(SESSION),
        "--heartbeat",
        str(HEARTBEAT),
        "--auto-commit",
        str(AUTO_COMMIT),
        "--delay",
        "0.002",
    ]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    proc = subprocess.Popen(args, env=env, stdin=subprocess.DEVNULL)
    return Worker(proc, out, backend)


async def produce(servers: list[str], stream: str, count: int, start: int = 0) -> None:
    async with Client(servers) as client, Producer(client, stream, linger=0.002) as producer:
        for i in range(start, start + count):
            await producer.send_soon(b"m%d" % i, key=b"k%d" % i)


async def filled_stream(
    client: Client, servers: list[str], stream: str, partitions: int, count: int
) -> None:
    """Create ``stream`` (its subject its name) and produce ``count`` keyed messages to it."""
    await client.create_stream(stream, stream, partitions=partitions)
    await produce(servers, stream, count)


async def high_watermarks(servers: list[str], stream: str, partitions: int) -> dict[int, int]:
    async with Client(servers) as client:
        return {p: (await client.list_offsets(stream, p, "latest")).hw for p in range(partitions)}


def test_three_processes_one_killed(jet_dev: JetDev, tmp_path: Path, workers: list[Worker]) -> None:
    stream, group, partitions = unique("grp"), unique("g"), 6
    servers = jet_dev.servers

    async def setup() -> None:
        async with Client(servers) as client:
            await client.create_stream(stream, stream, partitions=partitions)

    anyio.run(setup)
    anyio.run(produce, servers, stream, 600)
    stop = tmp_path / "stop"
    for backend in ("asyncio", "trio", "sync"):
        workers.append(start_worker(servers, stream, group, tmp_path, backend, stop))

    def owners() -> dict[int, Worker]:
        """Who owns each partition now, from the callback lines."""
        events = []
        for w in workers:
            events += [(line.at, line.kind, line.partition, w) for line in read_lines(w.out)]
        state: dict[int, Worker] = {}
        for _, kind, p, w in sorted(events, key=lambda e: e[0]):
            if kind == "a":
                state[p] = w
            elif kind in ("r", "l") and state.get(p) is w:
                del state[p]
        return state

    wait_until(
        lambda: len(owners()) == partitions and len(set(map(id, owners().values()))) == 3,
        60,
        "three members sharing the six partitions",
        interval_s=0.1,
    )
    # Kill while messages flow: production goes on in a thread, the victim dies mid-batch.
    producing = threading.Thread(target=anyio.run, args=(produce, servers, stream, 1200, 600))
    producing.start()
    victim = workers[1]
    wait_until(lambda: len(read_lines(victim.out)) > 250, 30, "the victim at work")
    victim.proc.send_signal(signal.SIGKILL)
    victim.proc.wait(timeout=10)
    killed_at = time.time()
    owned: set[int] = set()  # what the victim held when it died, from its own log
    for line in read_lines(victim.out):
        if line.kind == "a":
            owned.add(line.partition)
        elif line.kind in ("r", "l"):
            owned.discard(line.partition)
    victim_parts = sorted(owned)
    assert victim_parts
    producing.join(timeout=60)
    anyio.run(produce, servers, stream, 1200, 1800)
    # Acked with LEADER (at append); committed (the HW) one fsync later.
    wait_until(
        lambda: sum(anyio.run(high_watermarks, servers, stream, partitions).values()) == 3000,
        30,
        "all 3000 messages committed",
        interval_s=0.1,
    )
    hw = anyio.run(high_watermarks, servers, stream, partitions)

    def processed() -> dict[tuple[int, int], list[tuple[Worker, Line]]]:
        seen: dict[tuple[int, int], list[tuple[Worker, Line]]] = defaultdict(list)
        for w in workers:
            for line in read_lines(w.out):
                if line.kind == "m":
                    seen[(line.partition, line.offset)].append((w, line))
        return seen

    wait_until(lambda: len(processed()) == 3000, 60, "every message processed")
    stop.touch()
    for w in workers[::2]:
        assert w.proc.wait(timeout=30) == 0
    seen = processed()
    # 1. at least once
    assert set(seen) == {(p, o) for p in range(partitions) for o in range(hw[p])}
    # 2. duplicates only where a member stopped without handing over (the killed one, or
    #    one whose lease ran out on an overloaded box), within its uncommitted window
    dups = {k: v for k, v in seen.items() if len(v) > 1}
    window = AUTO_COMMIT + 1.5  # commit interval + a batch in flight + slack on a busy box
    stops: dict[int, list[tuple[Worker, float]]] = defaultdict(list)
    for p in victim_parts:
        stops[p].append((victim, killed_at))
    for w in workers:
        for line in read_lines(w.out):
            if line.kind == "l":
                stops[line.partition].append((w, line.at))

    def timeline(p: int, o: int) -> list[str]:
        """Every worker's ownership events on ``p`` and its copies of offset ``o``, in order."""
        events = []
        for w in workers:
            own = [x for x in read_lines(w.out) if x.partition == p]
            events += [(x.at, f"{w.backend} {x.kind}") for x in own if x.kind != "m"]
            copies = [x for x in own if x.kind == "m" and x.offset == o]
            events += [(x.at, f"{w.backend} m{x.offset}#{x.count}") for x in copies]
        return [f"{at:.3f} {what}" for at, what in sorted(events)]

    for (p, o), copies in dups.items():
        first_worker, first = min(copies, key=lambda c: c[1].at)
        assert any(w is first_worker and at - window <= first.at <= at for w, at in stops[p]), (
            p,
            copies,
            stops[p],
            timeline(p, o),
        )
    # 3. the victim's partitions were taken over within the session timeout (+ slack)
    takeovers = []
    for p in victim_parts:
        resumed = [
            line.at
            for w in workers
            if w is not victim
            for line in read_lines(w.out)
            if line.kind == "a" and line.partition == p and line.at >= killed_at - 0.1
        ]
        assert resumed, p
        takeovers.append(min(resumed) - killed_at)
    assert max(takeovers) < SESSION + HEARTBEAT + 5.0
    counts = Counter(line.count for copies in seen.values() for _, line in copies)
    print(
        f"\nkill test: {len(dups)} duplicates, victim's partitions {victim_parts} taken over "
        f"{max(takeovers):.2f} s after SIGKILL (session {SESSION} s), delivery counts {counts}"
    )


@pytest.mark.anyio
async def test_restart_resumes_from_committed_offsets(jet_dev: JetDev) -> None:
    stream, group = unique("resume"), unique("g")
    async with Client(jet_dev.servers) as client:
        await filled_stream(client, jet_dev.servers, stream, 3, 90)
        async with Consumer(client, group=group, streams=[stream], group_config=CFG) as c:
            got = 0
            with anyio.fail_after(20):
                while got < 45:
                    got += len(await c.fetch(max_records=45 - got, timeout=5))
            positions = {p: c.position(p) for p in range(3)}
        async with Consumer(client, group=group, streams=[stream], group_config=CFG) as c:
            assert {p: c.committed(p) for p in range(3)} == {
                p: OffsetAndMetadata(o) for p, o in positions.items()
            }
            rest: list[tuple[int, int]] = []
            with anyio.fail_after(20):
                while len(rest) < 45:
                    rest += [(m.partition, m.offset) for m in await c.fetch(timeout=5)]
            firsts = {p: min(o for q, o in rest if q == p) for p in {q for q, _ in rest}}
            assert all(firsts[p] == positions[p] for p in firsts)
            assert len(rest) == len(set(rest)) == 45
            assert await c.fetch(timeout=1.0) == []  # every long poll has answered once
            assert c.lag() == 0


@pytest.mark.anyio
async def test_two_groups_each_see_everything(jet_dev: JetDev) -> None:
    stream = unique("two")
    async with Client(jet_dev.servers) as client:
        await filled_stream(client, jet_dev.servers, stream, 2, 40)
        for group in (unique("ga"), unique("gb")):
            async with Consumer(client, group=group, streams=[stream], group_config=CFG) as c:
                seen: set[tuple[int, int]] = set()
                with anyio.fail_after(20):
                    while len(seen) < 40:
                        seen |= {(m.partition, m.offset) for m in await c.fetch(timeout=5)}
            assert len(seen) == 40


@pytest.mark.anyio
async def test_manual_acks_redelivered_after_restart(jet_dev: JetDev) -> None:
    stream, group = unique("acks"), unique("g")
    async with Client(jet_dev.servers) as client:
        await filled_stream(client, jet_dev.servers, stream, 1, 10)
        async with Consumer(
            client, group=group, streams=[stream], group_config=CFG, manual_ack=True
        ) as c:
            msgs: list[object] = []
            with anyio.fail_after(20):
                while len(msgs) < 10:
                    msgs += await c.fetch(timeout=5)
            for m in msgs:
                if m.offset % 3:  # type: ignore[attr-defined]
                    m.ack()  # type: ignore[attr-defined]
        async with Consumer(
            client, group=group, streams=[stream], group_config=CFG, manual_ack=True
        ) as c:
            assert c.committed(0) == OffsetAndMetadata(0)
            again = await c.fetch(timeout=5)
            assert [(m.offset, m.delivery_count) for m in again] == [(0, 2), (3, 2), (6, 2), (9, 2)]


def test_sync_api_group_consumer(jet_dev: JetDev) -> None:
    stream, group = unique("sync"), unique("g")
    with sync.Client(jet_dev.servers) as client:
        client.create_stream(stream, stream, partitions=2)
        with sync.Producer(client, stream, linger=0.001) as producer:
            for i in range(20):
                producer.send_soon(b"%d" % i, key=b"%d" % i)
        revoked: list[object] = []

        def on_revoked(parts: list[object]) -> None:
            consumer.commit()  # the blocking API works inside a callback
            revoked.append(parts)

        with sync.Consumer(
            client,
            group=group,
            streams=[stream],
            group_config=CFG,
            manual_ack=True,
            on_revoked=on_revoked,  # type: ignore[arg-type]
        ) as consumer:
            got: list[object] = []
            deadline = time.monotonic() + 20
            while len(got) < 20 and time.monotonic() < deadline:
                for msg in consumer.fetch(timeout=1):
                    msg.ack()  # from this thread, not the loop's
                    got.append(msg)
            assert len(got) == 20
            consumer.commit()
            committed = [consumer.committed(p) for p in range(2)]
            assert sum(c.offset for c in committed if c is not None) == 20
            with sync.Consumer(client, group=group, streams=[stream], group_config=CFG) as other:
                deadline = time.monotonic() + 20
                while not other.assignment() and time.monotonic() < deadline:
                    consumer.fetch(timeout=0.1)
                    other.fetch(timeout=0.1)
                assert other.assignment()
        assert revoked
