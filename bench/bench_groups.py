"""Consumer groups: jet group members vs a JetStream durable pull consumer with workers.

Every member/worker is its own process (``python -m bench.bench_groups worker SPEC``), like a
real deployment; the coordinator (this module's ``run``) starts them, says go, and reads what
they report in their output files.

(a) group consume throughput over 8 partitions (jet) / one stream (JetStream), N stored
    100-byte messages, 1, 2 and 4 member processes, batches of up to 1000 (jet ``fetch``,
    JetStream pull ``fetch``); jet members use the default timing (session 10 s, heartbeat
    3 s) and auto-commit every 1 s; JetStream
    workers ack every message (explicit acks: what a durable work queue needs; shown also
    with ``ack_policy: none``, which never redelivers, as an upper bound). Rate = N / (time
    every message had been consumed once - first message consumed): duplicates (after a
    lost lease under load) do not count; their number and the time from "go" to the first
    message (jet: join) are printed beside it.
(b) commit overhead: 2 jet members with auto-commit every 1 s vs no commits at all.
(c) rebalance: 3 members/workers, a producer at a fixed rate, each message takes 1 ms to
    process; one member is killed with SIGKILL. jet: time until every partition the victim
    owned is consumed again by a survivor (session timeout 2 s, heartbeat 0.2 s). JetStream:
    time until every message the victim had received but not acked is processed by a survivor
    (ack_wait 2 s). Both measure how long the dead process's work stays stuck.

Ratios: jet / JetStream for throughput (above 1 = jet faster), JetStream / jet for the
rebalance time (above 1 = jet faster). Run: ``python -m bench groups [--quick]``.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import anyio
import orjson

from bench.bench_sdk import Results, jet_fill, jetstream_server, js_fill, js_setup
from bench.worker_io import Tally, js_fetch, js_pull, ready, send_paced
from jetsdk import Client, Consumer, MemberConfig, Producer, StreamPartition
from jetserver.testing import reap
from jetserver.testing.devcluster import DevCluster

PARTITIONS = 8
SESSION = 2.0
HEARTBEAT = 0.2
ACK_WAIT = 2.0
ROOT = Path(__file__).resolve().parents[1]
WAIT_S = 300.0


# -- workers (child processes) -------------------------------------------------------------


def _stopped(stop: Path) -> bool:
    return stop.exists()


async def _jet_worker(spec: dict[str, Any], out: Any) -> None:
    stop, go = Path(spec["stop"]), Path(spec["go"])
    delay = spec.get("delay", 0.0)
    if spec.get("short_session"):
        cfg = MemberConfig(
            session_timeout=SESSION, heartbeat_interval=HEARTBEAT, release_timeout=4.0
        )
    else:
        cfg = MemberConfig()  # the defaults: session 10 s, heartbeat 3 s

    def note(tag: str) -> Any:
        def callback(parts: list[StreamPartition]) -> None:
            listed = ",".join(str(p.partition) for p in parts)
            out.write(f"{tag} {listed} {time.time():.4f}\n")
            out.flush()

        return callback

    ends: dict[str, int] = spec.get("ends", {})
    async with Client(spec["servers"]) as client:
        ready(out, go)
        tally = Tally(out)
        async with Consumer(
            client,
            group=spec["group"],
            streams=[spec["stream"]],
            group_config=cfg,
            auto_commit=spec["auto_commit"],
            on_assigned=note("a"),
            on_revoked=note("r"),
            on_lost=note("l"),
        ) as consumer:
            while not _stopped(stop):
                batch = await consumer.fetch(max_records=1000, timeout=0.2)
                now = time.time()
                tally.got(len(batch), now, now)
                if batch:
                    for m in batch:
                        if ends.get(str(m.partition)) == m.offset + 1:
                            out.write(f"end {m.partition} {now:.4f}\n")
                    if spec.get("track"):
                        seen = sorted({m.partition for m in batch})
                        out.write(f"seen {','.join(map(str, seen))} {now:.4f}\n")
                        out.flush()
                    if delay:
                        await anyio.sleep(delay * len(batch))
                tally.progress(now)
        tally.result()


async def _js_worker(spec: dict[str, Any], out: Any) -> None:
    stop = Path(spec["stop"])
    delay = spec.get("delay", 0.0)
    async with js_pull(spec, out) as (sub, tally):
        while not _stopped(stop):
            msgs = await js_fetch(sub, 1000)
            now = time.time()
            if msgs:
                track = spec.get("track")
                seqs = [m.metadata.sequence.stream for m in msgs] if track else []
                if track:
                    out.write(f"got {','.join(map(str, seqs))} {now:.4f}\n")
                    out.flush()
                if delay:
                    await anyio.sleep(delay * len(msgs))
                last = time.time()
                if track:
                    # Written (and flushed) before the acks: a message whose "done" line a
                    # killed worker did not write is surely redelivered.
                    out.write(f"done {','.join(map(str, seqs))} {last:.4f}\n")
                    out.flush()
                if spec.get("ack", True):
                    for m in msgs:
                        await m.ack()
                tally.got(len(msgs), now, last)
            tally.progress(now)


async def _producer(spec: dict[str, Any], out: Any) -> None:
    stop, go = Path(spec["stop"]), Path(spec["go"])
    rate = spec["rate"]
    if spec["kind"] == "jet-produce":
        async with Client(spec["servers"]) as client, Producer(client, spec["stream"]) as p:
            ready(out, go)
            await send_paced(partial(p.send_soon, b"x" * 100), rate, stop)
        return
    import nats

    nc = await nats.connect(spec["url"])
    js = nc.jetstream()
    ready(out, go)
    await send_paced(partial(js.publish_async, spec["subject"], b"x" * 100), rate, stop)
    await js.publish_async_completed()
    await nc.close()


def worker_main(raw: str) -> None:
    """Entry point of a worker process."""
    spec = orjson.loads(raw)
    kinds = {
        "jet": _jet_worker,
        "js": _js_worker,
        "jet-produce": _producer,
        "js-produce": _producer,
    }
    with open(spec["out"], "a") as out:
        anyio.run(kinds[spec["kind"]], spec, out, backend="asyncio")


# -- coordinator ------------------------------------------------------------------------


class Round:
    """A set of worker processes sharing a go and a stop file."""

    def __init__(self, work: Path) -> None:
        self.dir = Path(tempfile.mkdtemp(dir=work))
        self.go, self.stop = self.dir / "go", self.dir / "stop"
        self.procs: list[tuple[subprocess.Popen[bytes], Path]] = []

    def spawn(self, spec: dict[str, Any]) -> int:
        out = self.dir / f"w{len(self.procs)}.log"
        spec = {**spec, "go": str(self.go), "stop": str(self.stop), "out": str(out)}
        args = [
            sys.executable,
            "-m",
            self.worker_module(spec),
            "worker",
            orjson.dumps(spec).decode(),
        ]
        proc = subprocess.Popen(args, cwd=ROOT, stdin=subprocess.DEVNULL)
        self.procs.append((proc, out))
        return len(self.procs) - 1

    def worker_module(self, spec: dict[str, Any]) -> str:
        """The module whose ``worker`` runs ``spec``."""
        return "bench.bench_groups"

    def lines(self, i: int) -> list[str]:
        out = self.procs[i][1]
        return out.read_text().splitlines() if out.exists() else []

    def wait_ready(self) -> None:
        deadline = time.monotonic() + 60
        while not all("ready" in self.lines(i) for i in range(len(self.procs))):
            if time.monotonic() > deadline:
                raise RuntimeError("workers did not get ready")
            time.sleep(0.05)

    def progress(self, i: int) -> int:
        counts = [int(x.split()[1]) for x in self.lines(i) if x.startswith("progress ")]
        return counts[-1] if counts else 0

    def failed(self) -> bool:
        """True if a worker exited with an error."""
        return any(proc.poll() not in (None, 0) for proc, _ in self.procs)

    def kill_mid_batch(self, i: int, marker: str) -> None:
        """SIGKILL worker ``i`` while it processes a batch (its last line starts with
        ``marker``), so it dies with work in flight; bounded wait, then kill anyway."""
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            lines = self.lines(i)
            if lines and lines[-1].startswith(marker):
                break
            time.sleep(0.005)
        self.procs[i][0].send_signal(signal.SIGKILL)
        self.procs[i][0].wait(30)

    def kill_one_mid_batch(self, ids: list[int], marker: str) -> tuple[int, float]:
        """Start the ready workers, let them run 4 s, then SIGKILL worker ``ids[1]`` mid-batch
        (:meth:`kill_mid_batch`); the victim and the time of the kill."""
        self.wait_ready()
        self.go.touch()
        time.sleep(4.0)
        victim = ids[1]
        self.kill_mid_batch(victim, marker)
        return victim, time.time()

    def taken_over(
        self, ids: list[int], victim: int, killed: float, held: set[str], tag: str
    ) -> float:
        """Seconds from ``killed`` until each name in ``held`` is in a line ``TAG NAMES AT``
        (NAMES comma-separated) of a worker other than ``victim``, stamped after it (nan if
        none was held, or not all within 60 s). Ends the round."""
        first: dict[str, float] = {}
        deadline = time.monotonic() + 60
        while len(first) < len(held) and time.monotonic() < deadline:
            time.sleep(0.1)
            for i in ids:
                if i == victim:
                    continue
                for line in self.lines(i):
                    if line.startswith(tag):
                        _, names, at = line.split()
                        for name in names.split(","):
                            if name in held and float(at) > killed:
                                first[name] = min(first.get(name, float(at)), float(at))
        self.finish()
        if not held or len(first) < len(held):
            return float("nan")
        return max(first.values()) - killed

    def finish(self) -> list[dict[str, Any]]:
        self.stop.touch()
        results = []
        for i, (proc, _out) in enumerate(self.procs):
            reap(proc, 60.0)
            for line in self.lines(i):
                if line.startswith("result "):
                    results.append(orjson.loads(line[len("result ") :]))
        return results


def _ends(rnd: Round, count: int) -> dict[int, float]:
    """Per partition, when its last message was first consumed (jet workers' ``end`` lines)."""
    ends: dict[int, float] = {}
    for i in range(count):
        for line in rnd.lines(i):
            if line.startswith("end "):
                _, p, at = line.split()
                ends[int(p)] = min(ends.get(int(p), float(at)), float(at))
    return ends


def _throughput(work: Path, specs: list[dict[str, Any]], n: int) -> tuple[float, float, int]:
    """(unique messages/s from the first message consumed until every message was consumed
    once, seconds from go until the first message, messages consumed more than once)."""
    rnd = Round(work)
    for spec in specs:
        rnd.spawn(spec)
    rnd.wait_ready()
    go_at = time.time()
    rnd.go.touch()
    deadline = time.monotonic() + WAIT_S
    partitioned = "ends" in specs[0]

    def done() -> bool:
        if partitioned:  # every partition's last message consumed by someone
            return len(_ends(rnd, len(specs))) == len(specs[0]["ends"])
        return sum(rnd.progress(i) for i in range(len(specs))) >= n

    while not done():
        if time.monotonic() > deadline or rnd.failed():
            rnd.finish()
            raise RuntimeError("consumption did not finish (a worker failed, or timed out)")
        time.sleep(0.05)
    ends = _ends(rnd, len(specs))
    results = rnd.finish()
    lost = sum(1 for i in range(len(specs)) for x in rnd.lines(i) if x.startswith("l "))
    if lost:
        print(f"  (a member lost its lease {lost} time(s): an overloaded box)")
    first = min(r["first"] for r in results if r["count"])
    last = max(ends.values()) if partitioned else max(r["last"] for r in results if r["count"])
    total = sum(r["count"] for r in results)
    return n / (last - first), first - go_at, max(0, total - n)


def _jet_takeover(work: Path, base: dict[str, Any], rate: int) -> float:
    rnd = Round(work)
    rnd.spawn({**base, "kind": "jet-produce", "rate": rate})
    member = {**base, "kind": "jet", "track": True, "delay": 0.001, "short_session": True}
    members = [rnd.spawn(member) for _ in range(3)]
    victim, killed = rnd.kill_one_mid_batch(members, "seen ")
    owned: set[str] = set()  # partition numbers, as the lines write them
    for line in rnd.lines(victim):
        tag, *rest = line.split()
        if tag in ("a", "r", "l"):
            parts = {p for p in rest[0].split(",") if p}
            owned = owned | parts if tag == "a" else owned - parts
    return rnd.taken_over(members, victim, killed, owned, "seen ")


def redelivery_after_kill(
    rnd: Round, worker: dict[str, Any], producer: dict[str, Any], workers: int
) -> float:
    """Seconds from a worker's SIGKILL (mid-batch) until every message it had got and not
    done is done by another worker (nan if that takes over 60 s). The workers' lines:
    ``got NAMES AT`` and ``done NAMES AT``, NAMES comma-separated (jet share: ``p:o``,
    JetStream: sequences). Also used by bench_share."""
    rnd.spawn(producer)
    ids = [rnd.spawn({**worker, "track": True, "delay": 0.001}) for _ in range(workers)]
    victim, killed = rnd.kill_one_mid_batch(ids, "got ")
    got: set[str] = set()
    done: set[str] = set()
    for line in rnd.lines(victim):
        tag, *rest = line.split()
        if tag in ("got", "done") and len(rest) == 2:
            (got if tag == "got" else done).update(rest[0].split(","))
    return rnd.taken_over(ids, victim, killed, got - done, "done ")


def _js_redelivery(work: Path, base: dict[str, Any], rate: int) -> float:
    producer = {**base, "kind": "js-produce", "rate": rate}
    return redelivery_after_kill(Round(work), {**base, "kind": "js"}, producer, 3)


async def _prepare(servers: list[str], js_url: str, stream: str, n: int) -> dict[str, int]:
    """Fill both sides; the jet stream's partition ends (HW per partition)."""
    async with Client(servers) as client:
        await client.create_stream(stream, f"bench.{stream}", partitions=PARTITIONS)
        await client.create_stream("live", "bench.live", partitions=PARTITIONS)
        await jet_fill(client, stream, n)
        ends = {str(p): (await client.list_offsets(stream, p)).hw for p in range(PARTITIONS)}
    nc, js = await js_setup(js_url, "GROUPS", "js.groups")
    await js.add_stream(name="LIVE", subjects=["js.live"])
    await js_fill(js, "js.groups", n)
    await nc.close()
    return ends


async def js_durable(
    js_url: str, stream: str, name: str, ack_wait: float, *, ack: bool = True
) -> None:
    import nats
    from nats.js.api import AckPolicy as JsAck
    from nats.js.api import ConsumerConfig, DeliverPolicy

    nc = await nats.connect(js_url)
    js = nc.jetstream()
    config = ConsumerConfig(
        durable_name=name,
        ack_policy=JsAck.EXPLICIT if ack else JsAck.NONE,
        deliver_policy=DeliverPolicy.ALL,
        ack_wait=ack_wait,
        max_ack_pending=20_000,
    )
    await js.add_consumer(stream, config)
    await nc.close()


def _main(quick: bool, servers: list[str], js_url: str, work: Path) -> None:
    n = 60_000 if quick else 400_000
    rate = 1000
    results = Results()
    print(f"(a) group consume throughput, {n:,} x 100 B, {PARTITIONS} partitions (filling...)")
    ends = anyio.run(_prepare, servers, js_url, "grp", n, backend="asyncio")
    jet_base = {"servers": servers, "stream": "grp", "auto_commit": 1.0, "ends": ends}
    for members in (1, 2, 4):
        group = f"g-{uuid.uuid4().hex[:6]}"
        jet_rate, jet_start, dups = _throughput(
            work, [{**jet_base, "kind": "jet", "group": group}] * members, n
        )
        durable = f"d{uuid.uuid4().hex[:6]}"
        anyio.run(js_durable, js_url, "GROUPS", durable, 30.0, backend="asyncio")
        js_base = {"url": js_url, "js_stream": "GROUPS", "durable": durable}
        js_rate, js_start, _ = _throughput(work, [{**js_base, "kind": "js"}] * members, n)
        durable = f"d{uuid.uuid4().hex[:6]}"
        no_ack_durable = partial(js_durable, js_url, "GROUPS", durable, 30.0, ack=False)
        anyio.run(no_ack_durable, backend="asyncio")
        no_ack = {**js_base, "kind": "js", "durable": durable, "ack": False}
        js_none, _, _ = _throughput(work, [no_ack] * members, n)
        print(
            f"  {members} member(s): first message after go: jet {jet_start:.2f} s, "
            f"jetstream {js_start:.2f} s; jet messages consumed twice: {dups}"
        )
        results.add(f"{members} member(s) vs acks each", jet_rate, js_rate, "msg/s", True)
        results.add(f"{members} member(s) vs ack none", jet_rate, js_none, "msg/s", True)
    print("(b) commit overhead: 2 jet members, auto-commit every 1 s vs none")
    rates: dict[float | None, float] = {1.0: 0.0, None: 0.0}
    for _ in range(2):  # interleaved, best of two: short runs on a shared box are noisy
        for auto_commit in (1.0, None):
            group = f"g-{uuid.uuid4().hex[:6]}"
            spec = {**jet_base, "kind": "jet", "group": group, "auto_commit": auto_commit}
            rates[auto_commit] = max(rates[auto_commit], _throughput(work, [spec] * 2, n)[0])
    print(
        f"  auto-commit 1 s {rates[1.0]:,.0f} msg/s, no commits {rates[None]:,.0f} msg/s, "
        f"ratio {rates[1.0] / rates[None]:.2f}"
    )
    print(f"(c) rebalance: 3 members, {rate} msg/s produced, 1 ms per message, SIGKILL one")
    group = f"g-{uuid.uuid4().hex[:6]}"
    takeover = _jet_takeover(
        work, {"servers": servers, "stream": "live", "group": group, "auto_commit": 1.0}, rate
    )
    durable = f"d{uuid.uuid4().hex[:6]}"
    anyio.run(js_durable, js_url, "LIVE", durable, ACK_WAIT, backend="asyncio")
    js_base = {"url": js_url, "js_stream": "LIVE", "durable": durable, "subject": "js.live"}
    redelivery = _js_redelivery(work, js_base, rate)
    print(
        f"  jet: session timeout {SESSION} s, heartbeat {HEARTBEAT} s; "
        f"JetStream: ack_wait {ACK_WAIT} s"
    )
    results.add("killed member's work resumes after, s", takeover, redelivery, "s", False)
    results.table()


def run_side_by_side(
    main: Callable[[bool, list[str], str, Path], None], quick: bool, prefix: str
) -> None:
    """``main(quick, jet servers, JetStream URL, work dir)`` with a one-server jet dev
    cluster and a JetStream server running (bench_share uses it too)."""
    work = Path(tempfile.mkdtemp(prefix=prefix))
    with (
        open(os.devnull, "wb") as devnull,
        DevCluster(size=1, log_file=devnull) as dev,
        jetstream_server(sync_always=False) as js_url,
    ):
        main(quick, dev.addresses, js_url, work)


def run(quick: bool) -> None:
    """Run (a)-(c) and print them side by side with ratios."""
    run_side_by_side(_main, quick, "bench-groups-")


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "worker":
        worker_main(sys.argv[2])
    else:
        run(quick="--quick" in sys.argv)
