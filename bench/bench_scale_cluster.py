"""Many replicated partitions on 3 servers: ``python -m bench scale_cluster [--quick]``.

A fresh 3-server ``jet dev`` cluster gets streams of 100 partitions at replication factor 3
(3,000 partitions; ``--quick``: 600). Then, from the metadata (every partition's leader and
leader epoch):

- the create time per partition;
- **idle leader changes**: leader elections (the sum of leader-epoch increases) while
  nothing is produced, over ``IDLE_S`` seconds after settling: a stable cluster has none;
- **failover**: kill -9 of the server leading the most partitions (about a third); the
  time until the metadata names a live leader for every partition again, the elections
  that took, and the time until every new leader serves: answers ListOffsets, which it
  does only once it applied its leadership (spec/protocol.md; the survivors take their
  roles after the metadata moved, and that part was the larger at 2,000 partitions); with
  ``JET_BENCH_ROOT`` (logs kept), the phases before that from the survivors' logs: the
  kill detected, the metadata Raft's new leader (when the killed server led it), the
  first entry of elections applied;
- the metadata Raft's files on a survivor;
- with ``JET_BENCH_KILLS=3``: after each kill the server is restarted, the time until
  every leadership is back on its preferred replica is measured (preferred-leader rounds
  every second here, up to 1,000 per round), then until every leader serves (ListOffsets)
  with a full ISR, and only then the server leading the most is killed again, 3 kills in
  all: each kill finds the cluster settled, as the first one does.

``JET_BENCH_PARTITIONS=1000`` runs another size (a multiple of 100).
Over the idle window, the servers' CPU seconds and their fetch sessions' counts
(``jet_fetch_session_partitions_sent_total`` over ``jet_fetch_session_requests_total``:
partitions carried per ReplicaFetch request) are printed too.
The survivors' CPU seconds from the kill to the end of the failover's watch are printed
beside the load average, and the watch's own (bench/failover_watch.py: its Metadata polls
and probes share one process and loop, and it is kept cheap: a watch near a whole core's
CPU measured itself as much as the servers); with ``JET_BENCH_ROOT`` how long after the
survivors' logs show each leadership taken the watch saw it served.
``JET_BENCH_PYSPY=<dir>`` records the survivors with py-spy from the kill for ``PYSPY_S``
seconds (speedscope files with idle samples, in time order: ``<dir>/kill<k>-<server>.json``;
``JET_BENCH_PYSPY_NATIVE=1``: with C frames, the garbage collector's and waits for the
interpreter lock among them, at the price of a pause of the process per sample);
with ``JET_HOP_TRACE`` the kill's ``perf_counter_ns`` is
printed (the servers' garbage collections are marked on that clock, jetserver.infra.hops).

Targets (issue 34), each printed with met / NOT met: create <= 10 ms per partition; 0
leader changes in 60 idle seconds; after every kill -9, every partition with a live ISR
member leads again within 5 s (in the metadata, and serving) at 10,000 partitions (twice
that at 20,000: 5 s x partitions / 10,000 above 10,000); metadata Raft files under 5 MiB.
The figures are from one cluster; on a shared 2-core machine run it a few times.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anyio

from bench.failover_watch import FAILOVER_BOUND_S, State, watch_failover
from jetsdk import Client
from jetsdk.client_requests import list_offsets_body
from jetsdk.codec.frames import Api
from jetsdk.errors import JetError
from jetserver.testing import free_ports
from jetserver.testing.devcluster import DevCluster

PER_STREAM = 100
"""Partitions per stream."""
SETTLE_S = 10.0
"""Wait after creating before the idle window."""
IDLE_S = 60.0
"""The idle window in which leader changes are counted."""
CREATE_ATTEMPTS = 10
"""Tries per stream."""
RESTART_BOUND_S = 300.0
"""Bound on a killed server's restart (it recovers every partition's log first)."""
REBALANCE_BOUND_S = 600.0
"""Give up waiting for the restarted server's leaderships to come back after this."""
SETTINGS = {"cluster": {"leader_rebalance_interval_s": 1.0, "leader_rebalance_max": 1000}}
"""Preferred-leader rounds every second (default 5 s, 500), so repeated kills find the
leaderships spread again sooner."""
CREATE_MS_TARGET = 10.0
FAILOVER_S_TARGET = 5.0
"""At 10,000 partitions (and below); scaled with the partitions above."""
RAFT_MIB_TARGET = 5.0
CPU_WINDOW_S = 10.0
"""The survivors' CPU is also printed over this long from the kill (the same span in every
run, whenever its watch ends)."""
PYSPY_S = 15
"""How long ``JET_BENCH_PYSPY`` records each survivor after a kill."""


async def _create(
    address: list[str], partitions: int, cpu: Callable[[], float]
) -> tuple[float, int, list[tuple[float, float]]]:
    """Create the streams, one after the other; (seconds, refused attempts, each stream's
    seconds and the servers' CPU seconds meanwhile, ``cpu`` telling theirs so far). A
    create refused because a server looked down at that moment is tried again (up to
    CREATE_ATTEMPTS times)."""
    started = time.perf_counter()
    refused = 0
    each: list[tuple[float, float]] = []
    async with Client(address, request_timeout=60.0) as client:
        for i in range(partitions // PER_STREAM):
            began, cpu_began = time.perf_counter(), cpu()
            for attempt in range(CREATE_ATTEMPTS):
                try:
                    await client.create_stream(
                        f"s{i}", f"s{i}", partitions=PER_STREAM, replication_factor=3
                    )
                    break
                except JetError:
                    refused += 1
                    if attempt == CREATE_ATTEMPTS - 1:
                        raise
                    await anyio.sleep(2.0)
            each.append((time.perf_counter() - began, cpu() - cpu_began))
    return time.perf_counter() - started, refused, each


def _create_phases(dev: DevCluster, each: list[tuple[float, float]]) -> str:
    """Where a creation's time went: the streams' create times and the servers' CPU
    meanwhile (a tenth at the start and at the end: a growth with the partitions already
    there shows), and with ``JET_BENCH_ROOT`` the metadata leader's phases of each ("stream
    creation phases" lines: placing, the Raft commit and apply, every leader serving),
    their medians in ms per stream; the rest of a stream's time is the client's request,
    its forwarding to the metadata leader and the answering server applying the entry."""
    tenth = max(1, len(each) // 10)
    out = f"per stream of {PER_STREAM}, median of the first tenth / the last: " + ", ".join(
        f"{what} {_median([e[i] for e in each[:tenth]]) * 1000:.0f} / "
        f"{_median([e[i] for e in each[-tenth:]]) * 1000:.0f} ms"
        for i, what in enumerate(("time", "the servers' CPU"))
    )
    phases: dict[str, list[float]] = {}
    for p in dev.servers:
        if not p.log_path.exists():
            continue
        with open(p.log_path, encoding="utf-8", errors="replace") as f:
            for line in f:
                if " stream creation phases " in line:
                    for name, value in re.findall(r" (\w+_s)=([0-9.]+)", line):
                        phases.setdefault(name, []).append(float(value))
    if phases:
        out += "; on the metadata leader, median per stream: " + ", ".join(
            f"{name.removesuffix('_s')} {_median(v) * 1000:.0f} ms" for name, v in phases.items()
        )
        out += f" ({len(next(iter(phases.values())))} streams)"
    return out


def _median(values: list[float]) -> float:
    return sorted(values)[len(values) // 2] if values else 0.0


async def _state(address: list[str]) -> State:
    async with Client(address) as client:
        meta = await client.metadata(refresh=True)
        return {
            (name, p.partition): (p.leader, p.leader_epoch, p.isr)
            for name, info in meta.streams.items()
            if name.startswith("s")
            for p in info.partitions
        }


def _elections(before: State, after: State) -> int:
    return sum(max(after[k][1] - b[1], 0) for k, b in before.items() if k in after)


PROBE_IN_FLIGHT = int(os.environ.get("JET_BENCH_PROBES", "64"))
"""Most ListOffsets probes in flight at once while waiting for a restarted cluster to
settle (``JET_BENCH_PROBES`` sets another); the failover's watch has its own
(bench/failover_watch.py)."""
PROBE_TIMEOUT_S = 2.0


async def _probe_ready(client: Client, key: tuple[str, int]) -> bool:
    """True if the partition's leader (in the client's metadata) answers ListOffsets: it
    took its role (spec/protocol.md: UNAVAILABLE until the leader applied its epoch)."""
    try:
        conn = await client.leader_connection(*key)
        await conn.request(
            Api.LIST_OFFSETS, list_offsets_body(key[0], key[1], "latest"), timeout=PROBE_TIMEOUT_S
        )
    except JetError:
        return False
    return True


PHASES = (
    ("detected", "server does not answer server={victim} ", False),
    ("metadata Raft election retried (a split vote)", "the next election sooner", False),
    ("metadata Raft leader again", "metadata raft leader changed server=", False),
    ("election entry applied", "leader elections proposed in one entry", False),
    ("last election entry applied", "leader elections proposed in one entry", True),
    ("takeover done", "partitions of a gone server elected from the liveness view", False),
    ("last role burst logged", "assignments applied", True),
)
"""Phases read from the survivors' logs: (name, text of the line after the kill, whether
the last such line counts rather than the first)."""


def _log_phases(dev: DevCluster, victim: str, killed_wall: float) -> str:
    """The failover's phases from the survivors' logs (kept with ``JET_BENCH_ROOT``):
    seconds from the kill to the first line of each (a Raft leader line counts only if it
    names a leader). Empty without logs."""
    lines = _log_lines(dev, victim, killed_wall)
    found = []
    for name, text, last in PHASES:
        text = text.format(victim=victim)
        hits = [t for t, line in lines if text in line and "leader=None" not in line]
        if hits:
            entries = f" ({len(hits)} entries)" if last else ""
            found.append(f"{name} {hits[-1 if last else 0]:.2f} s{entries}")
    return ", ".join(found)


def _log_lines(
    dev: DevCluster, victim: str, killed_wall: float, only: str | None = None
) -> list[tuple[float, str]]:
    """The survivors' log lines after the kill (``only``: that server's), as (seconds from
    the kill, line), in order."""
    lines: list[tuple[float, str]] = []
    for p in dev.servers:
        if p.server_id == victim or (only is not None and p.server_id != only):
            continue
        if not p.log_path.exists():
            continue
        with open(p.log_path, encoding="utf-8", errors="replace") as f:
            for line in f:
                try:
                    at = datetime.fromisoformat(line[:23]).replace(tzinfo=UTC).timestamp()
                except ValueError:
                    continue
                if at >= killed_wall:
                    lines.append((at - killed_wall, line))
    lines.sort()
    return lines


def _taken(
    lines: list[tuple[float, str]], moved: dict[tuple[str, int], int]
) -> dict[tuple[str, int], float]:
    """When each of ``moved`` (partition -> its new leader epoch) was taken by its new
    leader, from the survivors' "assignments applied" lines (their time less
    ``last_ago_s``: no later than that); partitions not found there are left out."""
    at: dict[tuple[str, int], float] = {}
    for t, line in lines:
        if "assignments applied" not in line or " led=" not in line:
            continue
        ago = re.search(r" last_ago_s=([0-9.]+)", line)
        when = t - (float(ago[1]) if ago else 0.0)
        for item in line.rsplit(" led=", 1)[1].split()[0].split(","):
            name, _, rest = item.partition("/")
            part, _, epoch = rest.partition("@")
            key = (name, int(part))
            if moved.get(key) == int(epoch):
                at.setdefault(key, when)
    return at


def _bursts(
    dev: DevCluster, victim: str, killed_wall: float, moved: dict[tuple[str, int], int]
) -> str:
    """Each survivor's role bursts that took any of ``moved`` (its "assignments applied"
    lines): role changes, the process's CPU over them and per role change (the count that
    holds under load), the loop thread's, first to last, the longest loop stall."""
    out = []
    for p in dev.servers:
        if p.server_id == victim:
            continue
        for _t, line in _log_lines(dev, victim, killed_wall, only=p.server_id):
            if "assignments applied" not in line or " led=" not in line:
                continue
            led = (i.partition("/") for i in line.rsplit(" led=", 1)[1].split()[0].split(","))
            if not any(moved.get((n, int(r.partition("@")[0]))) for n, _, r in led):
                continue
            f = dict(re.findall(r" (\w+)=([0-9.]+)(?= )", line))
            per_role = (
                f"{1000 * float(f['cpu_ms_per_role']):.0f}" if "cpu_ms_per_role" in f else "?"
            )
            out.append(
                f"{p.server_id} {f.get('count', '?')} roles, CPU {f.get('cpu_s', '?')} s "
                f"({per_role} us per role; loop {f.get('loop_cpu_s', '?')} s) in "
                f"{f.get('seconds', '?')} s, loop stall {f.get('loop_stall_s', '0')} s"
            )
    return "; ".join(out)


def _record(dev: DevCluster, victim: str, kill: int) -> list[subprocess.Popen[bytes]]:
    """With ``JET_BENCH_PYSPY``: py-spy records of the survivors, started now."""
    out = os.environ.get("JET_BENCH_PYSPY")
    if not out:
        return []
    Path(out).mkdir(parents=True, exist_ok=True)
    spy = Path(sys.executable).parent / "py-spy"
    spies = []
    for p in dev.servers:
        if p.server_id == victim:
            continue
        # --native (``JET_BENCH_PYSPY_NATIVE``): C frames too; py-spy then pauses the process
        # for each sample (it refuses --native with --nonblocking).
        native = os.environ.get("JET_BENCH_PYSPY_NATIVE")
        args = [str(spy), "record", "--native" if native else "--nonblocking", "--idle"]
        args += ["--format", "speedscope"]
        args += ["-d", str(PYSPY_S), "-p", str(p.pid)]
        args += ["-o", f"{out}/kill{kill}-{p.server_id}.json"]
        spies.append(subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
    return spies


def _cpu_s(pid: int) -> float:
    """CPU seconds (user + system) a process has used so far."""
    fields_ = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields_[11]) + int(fields_[12])) / os.sysconf("SC_CLK_TCK")


def _failover(dev: DevCluster, settled: State, kill: int = 1) -> tuple[str, dict[str, float]]:
    """Kill -9 the server leading the most partitions; it and its failover's figures."""
    leaders = [v[0] for v in settled.values()]
    victim = max({lead for lead in leaders if lead}, key=leaders.count)
    led = leaders.count(victim)
    # A partition whose ISR is the victim alone stays without a leader (no unclean
    # election): it is counted apart.
    alone = {k for k, v in settled.items() if v[0] == victim and v[2] == (victim,)}
    survivors = {p.server_id: p.address for p in dev.servers if p.server_id != victim}
    spies = _record(dev, victim, kill)
    pids = {p.server_id: p.pid for p in dev.servers if p.server_id != victim}
    cpu_before = {s: _cpu_s(pid) for s, pid in pids.items()}
    watch_cpu_before = time.process_time()
    dev.kill(victim)
    killed, killed_wall = time.perf_counter(), time.time()
    if os.environ.get("JET_HOP_TRACE"):  # the servers' gc marks are on this clock
        print(f"  killed at perf_counter_ns {time.perf_counter_ns()}")
    window: dict[str, float] = {}
    timer = threading.Timer(
        CPU_WINDOW_S, lambda: window.update({s: _cpu_s(p) - cpu_before[s] for s, p in pids.items()})
    )
    timer.start()
    w = anyio.run(watch_failover, survivors, settled, victim, alone, killed, backend="asyncio")
    cpu = {s: _cpu_s(pid) - cpu_before[s] for s, pid in pids.items()}
    timer.join(CPU_WINDOW_S + 5)
    watch_cpu = time.process_time() - watch_cpu_before
    for spy in spies:
        spy.wait(timeout=PYSPY_S + 30)
    timeline, now = w.timeline, w.now
    end = timeline[-1][0] if timeline else FAILOVER_BOUND_S
    moved_s = end if w.moved_s is None else w.moved_s
    moving = [k for k, v in settled.items() if v[0] == victim and k not in alone]
    served = sorted(w.served.get(k, end) for k in moving)
    ready_s = served[-1] if served else moved_s
    marks = [f"{t:.1f}s:{n}/{r}" for t, n, r in timeline[:: max(1, len(timeline) // 12)]]
    print(
        f"  kill -9 of {victim}: partitions still to move (metadata/serving) over time: "
        f"{' '.join(marks)}"
    )
    if served:
        print(
            f"  new leaders served (first answer to a probe): median "
            f"{served[len(served) // 2]:.2f} s, 90% {served[len(served) * 9 // 10]:.2f} s, "
            f"last {served[-1]:.2f} s; {w.probes} ListOffsets probes ({w.sweeps} sweeps), "
            f"Metadata requests "
            f"{max(w.metadata_s, default=0.0):.2f} s at most; probes not answered with "
            f"offsets: {w.failed or 'none'}, the slowest {w.slowest_s:.2f} s"
        )
    print(  # CPU is less noisy than time on a shared machine (load printed beside it)
        "  survivors' CPU from the kill to the end of the watch: "
        + ", ".join(f"{s} {c:.2f} s" for s, c in sorted(cpu.items()))
        + f" in {end:.2f} s; the watch's own (this process) {watch_cpu:.2f} s"
        + f" (load {Path('/proc/loadavg').read_text().split()[0]})"
    )
    print(  # a fixed window: comparable between runs whose watches end apart
        f"  survivors' CPU in the first {CPU_WINDOW_S:.0f} s after the kill: "
        + ", ".join(f"{s} {c:.2f} s" for s, c in sorted(window.items()))
    )
    phases = _log_phases(dev, victim, killed_wall)
    if phases:  # the leader-changed line is any after the kill (the victim led it or not)
        print(f"  from the survivors' logs, after the kill: {phases}")
        # The servers' side of the served row: on a loaded machine the watch's client is
        # starved too, and its probes came seconds after the leaderships were taken.
        lines = _log_lines(dev, victim, killed_wall)
        moved_to = {k: now[k][1] for k in moving if k in now and now[k][0] not in (None, victim)}
        bursts = _bursts(dev, victim, killed_wall, moved_to)
        if bursts:
            print(f"  the survivors' role bursts that took them: {bursts}")
        taken = _taken(lines, moved_to)
        if taken:
            times = sorted(taken.values())
            # The watch's honesty: how long after the survivor's line (a burst's last role
            # change, so no later than the partition's own) its probe was answered.
            lag = sorted(w.served[k] - t for k, t in taken.items() if k in w.served)
            print(
                f"  new leaderships taken (the survivors' logs): {len(times)} of "
                f"{len(moving)}, median {times[len(times) // 2]:.2f} s, last {times[-1]:.2f} s"
                + (
                    f"; served after taken: median {lag[len(lag) // 2]:.2f} s, "
                    f"90% {lag[len(lag) * 9 // 10]:.2f} s, most {lag[-1]:.2f} s"
                    if lag
                    else ""
                )
            )
    moved = [now[k][0] for k, v in settled.items() if v[0] == victim and k in now]
    spread = {s: moved.count(s) for s in sorted({m for m in moved if m and m != victim})}
    print(  # the survivors share the role changes (issue 34: one took them all)
        "  the victim's partitions now led by: " + ", ".join(f"{s} {n}" for s, n in spread.items())
    )
    stuck = {k: now[k] for k in now if k not in alone and now[k][0] in (None, victim)}
    if stuck:
        print(f"  still without a leader (leader, epoch, ISR): {sorted(stuck.items())[:5]}")
    return victim, {
        "led": led,
        "moved_s": moved_s,
        "ready_s": ready_s,
        "without_leader": len(stuck),
        "isr_alone": len(alone),
        "failover_elections": _elections(settled, now),
    }


def _restart_and_rebalance(dev: DevCluster, victim: str) -> tuple[float, float]:
    """Restart ``victim``; (seconds until every partition is led by its preferred replica
    in the metadata, seconds until, moreover, every leader serves and every ISR is full).

    The next kill comes only then, so that each kill finds the cluster as the first one
    did: a kill while the survivors still apply the rebalance's thousands of role changes
    (the metadata moves them back within seconds, the servers take their roles after) is
    another, harder case, and it made the second and third kills at 10,000 partitions
    incomparable with the first."""
    started = time.perf_counter()
    dev.start_server(victim, timeout_s=RESTART_BOUND_S)
    preferred_s: float | None = None
    serving: dict[tuple[str, int], tuple[str | None, int]] = {}
    while time.perf_counter() - started < REBALANCE_BOUND_S:
        try:
            if preferred_s is None:
                if anyio.run(_preferred, dev.addresses, backend="asyncio") == 0:
                    preferred_s = time.perf_counter() - started
                else:
                    time.sleep(0.5)
                    continue
            if anyio.run(_settled, dev.addresses, serving, backend="asyncio"):
                break
        except JetError:  # no server answered in time (a loaded machine): ask again
            pass
        time.sleep(0.5)
    end = time.perf_counter() - started
    return (end if preferred_s is None else preferred_s), end


async def _settled(
    address: list[str], serving: dict[tuple[str, int], tuple[str | None, int]]
) -> bool:
    """True if every partition's ISR holds all its replicas and its leader answers
    ListOffsets (those that answered are kept in ``serving`` with their leader and epoch
    and not probed again unless the leadership changed)."""
    limiter = anyio.CapacityLimiter(PROBE_IN_FLIGHT)
    async with Client(address) as client:
        meta = await client.metadata(refresh=True)
        parts = {
            (name, p.partition): p
            for name, info in meta.streams.items()
            if name.startswith("s")
            for p in info.partitions
        }
        full = all(len(p.isr) == len(p.replicas) for p in parts.values())
        now = {k: (p.leader, p.leader_epoch) for k, p in parts.items()}
        for key in [k for k, v in serving.items() if now.get(k) != v]:
            del serving[key]

        async def one(key: tuple[str, int]) -> None:
            async with limiter:
                if await _probe_ready(client, key):
                    serving[key] = now[key]

        async with anyio.create_task_group() as tg:
            for key in now:
                if key not in serving:
                    tg.start_soon(one, key)
        return full and len(serving) == len(now)


async def _preferred(address: list[str]) -> int:
    """Partitions not led by their preferred (first) replica."""
    async with Client(address) as client:
        meta = await client.metadata(refresh=True)
        return sum(
            1
            for name, info in meta.streams.items()
            if name.startswith("s")
            for p in info.partitions
            if p.leader != p.replicas[0]
        )


def _raft_files(dev: DevCluster, victim: str) -> tuple[int, int]:
    survivor = next(p for p in dev.servers if p.server_id != victim)
    sizes = []
    for f in Path(survivor.data_dir).rglob("*"):
        if "raft" in str(f):
            try:
                if f.is_file():
                    sizes.append(f.stat().st_size)
            except FileNotFoundError:  # a compaction replaced it meanwhile
                continue
    return len(sizes), sum(sizes)


def measure(partitions: int, idle_s: float, kills: int) -> dict[str, Any]:
    """Create, idle, kill -9 (``kills`` times, restarting in between); the figures (see the
    module docstring)."""
    keep = os.environ.get("JET_BENCH_ROOT")  # keep data and per-server logs there
    root = Path(keep) if keep else None
    runs: list[dict[str, float]] = []
    rebalance_s: list[float] = []
    settled_s: list[float] = []
    metrics = dict(zip(("s1", "s2", "s3"), free_ports(3), strict=True))
    with (
        open(os.devnull, "wb") as devnull,
        DevCluster(
            size=3,
            root=root,
            log_file=None if keep else devnull,
            settings=SETTINGS,
            server_env={s: {"JET_METRICS_PORT": str(p)} for s, p in metrics.items()},
        ) as dev,
    ):
        pids = [p.pid for p in dev.servers]

        def servers_cpu() -> float:
            return sum(_cpu_s(pid) for pid in pids)

        cpu_before = servers_cpu()
        create_s, refused, each = anyio.run(
            _create, dev.addresses, partitions, servers_cpu, backend="asyncio"
        )
        create_cpu_s = servers_cpu() - cpu_before
        print(  # CPU is less noisy than time on a shared machine
            f"  created: {_create_phases(dev, each)}; the servers' CPU "
            f"{create_cpu_s * 1000 / partitions:.1f} ms per partition (the three together, "
            f"load {Path('/proc/loadavg').read_text().split()[0]})"
        )
        time.sleep(SETTLE_S)
        before = anyio.run(_state, dev.addresses, backend="asyncio")
        idle_cpu, idle_counts = servers_cpu(), _session_counts(metrics)
        time.sleep(idle_s)
        idle_cpu = servers_cpu() - idle_cpu
        sent, asked, full, lost = (
            b - a for a, b in zip(idle_counts, _session_counts(metrics), strict=True)
        )
        print(
            f"  idle {idle_s:.0f} s: the servers' CPU {idle_cpu:.1f} s (the three together), "
            f"{sent:,} partitions in {asked:,} ReplicaFetch requests "
            f"({sent / max(asked, 1):.1f} per request; {full} full, {lost} sessions lost; load "
            f"{Path('/proc/loadavg').read_text().split()[0]})"
        )
        settled = anyio.run(_state, dev.addresses, backend="asyncio")
        idle_changes = _elections(before, settled)
        victim = ""
        for kill in range(kills):
            if kill:
                preferred_s, calm_s = _restart_and_rebalance(dev, victim)
                rebalance_s.append(preferred_s)
                settled_s.append(calm_s)
                settled = anyio.run(_state, dev.addresses, backend="asyncio")
            victim, run = _failover(dev, settled, kill + 1)
            runs.append(run)
        raft_files, raft_bytes = _raft_files(dev, victim)  # before the cluster's files go
    return {
        "create_ms_per_partition": create_s * 1000 / partitions,
        "creates_refused": refused,
        "idle_leader_changes": idle_changes,
        "runs": runs,
        "rebalance_s": rebalance_s,
        "settled_s": settled_s,
        "raft_files": raft_files,
        "raft_mib": raft_bytes / 2**20,
    }


SESSION_COUNTS = (
    "jet_fetch_session_partitions_sent_total",
    "jet_fetch_session_requests_total",
    "jet_fetch_session_full_requests_total",
    "jet_fetch_session_lost_total",
)
"""The fetch sessions' counters read over the idle window."""


def _session_counts(metrics: dict[str, int]) -> list[int]:
    """:data:`SESSION_COUNTS`, over every server's sessions (0: not served)."""
    counts = dict.fromkeys(SESSION_COUNTS, 0)
    for port in metrics.values():
        # 60 s: at load 55 a server answered its metrics later than 10 s and the run was lost.
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=60) as answer:
            text = answer.read().decode()
        for name, value in re.findall(r"^(jet_fetch_session_\w+)\{[^}]*\} (\d+)$", text, re.M):
            if name in counts:
                counts[name] += int(value)
    return list(counts.values())


def _row(label: str, value: str, target: str, ok: bool) -> str:
    return f"  {label:<52} {value:>12}  target {target:<10} {'met' if ok else 'NOT met'}"


def run(quick: bool) -> None:
    """Measure once and print the figures with every target."""
    partitions = int(os.environ.get("JET_BENCH_PARTITIONS", 600 if quick else 3000))
    kills = int(os.environ.get("JET_BENCH_KILLS", "1"))
    idle_s = 10.0 if quick else IDLE_S
    r = measure(partitions, idle_s, max(1, kills))
    failover_target = FAILOVER_S_TARGET * max(1.0, partitions / 10_000)
    print(
        f"  3 servers, {partitions:,} partitions at RF 3 (streams of {PER_STREAM}), "
        f"{r['creates_refused']:.0f} creates refused and tried again"
    )
    for i, run_ in enumerate(r["runs"], 1):
        print(
            f"  kill {i}: the server leading {run_['led']:.0f}: every partition had a live "
            f"leader again after {run_['moved_s']:.2f} s in the metadata, every new leader "
            f"served after {run_['ready_s']:.2f} s ({run_['without_leader']:.0f} still "
            f"without one, {run_['isr_alone']:.0f} left alone in their ISR; "
            f"{run_['failover_elections']:.0f} elections)"
        )
    for i, (t, calm) in enumerate(zip(r["rebalance_s"], r["settled_s"], strict=True), 1):
        print(
            f"  restart {i}: every leadership back on its preferred replica after {t:.1f} s, "
            f"every leader serving with a full ISR after {calm:.1f} s (the next kill then)"
        )
    worst = max(run_["moved_s"] for run_ in r["runs"])
    worst_ready = max(run_["ready_s"] for run_ in r["runs"])
    without = sum(run_["without_leader"] for run_ in r["runs"])
    print(f"\n  targets (issue 34), {partitions:,} partitions:")
    print(
        _row(
            "create per partition",
            f"{r['create_ms_per_partition']:.1f} ms",
            f"<= {CREATE_MS_TARGET:g} ms",
            r["create_ms_per_partition"] <= CREATE_MS_TARGET,
        )
    )
    print(
        _row(
            f"leader changes in {idle_s:.0f} idle seconds",
            f"{r['idle_leader_changes']:.0f}",
            "0" + (" in 60 s" if idle_s < IDLE_S else ""),
            r["idle_leader_changes"] == 0 and idle_s >= IDLE_S,
        )
    )
    print(
        _row(
            f"kill -9: all led again, worst of {len(r['runs'])} kill(s)",
            f"{worst:.2f} s",
            f"<= {failover_target:g} s",
            worst <= failover_target and not without,
        )
    )
    print(
        _row(
            f"kill -9: every new leader serving, worst of {len(r['runs'])}",
            f"{worst_ready:.2f} s",
            f"<= {failover_target:g} s",
            worst_ready <= failover_target and not without,
        )
    )
    print(
        _row(
            "kills measured (the issue asks for >= 3 runs)",
            f"{len(r['runs'])}",
            ">= 3",
            len(r["runs"]) >= 3,
        )
    )
    print(
        _row(
            f"metadata Raft files on a survivor ({r['raft_files']:.0f})",
            f"{r['raft_mib']:.2f} MiB",
            f"< {RAFT_MIB_TARGET:g} MiB",
            r["raft_mib"] < RAFT_MIB_TARGET,
        )
    )
