"""When the machine did not run a waiting thread on time: oversleeps of a 1 ms wait, per CPU.

A probe process, pinned to one CPU and (where allowed) at real-time priority, waits 1 ms
in ``epoll_wait`` over and over and records each wait that ended more than
:data:`STALL_MS` late: ``start_ns stop_ns`` lines (``perf_counter_ns``, CLOCK_MONOTONIC,
the clock of the jet hop marks) to its output file. A real-time thread that wakes late
was not run by that CPU: another real-time thread, interrupts, or the hypervisor not
running the virtual CPU (steal time). On the shared 2-core VM of 2026-11-30 a 1 ms wait
of such a probe, with no jet process running, overslept by 1.5-5.7 ms about every 100 ms
at the same phase of the clock on both CPUs (20-30 ms past each 100 ms; 26 ticks of
steal in ``/proc/stat`` in 10 s): the host's scheduling of the VM, which no process
inside can avoid. ``bench tail`` starts one per CPU around its measured span and counts
the outlying messages whose way overlaps such a stall.

Run: ``python -m bench.stall_probe OUT SECONDS CPU``.
"""

from __future__ import annotations

import contextlib
import os
import select
import sys
import time

WAIT_S = 0.001
STALL_MS = 0.5
"""A wait that ended this much later than asked is a stall."""
PRIORITY = 50
"""The probe's real-time priority: above a benchmark run at real-time priority 1 (``chrt
-f 1``), so that a stall is never the benchmark's own threads holding that CPU."""


def probe(out: str, seconds: float, cpu: int) -> None:
    """Wait 1 ms at a time for ``seconds`` on ``cpu``, writing each stall to ``out`` as it
    ends (``start_ns stop_ns``: from when the wait should have ended)."""
    with contextlib.suppress(OSError):
        os.sched_setaffinity(0, {cpu})
    with contextlib.suppress(OSError, AttributeError):  # not root: the normal class
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(PRIORITY))
    ep = select.epoll()
    late_ns = int((WAIT_S * 1e3 + STALL_MS) * 1e6)
    end = time.perf_counter_ns() + int(seconds * 1e9)
    with open(out, "w", encoding="ascii") as f:  # each stall written at once: may be killed
        while True:
            start = time.perf_counter_ns()
            if start > end:
                break
            ep.poll(WAIT_S)
            stop = time.perf_counter_ns()
            if stop - start > late_ns:
                f.write(f"{start + int(WAIT_S * 1e9)} {stop}\n")
                f.flush()


def load(out: str) -> list[tuple[int, int]]:
    """The stalls a probe wrote (empty if it wrote nothing)."""
    try:
        with open(out, encoding="ascii") as f:
            return [(int(a), int(b)) for a, b in (line.split() for line in f)]
    except FileNotFoundError:
        return []


if __name__ == "__main__":
    probe(sys.argv[1], float(sys.argv[2]), int(sys.argv[3]))
