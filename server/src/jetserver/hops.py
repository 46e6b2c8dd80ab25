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
the others in a message's time.
"""

from __future__ import annotations

import atexit
import gc
import os
import time

_PATH = os.environ.get("JET_HOP_TRACE", "")
ENABLED = bool(_PATH)
"""True if hops are recorded (check it before calling :func:`mark` on a hot path)."""
MAX_MARKS = 2_000_000
"""Marks kept at most (a bound on memory in a long run)."""

_marks: list[tuple[str, int]] = []


def mark(name: str) -> None:
    """Record that a message reached hop ``name`` now."""
    if len(_marks) < MAX_MARKS:
        _marks.append((name, time.perf_counter_ns()))


def _dump() -> None:
    with open(f"{_PATH}.{os.getpid()}", "w", encoding="ascii") as f:
        f.writelines(f"{name} {ns}\n" for name, ns in _marks)


def _gc_mark(phase: str, info: dict[str, int]) -> None:
    mark(f"gc.{phase}.{info.get('generation', -1)}")


if ENABLED:
    atexit.register(_dump)
    gc.callbacks.append(_gc_mark)
