"""What one message costs the server at light load: CPU, system calls and Python calls.

Publish -> consume at up to 500 msg/s, 100 B, one Producer (linger 0) and one Consumer in
this process, against a one-server ``jet dev`` (uvloop, ``flushed`` and ``written``
streams); each message alone on its way (:func:`one_at_a_time`; ``JET_COST_MODE=paced``:
``bench light``'s loop, whose messages share requests when the machine is busy).
Wall-clock latency on a shared machine is noise; these counts are not (or much less):

- ``cpu``: the server process's user + system CPU (/proc) over a fixed number of
  messages, in µs per message, and the voluntary context switches of its loop thread;
- ``strace``: system calls per message (``strace -c -f -p <server>`` over a round; the
  slowdown strace causes does not change the counts);
- ``calls``: Python function calls per message in the loop thread (cProfile switched on
  and off by signal through ``bench/cost_hook/sitecustomize.py``), with the top callees;
- ``lines``: Python lines run per message in the loop thread (``sys.settrace`` switched
  the same way), with the functions that run the most: the interpreter's work, which a
  call count weighs the same for a one-line property and a 100-line function (at 500
  msg/s most of a message's server CPU, ``python -m bench floor``);
- ``instructions``: the instructions the server process (every thread, user space: not
  the kernel's work in its system calls) runs per message, counted by valgrind's
  callgrind (the servers run under it, its counting switched on by ``callgrind_control``
  for the round only): unlike CPU time this does not move with the machine's load or
  cache state (the same code counts the same within 1-3 %), so a cut of a few per cent is
  seen. It slows the server about 50-fold (messages still go one at a time), so it runs
  alone (no other kind in the same run) and 300-500 messages a round are enough;
- ``turns``: event-loop iterations per message of the loop thread (``strace -f -e
  epoll_pwait,epoll_wait``): those that found work ready (the poll's timeout 0: a task or
  callback waited for the next turn) and those that slept until an event (a wake-up),
  with the other threads' system calls per message (an fsync worker's hand-offs).

With ``JET_BENCH_AGAINST=<another jet work tree>`` a second server runs that tree's code
(``A`` = this tree, ``B`` = that one) and the rounds interleave A and B, A first in even
rounds. ``JET_COST_KINDS`` picks the measurements (default ``cpu,strace,calls``),
``JET_COST_ROUNDS`` the rounds per kind (default 3; quick 2) and ``JET_COST_MESSAGES`` the
messages per round (default 2,000; quick 1,000); ``JET_COST_KEEP=<dir>`` keeps the last
profile of each server and stream there (``prof.<A|B>.<stream>``, pstats format; the
``lines`` kind's counts as ``lines.<A|B>.<stream>.json``);
``JET_COST_NO_COPIES=1`` adds two streams with ``no_nats_copies`` (``cfn``, ``cwn``), so
the NATS copy's cost per message is the difference from ``cf`` and ``cw``;
``JET_COST_VALUE_BYTES=<n>`` sends values of n bytes instead of 100 (the per-byte cost:
each message still alone, so at most RATE per second); ``JET_COST_FSYNC_THREADS=1`` runs
the servers with ``[storage] fsync_on_loop = false`` (every fsync in a worker thread, as
after a slow one on a busy disk: the runner's back-off decides run by run otherwise);
``JET_COST_ACK=all`` sends with ack ALL (the answer waits for the commit) instead of
LEADER.
Run: ``python -m bench cost [--quick]``.
"""

from __future__ import annotations

import contextlib
import os
import pstats
import re
import shutil
import signal
import statistics
import subprocess
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import anyio
import orjson

from bench.bench_light import _switches, jet_clients
from bench.bench_sdk import _load, _stamp, jet_latency
from bench.trees import HERE, compared_trees, tree_paths
from jetsdk import Client, Consumer, Producer
from jetsdk.client_requests import Durability
from jetsdk.codec.error_codes import AckPolicy
from jetserver.testing.devcluster import DevCluster
from jetserver.testing.jet_process import READY_TIMEOUT_S

RATE = 500
_VALGRIND_START_S = 600.0
"""How long a server started under valgrind (the ``instructions`` kind) may take to start,
and a round of it beyond its time at RATE (the server is about 50 times slower)."""
"""Messages per second (100 B each)."""
_MODE_ENV = "JET_COST_MODE"
"""``alone`` (default: :func:`one_at_a_time`) or ``paced`` (``bench light``'s loop)."""
_STRACE_ATTACH_S = 1.0
"""Time strace is given to attach to every thread before a round starts."""
_TURN = re.compile(r"^(\d+)\s+(?:<\.\.\. )?epoll_p?wait[ (].*?\], \d+, (-?\d+)")
"""An ``strace -f`` line of an epoll wait that returned (whole, or resumed after another
thread's line): thread and timeout (ms, the argument after the events and their count)."""
_CALL = re.compile(r"^(\d+)\s+(\w+)\(")
_LINE = re.compile(r"^\s*[\d.]+\s+[\d.]+\s+\d+\s+(\d+)\s+(?:\d+\s+)?(\w+)\s*$")


async def one_at_a_time(
    client: Client, stream: str, rate: int, seconds: float, slack_s: float = 60.0
) -> list[float]:
    """As :func:`bench.bench_sdk.jet_latency`, but each message alone on its way: sent
    (its ack awaited: LEADER, or ALL with ``JET_COST_ACK=all``), then received by the
    consumer, then the next one at its slot.
    Under load ``jet_latency``'s messages bunch into shared requests and responses, so
    its counts per message fall as the machine gets busier; these do not. ``slack_s``:
    how much longer than ``seconds`` the round may take."""
    latencies: list[float] = []
    total = int(rate * seconds)
    pad = b"p" * max(int(os.environ.get("JET_COST_VALUE_BYTES", "100")) - 100, 0)
    arrived = anyio.Event()
    async with (
        Consumer(client, stream, start="new-only", max_wait=5.0) as consumer,
        Producer(client, stream, linger=0, ack=_ack()) as producer,
        anyio.create_task_group() as tg,
    ):

        async def consume() -> None:
            nonlocal arrived
            while len(latencies) < total:
                for msg in await consumer.fetch(max_records=1000):
                    sent = int.from_bytes(msg.value[:8], "big")
                    latencies.append((time.perf_counter_ns() - sent) / 1e6)
                    arrived.set()

        tg.start_soon(consume)
        start = time.perf_counter()
        with anyio.fail_after(seconds + slack_s):
            for i in range(total):
                delay = start + i / rate - time.perf_counter()
                if delay > 0:
                    await anyio.sleep(delay)
                await producer.send(_stamp() + pad if pad else _stamp())
                await arrived.wait()
                arrived = anyio.Event()
    return latencies


def _ack() -> AckPolicy:
    """The producer's ack policy (``JET_COST_ACK``: ``leader``, the default, or ``all``)."""
    return AckPolicy[os.environ.get("JET_COST_ACK", "leader").upper()]


def _user_system_s(pid: int) -> tuple[float, float]:
    """User and system CPU seconds of process ``pid`` so far (/proc)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / tick, int(fields[12]) / tick


async def _send(
    client: Client, stream: str, rate: int, seconds: float, slack_s: float = 60.0
) -> list[float]:
    if os.environ.get(_MODE_ENV, "alone") == "paced":
        return await jet_latency(client, stream, rate, seconds)
    return await one_at_a_time(client, stream, rate, seconds, slack_s)


def _strace_counts(path: Path) -> dict[str, int]:
    counts: dict[str, int] = {}
    for line in path.read_text().splitlines():
        m = _LINE.match(line)
        if m and m.group(2) != "total":
            counts[m.group(2)] = int(m.group(1))
    return counts


async def _round(
    kind: str, client: Client, stream: str, pid: int, n: int, work: Path, tag: str
) -> tuple[float, str]:
    """One round of ``n`` messages; the per-message figure and a detail line."""
    secs = n / RATE
    if kind == "cpu":
        cpu0, sw0 = _user_system_s(pid), _switches(pid)
        lat = await _send(client, stream, RATE, secs)
        cpu1, sw1 = _user_system_s(pid), _switches(pid)
        user, system = ((b - a) / len(lat) * 1e6 for a, b in zip(cpu0, cpu1, strict=True))
        return user + system, (
            f"user {user:.0f} + system {system:.0f}; {(sw1[0] - sw0[0]) / len(lat):.2f} vol,"
            f" {(sw1[1] - sw0[1]) / len(lat):.2f} invol switches/msg of the loop thread,"
            f" p50 {statistics.median(lat):.2f} ms"
        )
    if kind == "turns":
        return await _turns(client, stream, pid, n, work, tag)
    if kind == "instructions":
        return await _instructions(client, stream, pid, n, work, tag)
    if kind == "lines":
        return await _lines(client, stream, pid, n, work, tag)
    if kind == "strace":
        lat = []

        async def send() -> None:
            lat.extend(await _send(client, stream, RATE, secs))

        counts = await syscall_counts(pid, work, f"strace.{tag}.{stream}.txt", send)
        if counts is None:
            return float("nan"), "strace could not attach (ptrace not allowed?)"
        top = sorted(counts.items(), key=lambda kv: -kv[1])[:9]
        return sum(counts.values()) / len(lat), ", ".join(
            f"{name} {c / len(lat):.2f}" for name, c in top
        )
    lat = []

    async def send_profiled() -> None:
        lat.extend(await _send(client, stream, RATE, secs))

    stats = await profiled(pid, work, f"prof.{tag}", send_profiled, f"prof.{tag}.{stream}")
    return stats.total_calls / len(lat), top_callees(stats, len(lat))  # type: ignore[attr-defined]


async def syscall_counts(
    pid: int, work: Path, name: str, send: Callable[[], Awaitable[None]]
) -> dict[str, int] | None:
    """System call -> count in process ``pid`` (every thread) while ``send()`` runs
    (``strace -c -f``, its summary written to ``work / name``); None if strace could not
    attach."""
    out = work / name
    proc = await anyio.open_process(
        ["strace", "-c", "-f", "-p", str(pid), "-o", str(out)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        await anyio.sleep(_STRACE_ATTACH_S)
        await send()
    finally:
        proc.send_signal(signal.SIGINT)
        with anyio.fail_after(30):
            await proc.wait()
    return _strace_counts(out) if out.exists() else None


async def profiled(
    pid: int, work: Path, name: str, send: Callable[[], Awaitable[None]], keep_as: str
) -> pstats.Stats:
    """The cProfile of server ``pid``'s loop thread while ``send()`` runs (switched on and
    off by signal through bench/cost_hook, written to ``work / name``: the server's
    ``JET_COST_PROFILE``); copied to ``$JET_COST_KEEP/keep_as`` if that is set."""
    out = work / name
    out.unlink(missing_ok=True)
    os.kill(pid, signal.SIGUSR1)
    await send()
    os.kill(pid, signal.SIGUSR2)
    with anyio.fail_after(30):
        while not out.exists():  # noqa: ASYNC110 - another process writes it
            await anyio.sleep(0.05)
        size = -1  # let the dump finish: its size holds for 0.3 s (a loaded machine's
        while size != out.stat().st_size or size == 0:  # took longer: an empty read)
            size = out.stat().st_size
            await anyio.sleep(0.3)
    keep = os.environ.get("JET_COST_KEEP")
    if keep:
        shutil.copy(out, Path(keep) / keep_as)
    return pstats.Stats(str(out))


def top_callees(stats: pstats.Stats, n: int) -> str:
    """The 8 most called functions of ``stats`` with their calls per message (``n``)."""
    rows = sorted(
        stats.stats.items(),  # type: ignore[attr-defined]
        key=lambda kv: -kv[1][1],
    )[:8]
    return ", ".join(f"{func[2]} {v[1] / n:.1f}" for func, v in rows)


async def _lines(
    client: Client, stream: str, pid: int, n: int, work: Path, tag: str
) -> tuple[float, str]:
    """Python lines run per message in the loop thread of server ``pid`` (``lines``):
    ``bench/cost_hook`` counts them between SIGUSR1 and SIGUSR2 while a ``.lines`` file
    sits beside its profile path."""
    out = work / f"prof.{tag}"
    marker = work / f"prof.{tag}.lines"
    out.unlink(missing_ok=True)
    marker.touch()
    try:
        os.kill(pid, signal.SIGUSR1)
        lat = await _send(client, stream, RATE, n / RATE)
        os.kill(pid, signal.SIGUSR2)
        with anyio.fail_after(10):
            while not out.exists():  # noqa: ASYNC110 - another process writes it
                await anyio.sleep(0.05)
    finally:
        marker.unlink(missing_ok=True)
    counts: dict[str, int] = orjson.loads(out.read_bytes())
    keep = os.environ.get("JET_COST_KEEP")
    if keep:
        shutil.copy(out, Path(keep) / f"lines.{tag}.{stream}.json")
    out.unlink()
    k = len(lat)
    top = sorted(counts.items(), key=lambda kv: -kv[1])[:8]
    return sum(counts.values()) / k, ", ".join(f"{_short(where)} {c / k:.1f}" for where, c in top)


async def _callgrind(pid: int, *args: str) -> None:
    with anyio.fail_after(120):
        await anyio.run_process(["callgrind_control", *args, str(pid)], check=True)


async def _instructions(
    client: Client, stream: str, pid: int, n: int, work: Path, tag: str
) -> tuple[float, str]:
    """Thousands of instructions per message in server ``pid`` (``instructions``), which
    runs under callgrind with its counting off: on for the round, then dumped."""
    await _callgrind(pid, "-z")
    await _callgrind(pid, "-i", "on")
    try:
        lat = await _send(client, stream, RATE, n / RATE, _VALGRIND_START_S)
    finally:
        await _callgrind(pid, "-i", "off")
    before = _dumps(work, tag)
    await _callgrind(pid, "-d", stream)
    with anyio.fail_after(60):
        while not (dumps := _dumps(work, tag) - before):  # noqa: ASYNC110 - valgrind writes it
            await anyio.sleep(0.1)
    await anyio.sleep(0.5)  # let the dump finish
    (dump,) = dumps
    total = _take_total(dump, f"callgrind.{tag}.{stream}")
    k = len(lat)
    return total / k / 1000, f"{total:,} over {k} messages"


def _dumps(work: Path, tag: str) -> set[Path]:
    """Server ``tag``'s callgrind dumps in ``work``."""
    return set(work.glob(f"callgrind.{tag}.*"))


def _take_total(dump: Path, keep_as: str) -> int:
    """The instruction count of callgrind dump ``dump``, which is then removed (copied to
    ``$JET_COST_KEEP/keep_as`` first if that is set)."""
    total = 0
    for line in dump.read_text().splitlines():
        if line.startswith("totals:"):
            total = int(line.split()[1])
    keep = os.environ.get("JET_COST_KEEP")
    if keep:
        shutil.copy(dump, Path(keep) / keep_as)
    dump.unlink()
    return total


def _short(where: str) -> str:
    """``<file>:<line>(<function>)`` with the file's directories left out."""
    path, _, rest = where.rpartition(":")
    return f"{Path(path).name}:{rest}"


async def _straced(
    flags: list[str], out: Path, client: Client, stream: str, pid: int, n: int
) -> list[float]:
    """A round of ``n`` messages with ``strace -f <flags>`` of the server writing ``out``."""
    proc = await anyio.open_process(
        ["strace", *flags, "-f", "-p", str(pid), "-o", str(out)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        await anyio.sleep(_STRACE_ATTACH_S)
        return await _send(client, stream, RATE, n / RATE)
    finally:
        proc.send_signal(signal.SIGINT)
        with anyio.fail_after(30):
            await proc.wait()


async def _turns(
    client: Client, stream: str, pid: int, n: int, work: Path, tag: str
) -> tuple[float, str]:
    """Loop iterations per message (``turns``): ready at once, or after a wait."""
    out = work / f"turns.{tag}.{stream}.txt"
    lat = await _straced([], out, client, stream, pid, n)
    if not out.exists():
        return float("nan"), "strace could not attach (ptrace not allowed?)"
    ready = waited = 0
    others: dict[str, int] = {}
    for line in out.read_text().splitlines():
        m = _TURN.match(line)
        if m and int(m.group(1)) == pid:
            if m.group(2) == "0":
                ready += 1
            else:
                waited += 1
            continue
        m = _CALL.match(line)
        if m and int(m.group(1)) != pid:
            others[m.group(2)] = others.get(m.group(2), 0) + 1
    out.unlink()
    k = len(lat)
    top = sorted(others.items(), key=lambda kv: -kv[1])[:5]
    return (ready + waited) / k, (
        f"{ready / k:.2f} found work ready, {waited / k:.2f} waited for an event;"
        f" other threads' calls/msg: " + (", ".join(f"{c} {v / k:.2f}" for c, v in top) or "none")
    )


async def _rounds(
    jets: dict[str, tuple[list[str], int]], kinds: list[str], rounds: int, n: int, work: Path
) -> None:
    results: dict[tuple[str, str, str], list[float]] = {}
    async with contextlib.AsyncExitStack() as stack:
        streams: dict[str, tuple[str, Durability | None]] = {
            "cf": ("cost.f", None),
            "cw": ("cost.w", "written"),
        }
        clients = await jet_clients(stack, jets, streams, warm=("cf", "cw"))
        names = ["cf", "cw"]
        if os.environ.get("JET_COST_NO_COPIES") == "1":
            for client in clients.values():
                for name, subject, durability in (
                    ("cfn", "cost.fn", None),
                    ("cwn", "cost.wn", "written"),
                ):
                    await client.create_stream(
                        name, subject, durability=durability, no_nats_copies=True
                    )
                    await jet_latency(client, name, RATE, 1.0)
            names += ["cfn", "cwn"]
        tags = list(jets)
        for kind in kinds:
            for r in range(rounds):
                for stream in names:
                    for tag in tags if r % 2 == 0 else tags[::-1]:
                        value, detail = await _round(
                            kind, clients[tag], stream, jets[tag][1], n, work, tag
                        )
                        record(results, (kind, stream, tag), r, value, detail)
    print_medians(results, rounds, n)


UNITS = {
    "cpu": "server us/msg",
    "strace": "syscalls/msg",
    "calls": "Python calls/msg",
    "turns": "loop turns/msg",
    "lines": "Python lines/msg",
    "instructions": "k instructions/msg",
}
"""Each kind's unit."""


def record(
    results: dict[tuple[str, str, str], list[float]],
    key: tuple[str, str, str],
    r: int,
    value: float,
    detail: str,
) -> None:
    """Keep round ``r``'s ``value`` under ``key`` = (kind, what, tree tag) and print it."""
    results.setdefault(key, []).append(value)
    kind, what, tag = key
    print(
        f"  {kind:<6} r{r} {tag} {what}: {value:7.1f} {UNITS[kind]} ({detail}; load {_load()})",
        flush=True,
    )


def print_medians(results: dict[tuple[str, str, str], list[float]], rounds: int, n: int) -> None:
    """The median of each key's rounds (:func:`record`)."""
    print(f"  medians over {rounds} rounds of {n} messages:")
    for (kind, what, tag), values in results.items():
        each = ", ".join(f"{v:.1f}" for v in values)
        print(
            f"    {kind:<6} {what} {tag}: {statistics.median(values):7.1f} {UNITS[kind]}"
            f" (rounds: {each})"
        )


def settings(quick: bool, messages: int) -> tuple[list[str], int, int]:
    """The kinds, rounds and messages per round from ``JET_COST_KINDS``,
    ``JET_COST_ROUNDS`` and ``JET_COST_MESSAGES`` (default ``messages``; quick 1,000)."""
    kinds = os.environ.get("JET_COST_KINDS", "cpu,strace,calls").split(",")
    if shutil.which("strace") is None:
        print("  (strace not found: no system call or loop turn counts)")
        kinds = [k for k in kinds if k not in ("strace", "turns")]
    rounds = int(os.environ.get("JET_COST_ROUNDS", "2" if quick else "3"))
    if "instructions" in kinds:
        if kinds != ["instructions"]:
            raise SystemExit("JET_COST_KINDS: instructions runs alone (servers under valgrind)")
        if shutil.which("valgrind") is None or shutil.which("callgrind_control") is None:
            raise SystemExit("instructions: valgrind and callgrind_control are needed")
        quick, messages = False, 400  # about 2 minutes a round at the 50-fold slowdown
    n = int(os.environ.get("JET_COST_MESSAGES", "1000" if quick else str(messages)))
    return kinds, rounds, n


def run(quick: bool) -> None:
    """Start the server(s) and run the rounds (see the module docstring)."""
    kinds, rounds, n = settings(quick, 2000)
    trees = compared_trees()
    with contextlib.ExitStack() as stack:
        work = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="jet-cost-")))
        devnull = stack.enter_context(open(os.devnull, "wb"))
        jets: dict[str, tuple[list[str], int]] = {}
        for tag, tree in trees.items():
            paths = [HERE / "bench/cost_hook", *tree_paths(tree)]
            env = {
                "PYTHONPATH": os.pathsep.join(str(p) for p in paths),
                "JET_COST_PROFILE": str(work / f"prof.{tag}"),
            }
            server_settings = (
                {"storage": {"fsync_on_loop": False}}
                if os.environ.get("JET_COST_FSYNC_THREADS") == "1"
                else {}
            )
            prefix = (
                (
                    "valgrind",
                    "--tool=callgrind",
                    "--instr-atstart=no",
                    f"--callgrind-out-file={work}/callgrind.{tag}.%p",
                )
                if kinds == ["instructions"]
                else ()
            )
            dev = DevCluster(
                size=1,
                log_file=devnull,
                server_env={"s1": env},
                settings=server_settings,
                server_prefix=prefix,
            )
            stack.push(dev)  # (its __exit__ stops it)
            # Under valgrind a server starts about 50 times slower: on a machine at load
            # 30 that was more than the usual 90 s.
            dev.start(_VALGRIND_START_S if prefix else READY_TIMEOUT_S)
            jets[tag] = (dev.addresses, dev.servers[0].pid)
        print(
            f"one message's server cost at {RATE} msg/s, 100 B, ack {_ack().name}, {rounds}"
            f" rounds of {n} messages"
            + "".join(f"; jet {tag} = {tree}" for tag, tree in trees.items())
            + f" (load {_load()})",
            flush=True,
        )
        started = time.perf_counter()
        anyio.run(_rounds, jets, kinds, rounds, n, work, backend="asyncio")
        print(f"  ({time.perf_counter() - started:.0f} s)")
