"""RF 3 ack ALL: the fsync steps split into the hand-off, the system call and the way back.

``bench rf3_steps`` shows the leader's fsync step (``fsync.start`` -> ``fsync.end``) and a
follower's append + fsync (``repl.fetched`` -> ``repl.flushed``) at ~1 ms each where a bare
fdatasync takes ~0.2 ms on a quiet disk. This splits them. The three servers run with
``JET_HOP_TRACE`` and ``JET_HOP_USAGE`` (each mark with its thread id); storage marks
``sync.start`` / ``sync.end`` around each fdatasync in the thread that makes it
(``storage/files.py``), and ``perf trace -e fdatasync`` (root, or a perf_event_paranoid
that allows it) records each call's time in the kernel. It prints:

- per fdatasync, by server and by thread kind (the event loop's or a worker's), matched by
  thread and order: ``kernel`` (perf), ``marks`` (``sync.start`` -> ``sync.end``: the call
  from Python, and the wait to take the GIL back after it), and ``marks - kernel`` (what
  the thread waited once the disk was done: the GIL, or a CPU);
- per message, the leader's step and the later-reporting follower's as three parts: from
  the step's start to the call (the hand-off to a thread, or the free-loop probe turn and
  the append), the call (marks), and from its end to the step's end (the result back on
  the loop).

Run: ``python -m bench rf3_sync [--quick]`` (4 s or 10 s at 200 msg/s, one message at a
time; the load is printed beside the figures).
"""

from __future__ import annotations

import bisect
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

from bench import latency_rf3
from bench.bench_sdk import _load
from bench.stats import pct

RATE = 200
"""Messages per second, one at a time."""

_PERF_LINE = re.compile(r"^\s*([\d.]+) \(\s*([\d.]+) ms\): .*?/(\d+) f(?:data)?sync\(")
MATCH_NS = 200_000
"""A call's ``sync.start`` mark is at most this long before perf's time of its entry."""
_CALIBRATE = (
    "import os, tempfile, time\n"
    "with tempfile.TemporaryFile() as f:\n"
    "    for _ in range(20):\n"
    "        os.write(f.fileno(), b'x'); t = time.perf_counter_ns()\n"
    "        os.fdatasync(f.fileno()); print(t, flush=True)\n"
)

Marks = dict[str, list[tuple[int, int, int]]]
"""Per mark name, its (ns, thread id, the thread's wait for a CPU so far in ns) triples,
in time order."""


def read_marks(prefix: Path) -> dict[int, Marks]:
    """Each server's marks (with ``JET_HOP_USAGE``'s thread ids) by process id."""
    out: dict[int, Marks] = {}
    for path in prefix.parent.glob(prefix.name + ".*"):
        marks: Marks = defaultdict(list)
        for line in path.read_text(encoding="ascii").splitlines():
            parts = line.split()
            tid, runq = (int(parts[2]), int(parts[4])) if len(parts) > 4 else (0, 0)
            marks[parts[0]].append((int(parts[1]), tid, runq))
        out[int(path.suffix[1:])] = {name: sorted(v) for name, v in marks.items()}
    return out


def kernel_times(text: str) -> dict[int, list[tuple[int, float]]]:
    """Per thread id, each fdatasync's or fsync's entry (perf's clock, ns) and time in the
    kernel (us), in order (``perf trace -T``; storage marks both kinds)."""
    out: dict[int, list[tuple[int, float]]] = defaultdict(list)
    for line in text.splitlines():
        m = _PERF_LINE.search(line)
        if m:
            out[int(m.group(3))].append((round(float(m.group(1)) * 1e6), float(m.group(2)) * 1e3))
    return out


def clock_offset() -> int:
    """``time.perf_counter_ns()`` minus perf trace's clock (ns): a child marks the time
    just before each of 20 fdatasyncs that perf traces; the median difference."""
    proc = subprocess.run(
        ["perf", "trace", "-T", "-e", "fdatasync", "--", sys.executable, "-c", _CALIBRATE],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    marks = [int(line) for line in proc.stdout.split()]
    entries = [t for calls in kernel_times(proc.stderr).values() for t, _ in calls]
    return int(statistics.median(m - t for m, t in zip(marks, entries, strict=True)))


def per_call(
    pid: int, marks: Marks, kernel: dict[int, list[tuple[int, float]]], offset: int
) -> dict[str, list[float]]:
    """Per thread kind, each fdatasync perf saw matched to its marks (the thread's
    ``sync.start`` at most :data:`MATCH_NS` before the entry, on the marks' clock): kernel,
    marks, marks - kernel, and the thread's wait for a CPU between the marks (us)."""
    starts: dict[int, list[tuple[int, int]]] = defaultdict(list)
    ends: dict[int, list[tuple[int, int]]] = defaultdict(list)
    for ns, tid, runq in marks.get("sync.start", []):
        starts[tid].append((ns, runq))
    for ns, tid, runq in marks.get("sync.end", []):
        ends[tid].append((ns, runq))
    out: dict[str, list[float]] = defaultdict(list)
    for tid, begun in starts.items():
        where = "loop" if tid == pid else "thread"
        ended = ends.get(tid, [])
        for entry, k in kernel.get(tid, []):
            at = entry + offset
            i = bisect.bisect_right(begun, (at, 1 << 62)) - 1
            if i < 0 or at - begun[i][0] > MATCH_NS:
                continue
            a = begun[i]
            j = bisect.bisect_left(ended, (a[0], -1))
            if j >= len(ended) or (i + 1 < len(begun) and ended[j][0] > begun[i + 1][0]):
                continue
            b = ended[j]
            span = (b[0] - a[0]) / 1000
            out[f"{where}: kernel"].append(k)
            out[f"{where}: marks"].append(span)
            out[f"{where}: marks - kernel"].append(span - k)
            out[f"{where}: of which waiting for a CPU"].append((b[1] - a[1]) / 1000)
    return out


def _first_after(pairs: list[tuple[int, int, int]], t: int) -> tuple[int, int, int] | None:
    i = bisect.bisect_left(pairs, (t, -1, -1))
    return pairs[i] if i < len(pairs) else None


def _end_in(marks: Marks, start: tuple[int, int, int]) -> int | None:
    """The ``sync.end`` of the call begun at ``start`` (same thread, next)."""
    for ns, tid, _ in marks.get("sync.end", [])[
        bisect.bisect_left(marks.get("sync.end", []), start) :
    ]:
        if tid == start[1]:
            return ns
    return None


def split_step(marks: Marks, begin: str, end: str, t0: int, t1: int) -> list[float] | None:
    """The step ``begin`` -> ``end`` (the first of each at or after ``t0``, before ``t1``)
    as [to the call, the call, from the call], us; None if a mark is missing."""
    b = _first_after(marks.get(begin, []), t0)
    if b is None or b[0] > t1:
        return None
    s = _first_after(marks.get("sync.start", []), b[0])
    e = _first_after(marks.get(end, []), b[0])
    if s is None or e is None or s[0] > e[0]:
        return None
    s_end = _end_in(marks, s)
    if s_end is None or s_end > e[0]:
        return None
    return [(s[0] - b[0]) / 1000, (s_end - s[0]) / 1000, (e[0] - s_end) / 1000]


def _stop(perf: subprocess.Popen[bytes]) -> None:
    """Stop ``perf trace``: SIGINT (it writes what it holds), then harder, bounded (at
    load 30-40 it sometimes did not end within 120 s of a SIGINT)."""
    for sig, wait_s in ((signal.SIGINT, 20.0), (signal.SIGTERM, 10.0), (signal.SIGKILL, 10.0)):
        perf.send_signal(sig)
        try:
            perf.wait(timeout=wait_s)
            return
        except subprocess.TimeoutExpired:
            continue


def _row(label: str, values: list[float]) -> None:
    print(f"    {label:<56} {pct(values, 0.5):>8.0f} {pct(values, 0.99):>9.0f} {len(values):>6}")


def run(quick: bool) -> None:
    """Measure and print (see the module docstring)."""
    if shutil.which("perf") is None:
        print("  perf not found: nothing measured")
        return
    seconds = 4.0 if quick else 10.0
    total = int(RATE * seconds)
    perf: list[subprocess.Popen[bytes]] = []
    kept: dict[int, Marks] = {}
    with tempfile.TemporaryDirectory(prefix="jet-rf3sync-") as tmp:
        perf_out = Path(tmp) / "perf.txt"

        def around(pids: list[int]) -> None:
            if perf:
                _stop(perf[0])
                return
            command = ["perf", "trace", "-T", "-e", "fdatasync,fsync", "-o", str(perf_out)]
            perf.append(
                subprocess.Popen(
                    [*command, "-p", ",".join(map(str, pids))],
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
            )

        os.environ["JET_HOP_USAGE"] = "1"
        offset = clock_offset()
        load_before = _load()
        try:
            _, sends, acks = latency_rf3.traced(
                RATE, total, around, lambda p: kept.update(read_marks(p))
            )
        finally:
            os.environ.pop("JET_HOP_USAGE", None)
            for p in perf:
                if p.poll() is None:
                    _stop(p)
        load_after = _load()
        kernel = kernel_times(perf_out.read_text(errors="replace")) if perf_out.exists() else {}
    print(
        f"RF 3, ack ALL, durability=flushed: {RATE} msg/s one at a time for {seconds:g} s, "
        f"100 B (load {load_before} -> {load_after})"
    )
    leader = max(kept, key=lambda p: len(kept[p].get("req.produce", [])))
    print(f"    {'per fdatasync, us':<56} {'p50':>8} {'p99':>9} {'n':>6}")
    for pid in sorted(kept, key=lambda p: (p != leader, p)):
        role = "leader" if pid == leader else f"follower {pid}"
        calls = per_call(pid, kept[pid], kernel, offset)
        for label in sorted(calls):
            _row(f"{role} {label}", calls[label])
    print(f"    {'per message, us':<56} {'p50':>8} {'p99':>9} {'n':>6}")
    parts = ("to the call", "the call (marks)", "from the call")
    steps = {"leader fsync.start -> fsync.end": (leader, "fsync.start", "fsync.end")}
    for pid in sorted(p for p in kept if p != leader):
        steps[f"follower {pid} repl.fetched -> repl.flushed"] = (
            pid,
            "repl.fetched",
            "repl.flushed",
        )
    for label, (pid, begin, end) in steps.items():
        rows: list[list[float]] = [[], [], []]
        for sent, acked in zip(sends, acks, strict=True):
            split = split_step(kept[pid], begin, end, sent, acked)
            if split is not None:
                for row, value in zip(rows, split, strict=True):
                    row.append(value)
        print(f"    {label}:")
        for name, values in zip(parts, rows, strict=True):
            _row(f"  {name}", values)
