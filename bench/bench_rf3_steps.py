"""RF 3 ack ALL, one message's round trip step by step, with each server's cost per message.

Three jet servers (``jet dev --servers 3``) run with ``JET_HOP_TRACE`` (each writes its
marks); this process sends 100-byte messages with an ack ALL ``Producer`` (linger 0), one
at a time (each waits for its ack) at :data:`RATE` msg/s. It prints:

- the per-step p50 / p99 of :mod:`bench.latency_rf3` (SDK send, the leader's read and
  append, its answer with the records to each follower, the follower's receipt, append and
  fsync, its next fetch (which reports its LEO and flushed offset), the leader's read of
  it, the HW, the acks, the Produce answer, the SDK's receipt; the leader's own fsync
  alongside);
- per server and per message: CPU (user + system, /proc), voluntary context switches (every
  thread: each is a sleep and a wake-up), and, from the marks, the requests read, the
  replica fetch tasks woken (``rf.wait``), the answers carrying only a HW, the follower's
  fetch rounds and where the fsyncs ran.

The machine's load is printed beside the figures (the times move with it; the counts
mostly do not). Run: ``python -m bench rf3_steps [--quick]`` (quick: 4 s, else 10 s).
"""

from __future__ import annotations

from bench import latency_rf3
from bench.bench_light3 import _switches
from bench.bench_sdk import _load, _process_cpu_s
from bench.stats import pct

RATE = 200
"""Messages per second, one at a time (each alone on its way)."""

Marks = latency_rf3.Marks


def _count(marks: Marks, start: int, end: int, names: tuple[str, str]) -> int:
    """Marks between ``start`` and ``end`` whose names start with ``names[0]`` and end
    with ``names[1]``."""
    return sum(
        sum(1 for t in times if start <= t <= end)
        for name, times in marks.items()
        if name.startswith(names[0]) and name.endswith(names[1])
    )


def run(quick: bool) -> None:
    """Measure and print (see the module docstring)."""
    seconds = 4.0 if quick else 10.0
    total = int(RATE * seconds)
    usage: list[dict[int, tuple[float, int]]] = []

    def snapshot(pids: list[int]) -> None:
        usage.append({p: (_process_cpu_s(p), _switches(p)) for p in pids})

    load_before = _load()
    by_pid, sends, acks = latency_rf3.traced(RATE, total, snapshot)
    load_after = _load()
    rows = latency_rf3._breakdown(list(by_pid.values()), sends, acks)
    print(
        f"RF 3, ack ALL, durability=flushed: {RATE} msg/s one at a time for {seconds:g} s, "
        f"100 B, linger 0 (load {load_before} -> {load_after})"
    )
    print(f"  ({len(rows['end to end'])} of {total} messages traced through every step)")
    print(f"    {'step':<52} {'p50 us':>9} {'p99 us':>9}")
    for row in (*latency_rf3.ROWS, "end to end"):
        values = rows.get(row, [])
        print(f"    {row:<52} {pct(values, 0.5):>9.0f} {pct(values, 0.99):>9.0f}")
    leader_pid = max(by_pid, key=lambda p: len(by_pid[p].get("req.produce", [])))
    start, end = sends[0], acks[-1]
    print("  per message (marks between the first send and the last ack; /proc around them):")
    for pid in sorted(by_pid, key=lambda p: p != leader_pid):
        marks = by_pid[pid]
        role = "leader  " if pid == leader_pid else "follower"
        cpu = (usage[1][pid][0] - usage[0][pid][0]) / total * 1e6 if len(usage) == 2 else 0.0
        switches = (usage[1][pid][1] - usage[0][pid][1]) / total if len(usage) == 2 else 0.0
        line = f"    {role} CPU {cpu:6.0f} us, switches {switches:5.1f}"
        if pid == leader_pid:
            counts = {
                "requests read": ("read", ""),
                "replica fetches": ("req.replica_fetch", ""),
                "their tasks woken": ("rf.wait", ""),
                "HW-only answers": ("rf.ans.", ".h"),
                "Produce tasks resumed": ("produce.resumed", ""),
                "fsyncs on the loop": ("loop_fsync.start", ""),
            }
        else:
            counts = {
                "fetch rounds": ("repl.send", ""),
                "with records": ("repl.fetched", ""),
                "fsyncs on the loop": ("loop_fsync.fetched", ""),
            }
        for label, names in counts.items():
            line += f", {label} {_count(marks, start, end, names) / total:.2f}"
        print(line)
