"""The slow 1 % at 500 msg/s: where each outlying message spent its time, and what coincided.

One jet server (``jet dev``, RF 1) runs with ``JET_HOP_TRACE`` and ``JET_HOP_USAGE``
(jetserver/infra/hops.py: its stage marks per message, its garbage collections, its fsyncs,
its periodic rounds, each with the marking thread's CPU time and its time spent waiting
for a CPU); after a second of warm-up this process publishes timestamped 100-byte
messages at 500 msg/s with ``send_soon`` (the ``bench light`` loop) and consumes them,
noting at each send and each batch consumed its own thread's CPU and wait for a CPU
(``/proc/thread-self/schedstat``), how late each send was, and its garbage collections
(``gc.callbacks``). All times are ``perf_counter_ns`` (CLOCK_MONOTONIC, one clock for
every process of the machine).

An outlier is a message over 3x the run's p50. Printed per durability (``flushed``,
``written``): the events (collections, periodic rounds, appends' ``write()``, fsyncs
beyond their p50) per 10,000 messages with their durations and, for those of a loop
thread, how much of them was CPU and how much waiting for a CPU; the outlier rate of
messages whose way overlaps each kind of event against the rest; and the outliers by the
largest part of their time (the server's or the client's wait for a CPU, an fsync, a
collection, ...). With ``JET_TAIL_LOOP=asyncio`` the server and this client run asyncio's
loop with :mod:`bench.loop_probe` (the CPU of every loop callback: a long turn of this
process's own, told from a preempted one), and it lists the callbacks of 0.5 ms of CPU or
more by what they were. ``JET_TAIL_SECONDS`` sets the length (default 30, quick 10),
``JET_TAIL_DURABILITY`` the cases (default ``flushed,written``), ``JET_TAIL_IN_FLIGHT``
the producer's ``max_in_flight`` (default 1), ``JET_TAIL_SERVER_PATH``
a directory put first on the server's PYTHONPATH (a ``sitecustomize`` of an experiment's);
``JET_TAIL_KEEP=<prefix>`` keeps the marks as JSON (``python -m bench.bench_tail <file>``
prints their analysis again); ``JET_BENCH_AGAINST=<tree>`` runs the same against that
tree's server after this one's (``JET_TAIL_ONLY_AGAINST=1``: that one's alone, to
alternate the two builds run by run). Run: ``python -m bench tail [--quick]``.

Then each outlier's cause (:mod:`bench.tail_stages`): its way split into stages (queued in
the producer, to the server, to the append, the append's ``write()``, the fsync with
``flushed``, to the consumer's answer, to the consumer), the stage that grew, and the first
event covering 30 % of that stage's excess: a stall of the machine (a real-time
:mod:`bench.stall_probe` per CPU that woke late), a collection, an fsync on the server's
loop or beyond its median, a slow ``write()``, a periodic round, a process waiting for a
CPU, the background fsync of a ``written`` partition; or waiting behind an earlier
message's request (then that message's cause). On a loaded machine the waits for a CPU
hide everything else: run it at real-time priority (``chrt -f 1 python -m bench tail``,
root; the probes run above it) so that the process's own causes and the machine's stalls
are what is left.
"""

from __future__ import annotations

import bisect
import contextlib
import gc
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import orjson

from bench import loop_probe, stall_probe, tail_stages
from bench.bench_sdk import _load as _load_avg
from bench.bench_sdk import jet_latency
from bench.pacing import paced
from bench.sdk_marks import consume_timed, sdk_marks
from bench.stats import pct
from bench.trees import HERE, compared_trees, tree_paths
from jetsdk import Client, Consumer, Message, Producer
from jetserver.testing.devcluster import DevCluster

RATE = 500
VALUE = bytes(100)
OUTLIER_X = 3.0
"""A message over this many times the p50 is an outlier."""
EVENT_MIN_MS = 1.0
RENEWAL = "FetchStream sent again (no stream parked)"
"""The cause of a message whose way overlapped the gap between the consumer's stream's last
answer and its next stream's first (with no FetchStreamCredit: every 64 answers)."""
"""Events (collections, stalls) shorter than this are not listed as causes."""


async def _measure(
    addresses: list[str], durability: str, seconds: float, marks: dict[str, list[int]]
) -> None:
    """Publish and consume at RATE for ``seconds``, recording client marks into ``marks``
    (the SDK's, :mod:`bench.sdk_marks`, and this process's collections)."""

    def on_gc(phase: str, info: dict[str, int]) -> None:
        marks[f"cgc.{phase}.{info.get('generation', -1)}"].append(time.perf_counter_ns())

    gc.callbacks.append(on_gc)
    try:
        with sdk_marks(marks):
            await _publish_and_consume(addresses, durability, seconds, marks)
    finally:
        gc.callbacks.remove(on_gc)


def _usage_mark(marks: dict[str, list[int]], now: int) -> None:
    cpu, wait = _schedstat()
    marks["c.ns"].append(now)
    marks["c.cpu"].append(cpu)
    marks["c.wait"].append(wait)


async def _publish_and_consume(
    addresses: list[str], durability: str, seconds: float, marks: dict[str, list[int]]
) -> None:
    total = int(RATE * seconds)
    async with Client(addresses) as client:
        await client.create_stream("tail", "tail", durability=durability)  # type: ignore[arg-type]
        # Warm up (as ``bench light`` does): a server's first Produce took 18-21 ms of
        # loop CPU here (code and files first used), not a steady-state outlier.
        await jet_latency(client, "tail", RATE, 1.0)
        async with (
            Consumer(client, "tail", start="new-only", max_wait=5.0) as consumer,
            Producer(
                client,
                "tail",
                linger=0,
                max_pending=1000,
                max_in_flight=int(os.environ.get("JET_TAIL_IN_FLIGHT", "1")),
            ) as producer,
            anyio.create_task_group() as tg,
        ):

            def batch(now: int, got: list[Message]) -> None:
                _usage_mark(marks, now)
                for msg in got:
                    marks["consumed"].append(now)
                    marks["sent_of"].append(int.from_bytes(msg.value[:8], "big"))

            tg.start_soon(consume_timed, consumer, total, seconds + 60, batch)
            start = time.perf_counter_ns()
            period = 1_000_000_000 // RATE
            async for i in paced(total, RATE):
                sent = time.perf_counter_ns()
                _usage_mark(marks, sent)
                marks["late"].append(sent - (start + i * period))
                await producer.send_soon(sent.to_bytes(8, "big") + VALUE[8:])


Marks = dict[str, list[int]]
Usage = dict[str, list[tuple[int, int, int, int]]]
"""Per mark name: (ns, thread id, CPU ns, waiting-for-a-CPU ns) of each, in time order."""


def _load(prefix: Path) -> tuple[Marks, Usage]:
    """The server's marks (``infra/hops.py``'s files), with their thread usage if recorded."""
    marks: Marks = defaultdict(list)
    usage: Usage = defaultdict(list)
    for path in prefix.parent.glob(prefix.name + ".*"):
        for line in path.read_text(encoding="ascii").splitlines():
            name, ns, *rest = line.split()
            marks[name].append(int(ns))
            if rest:
                tid, cpu, wait = map(int, rest)
                usage[name].append((int(ns), tid, cpu, wait))
    for values in usage.values():
        values.sort()
    return marks, usage


def _schedstat() -> tuple[int, int]:
    with open("/proc/thread-self/schedstat", "rb") as f:
        cpu, wait, _slices = f.read().split()
    return int(cpu), int(wait)


def _pairs(marks: Marks, prefix: str) -> list[tuple[int, int, str]]:
    """(start, stop, generation) of each collection marked ``<prefix>.start.<g>`` /
    ``<prefix>.stop.<g>``."""
    out: list[tuple[int, int, str]] = []
    for g in ("0", "1", "2"):
        starts = sorted(marks.get(f"{prefix}.start.{g}", []))
        stops = sorted(marks.get(f"{prefix}.stop.{g}", []))
        out += [(a, b, g) for a, b in zip(starts, stops, strict=False)]
    return out


def _spans(marks: Marks, start: str, stop: str) -> list[tuple[int, int]]:
    starts = sorted(marks.get(start, []))
    stops = sorted(marks.get(stop, []))
    out = []
    for a in starts:
        i = bisect.bisect_left(stops, a)
        if i < len(stops):
            out.append((a, stops[i]))
    return out


def _overlap(spans: list[tuple[int, int]], lo: int, hi: int) -> int:
    """Nanoseconds of ``spans`` (sorted by start) inside [lo, hi]."""
    total = 0
    for a, b in spans:
        if a > hi:
            break
        total += max(0, min(b, hi) - max(a, lo))
    return total


class _Thread:
    """One thread's (ns, CPU ns, wait ns) samples, to read its CPU and its wait for a CPU
    between two moments (from the samples nearest inside them)."""

    def __init__(self, samples: list[tuple[int, int, int]]) -> None:
        self.samples = sorted(samples)
        self.times = [s[0] for s in self.samples]

    def between(self, lo: int, hi: int) -> tuple[int, int]:
        i = bisect.bisect_left(self.times, lo)
        j = bisect.bisect_right(self.times, hi) - 1
        if i >= j:
            return 0, 0
        a, b = self.samples[i], self.samples[j]
        return b[1] - a[1], b[2] - a[2]


def _analyse(name: str, marks: Marks, usage: Usage) -> None:
    lat = [(c - s) / 1e6 for s, c in zip(marks["sent_of"], marks["consumed"], strict=True)]
    if not lat:
        print(f"  {name}: no messages")
        return
    p50, p99 = pct(lat, 0.5), pct(lat, 0.99)
    n = len(lat)
    per = 10_000 / n
    # The server's event-loop thread: the one that reads requests.
    loop_tid = Counter(u[1] for u in usage.get("req.produce", [])).most_common(1)
    server = _Thread(
        [
            (ns, cpu, wait)
            for us in usage.values()
            for ns, tid, cpu, wait in us
            if loop_tid and tid == loop_tid[0][0]
        ]
    )
    client = _Thread(
        [(a, b, c) for a, b, c in zip(marks["c.ns"], marks["c.cpu"], marks["c.wait"], strict=True)]
    )
    spans = {
        "server gc": [(a, b) for a, b, _g in sorted(_pairs(marks, "gc"))],
        "client gc": [(a, b) for a, b, _g in sorted(_pairs(marks, "cgc"))],
        "server periodic": sorted(
            _spans(marks, "housekeeping.start", "housekeeping.end")
            + _spans(marks, "idle_sweep.start", "idle_sweep.end")
        ),
        "append write()": _spans(marks, "append.start", "append"),
    }
    lo, hi = min(marks["sent_of"]), max(marks["consumed"])  # the measured span
    spans = {k: [(a, b) for a, b in sp if lo <= a <= hi] for k, sp in spans.items()}
    fsyncs = [(a, b) for a, b in _spans(marks, "fsync.start", "fsync.end") if lo <= a <= hi]
    fsync_p50 = pct([(b - a) for a, b in fsyncs], 0.5) if fsyncs else 0
    spans["fsync (beyond its p50)"] = [
        (a + int(fsync_p50), b) for a, b in fsyncs if b - a > fsync_p50
    ]
    causes: Counter[str] = Counter()
    cause_ms: dict[str, list[float]] = defaultdict(list)
    share: dict[str, float] = defaultdict(float)
    excess_total = 0.0
    outliers = 0
    for sent, consumed, ms in zip(marks["sent_of"], marks["consumed"], lat, strict=True):
        if ms <= OUTLIER_X * p50:
            continue
        outliers += 1
        excess = ms - p50
        excess_total += excess
        parts: dict[str, float] = {}
        s_cpu, s_wait = server.between(sent, consumed)
        c_cpu, c_wait = client.between(sent, consumed)
        parts["server waits for a CPU"] = s_wait / 1e6
        parts["client waits for a CPU"] = c_wait / 1e6
        parts["server loop CPU"] = s_cpu / 1e6
        parts["client CPU"] = c_cpu / 1e6
        for kind, sp in spans.items():
            parts[kind] = _overlap(sp, sent, consumed) / 1e6
        for kind, part in parts.items():
            share[kind] += min(part, excess)
        top = max(parts, key=parts.__getitem__)
        key = top if parts[top] >= 0.3 * excess else "not explained (< 30 % of its excess)"
        causes[key] += 1
        cause_ms[key].append(ms)
    print(
        f"  {name}: {n} messages, p50 {p50:.2f} p99 {p99:.2f} max {max(lat):.1f} ms, "
        f"p99/p50 {p99 / p50:.1f}; outliers (> {OUTLIER_X:g}x p50) {outliers * per:.0f} "
        f"per 10k, their excess over p50 {excess_total:.0f} ms in all"
    )
    for kind, sp in spans.items():
        ds = [(b - a) / 1e6 for a, b in sp]
        big = [d for d in ds if d >= EVENT_MIN_MS]
        if ds:
            th = client if kind.startswith("client") else server
            use = [th.between(a, b) for a, b in sp if (b - a) / 1e6 >= EVENT_MIN_MS]
            split = (
                f"; those: CPU {sum(u[0] for u in use) / 1e6:.1f}, waiting for a CPU "
                f"{sum(u[1] for u in use) / 1e6:.1f} of {sum(big):.1f} ms"
                if use and not kind.startswith("fsync")
                else ""
            )
            print(
                f"    {kind:<26} {len(ds) * per:8.1f} per 10k msgs, {len(big) * per:7.1f} of"
                f" >= {EVENT_MIN_MS:g} ms; p50 {pct(ds, 0.5):6.2f} max {max(ds):7.2f} ms{split}"
            )
    if fsyncs:
        ds = sorted((b - a) / 1e6 for a, b in fsyncs)
        print(
            f"    fsyncs: {len(ds) * per:.0f} per 10k msgs, p50 {pct(ds, 0.5):.2f} p90 "
            f"{pct(ds, 0.9):.2f} p99 {pct(ds, 0.99):.2f} max {ds[-1]:.1f} ms"
        )
    w_all = server.between(0, 1 << 62)
    c_all = client.between(0, 1 << 62)
    print(
        f"    whole run: server loop thread CPU {w_all[0] / 1e6:.0f} ms, waited for a CPU "
        f"{w_all[1] / 1e6:.0f} ms; client thread CPU {c_all[0] / 1e6:.0f} ms, waited "
        f"{c_all[1] / 1e6:.0f} ms"
    )
    print("    outlier rate of messages whose way overlaps such an event (>= 1 ms) / of the rest:")
    for kind, sp in spans.items():
        long_ones = [(a, b) for a, b in sp if (b - a) / 1e6 >= EVENT_MIN_MS]
        inside = [
            ms > OUTLIER_X * p50
            for sent, consumed, ms in zip(marks["sent_of"], marks["consumed"], lat, strict=True)
            if _overlap(long_ones, sent, consumed) > 0
        ]
        if inside:
            rest_out = outliers - sum(inside)
            print(
                f"      {kind:<26} {sum(inside)} of {len(inside)} ({sum(inside) / len(inside):.0%})"
                f" / {rest_out} of {n - len(inside)} ({rest_out / max(1, n - len(inside)):.0%})"
            )
    print(f"    {'outliers by largest part of their time':<44} {'per 10k':>8} {'ms p50/max':>16}")
    for key, count in causes.most_common():
        their = cause_ms[key]
        print(f"    {key:<44} {count * per:8.1f} {pct(their, 0.5):7.2f} / {max(their):6.1f}")
    print(
        "    the outliers' excess over p50 (ms in all), covered by: "
        + ", ".join(f"{k} {v:.0f}" for k, v in sorted(share.items(), key=lambda kv: -kv[1]))
    )
    renewals = _renewals(marks, lo, hi)
    print(
        f"    FetchStreams: {len(renewals) * per:.1f} sent again per 10k msgs (gap p50 "
        f"{pct([(b - a) / 1e6 for a, b in renewals], 0.5) if renewals else 0:.2f} ms), "
        f"{sum(lo <= t <= hi for t in marks.get('stream.grant', [])) * per:.1f} grants"
    )
    stalls = _stalls(marks)
    stages = tail_stages.FLUSHED if marks.get("fsync.start") else tail_stages.WRITTEN
    attributed = tail_stages.attribute(
        marks,
        stages,
        {
            "host stall (all CPUs)": stalls[0],
            "host stall (one CPU)": stalls[1],
            "server gc": spans["server gc"],
            "client gc": spans["client gc"],
            RENEWAL: renewals,
            "fsync on the server loop": _spans(marks, "loop_fsync.start", "loop_fsync.end"),
            tail_stages.DISK: spans["fsync (beyond its p50)"],
            "append write() >= 1 ms": [
                (a, b) for a, b in spans["append write()"] if b - a >= EVENT_MIN_MS * 1e6
            ],
            "periodic round (server)": spans["server periodic"],
            "server waits for a CPU": tail_stages.waits_of(server.samples),
            "client waits for a CPU": tail_stages.waits_of(client.samples),
            "fsync in the server's worker thread": _spans(
                marks, "behind_fsync.start", "behind_fsync.end"
            ),
        },
        p50,
        OUTLIER_X,
    )
    tail_stages.report(n, stages, attributed)


def _renewals(marks: Marks, lo: int, hi: int) -> list[tuple[int, int]]:
    """The consumer's gaps between a FetchStream's last answer and the next stream's first
    (no stream parked on the server meanwhile), of those ending in [lo, hi]."""
    firsts = sorted(marks.get("stream.first", []))
    out = []
    for end in sorted(marks.get("stream.end", [])):
        i = bisect.bisect_right(firsts, end)
        if i < len(firsts) and lo <= end <= hi:
            out.append((end, firsts[i]))
    return out


def _stalls(marks: Marks) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """The stall probes' spans (``stall.<cpu>.a`` / ``.b`` marks): those of all CPUs at
    once, and those of any one."""
    per_cpu = []
    for key in sorted(k for k in marks if k.startswith("stall.") and k.endswith(".a")):
        per_cpu.append(sorted(zip(marks[key], marks[key[:-1] + "b"], strict=True)))
    anyone = sorted(s for spans in per_cpu for s in spans)
    if not per_cpu:
        return [], []
    common = per_cpu[0]
    for spans in per_cpu[1:]:
        common = [
            (max(a, c), min(b, d)) for a, b in common for c, d in spans if max(a, c) < min(b, d)
        ]
    return common, anyone


def run(quick: bool) -> None:
    """Each tree, each durability: one run of the probe, then its analysis. With
    ``JET_TAIL_LOOP=asyncio`` the server and this client run asyncio's loop with
    :mod:`bench.loop_probe` in both (the CPU of each loop callback)."""
    seconds = float(os.environ.get("JET_TAIL_SECONDS", "10" if quick else "30"))
    loops = os.environ.get("JET_TAIL_LOOP", "") == "asyncio"
    if loops:
        loop_probe.install()
    trees = compared_trees()
    if os.environ.get("JET_TAIL_ONLY_AGAINST") == "1":
        trees.pop("A")
    durabilities = os.environ.get("JET_TAIL_DURABILITY", "flushed,written").split(",")
    for durability in durabilities:
        for tag, tree in trees.items():
            with tempfile.TemporaryDirectory(prefix="jet-tail-") as tmp:
                prefix = Path(tmp) / "hops"
                env = {
                    "PYTHONPATH": os.pathsep.join(
                        str(p)
                        for p in [
                            *filter(None, [os.environ.get("JET_TAIL_SERVER_PATH")]),
                            HERE / "bench/cost_hook",
                            HERE,
                            *tree_paths(tree),
                        ]
                    ),
                    "JET_HOP_TRACE": str(prefix),
                    "JET_HOP_USAGE": "1",
                }
                if loops:
                    env["JET_LOOP_PROBE"] = str(Path(tmp) / "loop")
                    env["JET_SERVER_EVENT_LOOP"] = "asyncio"
                client_marks: dict[str, list[int]] = defaultdict(list)
                kept_before = len(loop_probe.report()["kept"])
                with (
                    open(os.devnull, "wb") as devnull,
                    DevCluster(size=1, log_file=devnull, server_env={"s1": env}) as dev,
                    _probes(Path(tmp), seconds + 60, client_marks),
                ):
                    anyio.run(
                        _measure,
                        dev.addresses,
                        durability,
                        seconds,
                        client_marks,
                        backend="asyncio",
                    )
                marks, usage = _load(prefix)
                server_loop = [orjson.loads(f.read_bytes()) for f in Path(tmp).glob("loop.*")]
            marks.update(client_marks)
            keep = os.environ.get("JET_TAIL_KEEP")
            if keep:  # the marks, for another look: python -m bench.bench_tail <file>
                Path(f"{keep}.{tag}.{durability}.json").write_bytes(orjson.dumps([marks, usage]))
                if loops:
                    Path(f"{keep}.{tag}.{durability}.loops.json").write_bytes(
                        orjson.dumps([server_loop, loop_probe.report()["kept"][kept_before:]])
                    )
            print(f"  (load {_load_avg()})")
            _analyse(f"jet {tag} {durability}", marks, usage)
            if loops:
                client_loop = loop_probe.report()
                _loops(
                    marks,
                    server_loop[0] if server_loop else None,
                    client_loop["kept"][kept_before:],
                )


@contextlib.contextmanager
def _probes(tmp: Path, seconds: float, marks: Marks) -> Iterator[None]:
    """A :mod:`bench.stall_probe` per CPU while the block runs; their stalls into
    ``marks`` (``stall.<cpu>.a`` / ``.b``)."""
    cpus = sorted(os.sched_getaffinity(0))
    run = [sys.executable, "-m", "bench.stall_probe"]
    procs = [subprocess.Popen([*run, f"{tmp}/stall.{c}", f"{seconds}", f"{c}"]) for c in cpus]
    try:
        yield
    finally:
        for proc in procs:
            proc.terminate()
            proc.wait(10)
        for c in cpus:
            for a, b in stall_probe.load(str(tmp / f"stall.{c}")):
                marks[f"stall.{c}.a"].append(a)
                marks[f"stall.{c}.b"].append(b)


def _loops(marks: Marks, server: dict[str, Any] | None, client_kept: list[Any]) -> None:
    """The loop callbacks of at least loop_probe.KEEP_US of CPU in the measured span, by
    what they were, in the server and in this client."""
    lo, hi = min(marks["sent_of"]), max(marks["consumed"])
    n = len(marks["sent_of"])
    for side, kept in (("server", server["kept"] if server else []), ("client", client_kept)):
        inside = [k for k in kept if lo <= k[0] <= hi]
        by: dict[str, list[float]] = defaultdict(list)
        for _wall0, _wall, cpu, what in inside:
            by[what].append(cpu / 1e6)
        print(
            f"    {side} loop callbacks of >= {loop_probe.KEEP_US} us CPU: "
            f"{len(inside) * 10_000 / n:.1f} per 10k messages"
        )
        for what, cpus in sorted(by.items(), key=lambda kv: -sum(kv[1]))[:12]:
            print(
                f"      {len(cpus) * 10_000 / n:7.1f} per 10k, CPU p50 {pct(cpus, 0.5):5.2f} "
                f"max {max(cpus):5.2f} ms  {what[:90]}"
            )
    if server:
        print(f"    server CPU per callback (us: count), whole life: {server['hist']}")


if __name__ == "__main__":
    import sys

    for file in sys.argv[1:]:
        _analyse(Path(file).stem, *orjson.loads(Path(file).read_bytes()))
