"""Opt-in timestamps of the hops a message takes through the server (``bench latency``).

With the environment variable ``JET_HOP_TRACE=<path>`` set, :func:`mark` records
``(name, time.perf_counter_ns())`` in memory and the process writes them at exit to
``<path>.<pid>``, one ``name ns`` line each. ``perf_counter_ns`` is CLOCK_MONOTONIC on
Linux, the same clock in every process of the machine, so the benchmark lines these marks
up with its own client-side ones. Without the variable, call sites cost one check of
:data:`ENABLED` and nothing is recorded.

Marks (in the order a message meets them): ``req.produce`` (a Produce request decoded),
``published`` (its envelopes written to NATS), ``sink`` (the leader's subscription took
it), ``append`` (appended to the log), ``acked`` (the request's acks all arrived),
``resp.produce`` (the Produce response written), ``fsync.start`` / ``fsync.end`` (the
group commit's fsync, on the loop or in a worker thread), ``hw`` (the HW moved),
``fetch.woken`` (a parked Fetch woke up, or a Fetch came after the HW had moved past its
offset), ``resp.fetch`` (its response written), ``resp.replica_fetch`` (an answer to a
follower's replica fetch written); on a follower, ``repl.fetched`` (records came from the
leader) and ``repl.flushed`` (appended and fsynced), ``repl.ask`` (the fetcher asks again,
reporting them), ``repl.send`` / ``repl.recv`` (the fetch session wrote a ReplicaFetch /
got its answer); on the leader, ``rf.ask.<follower>`` (a replica fetch from that follower
read, before its progress is recorded), ``rf.wait`` (a parked replica fetch's task woke
up, with news or not), ``rf.woken`` (it woke up with news) and
``rf.ans.<follower>.r`` / ``.h`` (its answer, with records / with only the HW, built);
in a cluster, ``meta.state`` (a new metadata state reached the event loop),
``reconcile.woken.<n>`` (a reconcile handed ``n`` replicas a new assignment),
``apply.start`` / ``apply.end.<role>`` (a replica's assignment applied, its role then);
``gc.start.<generation>`` /
``gc.stop.<generation>``, a garbage collection (``gc.callbacks``), to tell its pauses from
the others in a message's time; ``loop_fsync.start`` / ``.end``, an fsync on the event loop
(``FsyncRunner.flush_here``: nothing else runs on the loop meanwhile), and
``behind_fsync.start`` / ``.end``, one of a ``written`` partition's fsyncs in its worker
thread (``FlushBehind``).

With ``JET_HOP_USAGE=1`` as well, each mark also records the calling thread's native id,
its CPU time and its time spent runnable but waiting for a CPU so far (ns, the thread's
``/proc/thread-self/schedstat``, one ``pread`` per mark, about 8 us): between two marks of
one thread the wall time then splits into CPU, waiting for a CPU (the machine's other
processes) and the rest (sleeping: idle, a lock, the disk), which tells a pause of this
process's own from one of the machine.
"""

from __future__ import annotations

import array
import atexit
import gc
import os
import threading
import time

_PATH = os.environ.get("JET_HOP_TRACE", "")
ENABLED = bool(_PATH)
"""True if hops are recorded (check it before calling :func:`mark` on a hot path)."""
MAX_MARKS = 2_000_000
"""Marks kept at most (a bound on memory in a long run)."""

USAGE = ENABLED and os.environ.get("JET_HOP_USAGE", "") == "1"
"""True if each mark also records its thread's CPU time and its wait for a CPU."""

# Names and times apart, not as tuples: a tuple per mark would be a container the cyclic
# collector counts (some 20 per message), and the trace would make the collections it marks.
_names: list[str] = []
_times = array.array("q")
_threads = array.array("q")
_usage: list[bytes] = []
_schedstat: dict[int, int] = {}  # native thread id -> open fd of its schedstat


def mark(name: str) -> None:
    """Record that a message reached hop ``name`` now."""
    if len(_names) < MAX_MARKS:
        _names.append(name)
        _times.append(time.perf_counter_ns())
        if USAGE:
            tid = threading.get_native_id()
            _threads.append(tid)
            _usage.append(_thread_schedstat(tid))


def _thread_schedstat(tid: int) -> bytes:
    """The calling thread's schedstat line (CPU ns, waiting-for-a-CPU ns, time slices)."""
    fd = _schedstat.get(tid)
    if fd is not None:
        try:
            return os.pread(fd, 64, 0)
        except OSError:  # a thread of that id ended: this one is new
            os.close(fd)
    fd = _schedstat[tid] = os.open("/proc/thread-self/schedstat", os.O_RDONLY)
    return os.pread(fd, 64, 0)


def _dump() -> None:
    with open(f"{_PATH}.{os.getpid()}", "w", encoding="ascii") as f:
        if USAGE:
            f.writelines(
                f"{name} {ns} {tid} {' '.join(stat.decode().split()[:2])}\n"
                for name, ns, tid, stat in zip(_names, _times, _threads, _usage, strict=True)
            )
        else:
            f.writelines(f"{name} {ns}\n" for name, ns in zip(_names, _times, strict=True))


def _gc_mark(phase: str, info: dict[str, int]) -> None:
    mark(f"gc.{phase}.{info.get('generation', -1)}")


if ENABLED:
    atexit.register(_dump)
    gc.callbacks.append(_gc_mark)
