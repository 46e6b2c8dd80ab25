"""Where a one-message fsync runs, in isolation: on the event loop or in a worker thread.

One uvloop loop, one log (a real ``Log`` in a temporary directory), RATE appends a
second of one 100 B record each, and after each the fsync that makes it durable, run one
of three ways, alternating in short rounds so that the machine's load falls on both alike:

- ``loop``: as :class:`~jetserver.broker.commit_soon.CommitSoon` on the loop: one loop
  turn (ready work first), then :meth:`Log.flush_unless_busy` on the loop;
- ``thread``: :meth:`FsyncRunner.sync_in_thread_then` (``[storage] fsync_on_loop =
  false``): :meth:`Log.begin_sync` on the loop, the fdatasync and :meth:`Log.end_sync` in
  a ``jet-sync`` thread (woken by its lock), the end heard in the loop's I/O phase
  (an eventfd, :mod:`jetserver.storage.loop_waker`);
- ``wait``: ``[storage] fsync_loop_wait_ms`` (:meth:`FsyncRunner.flush_waited`,
  storage/waited_sync.py): after the same turn as ``loop``'s, the fsync in a ``jet-sync``
  thread as ``thread``'s, the loop waiting for its end on a lock (the GIL released) up
  to :data:`WAIT_S`: the loop blocks as for ``loop``, but at most that long (a hung
  disk stops it for no longer), and no loop wake-up comes back.

Per way: the time from the append to the loop callback that has the fsync's end (p50,
p99, µs), this process's CPU per fsync (user + system, all threads) and its context
switches per fsync (voluntary + involuntary, /proc, all threads), and the load average.
It measures the hand-off alone: no sockets, no Produce, no consumer (``bench light``
with ``JET_LIGHT_FSYNC_SIDES=1`` measures the whole message).
Run: ``python -m bench fsync_handoff [--quick]`` (quick: 3 rounds of 1 s, else 6 of 2 s).
"""

from __future__ import annotations

import asyncio
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from bench.bench_sdk import _load
from bench.stats import pct
from jetserver.storage import Log
from jetserver.storage.fsync_runner import LATE, FsyncRunner

RATE = 500
"""fsyncs a second (one 100 B record appended before each)."""
BODY = (b"h" * 20, b"v" * 80)
"""One record's body (head, tail), about 100 B."""
WAIT_S = 0.02
"""``wait``: the longest the loop waits for the thread's fsync."""
WAYS = ("loop", "thread", "wait")


def _switches() -> int:
    """Context switches so far, voluntary + involuntary, of every thread of this process."""
    total = 0
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/status") as f:
                for line in f:
                    if line.startswith(("voluntary_ctxt_switches", "nonvoluntary_ctxt_switches")):
                        total += int(line.split()[1])
        except FileNotFoundError:
            continue
    return total


def _on_loop(log_: Log, loop: asyncio.AbstractEventLoop, done: Callable[[], None]) -> None:
    def fsync() -> None:
        log_.flush_unless_busy()
        done()

    loop.call_soon(loop.call_soon, fsync)  # (the probe turn, then the fsync)


def _ended(done: Callable[[], None]) -> Callable[[int, BaseException | None], None]:
    """A thread's fsync outcome handed to ``done`` (a failure raised: nothing fails here)."""

    def ended(_flushed: int, error: BaseException | None) -> None:
        if error is not None:
            raise error
        done()

    return ended


def _in_thread(
    runner: FsyncRunner, log_: Log, loop: asyncio.AbstractEventLoop, done: Callable[[], None]
) -> None:
    loop.call_soon(runner.sync_in_thread_then, log_, loop, _ended(done))


def _waiting(
    runner: FsyncRunner, log_: Log, loop: asyncio.AbstractEventLoop, done: Callable[[], None]
) -> None:
    ended = _ended(done)

    def fsync() -> None:
        if runner.flush_waited(log_, loop, ended) != LATE:
            done()

    loop.call_soon(loop.call_soon, fsync)  # (the probe turn, as the loop fsync's)


async def _round(
    way: str, log_: Log, runners: tuple[FsyncRunner, FsyncRunner], secs: float
) -> tuple[list[float], float, float]:
    loop = asyncio.get_running_loop()
    lat: list[float] = []
    n = int(RATE * secs)
    cpu0, sw0 = time.process_time(), _switches()
    for _ in range(n):
        ended = loop.create_future()
        start = time.perf_counter()

        def done(start: float = start, ended: asyncio.Future[None] = ended) -> None:
            lat.append((time.perf_counter() - start) * 1e6)
            ended.set_result(None)

        log_.append_one(BODY, time.time_ns(), 0)
        if way == "loop":
            _on_loop(log_, loop, done)
        elif way == "thread":
            _in_thread(runners[0], log_, loop, done)
        else:
            _waiting(runners[1], log_, loop, done)
        await ended
        await asyncio.sleep(max(0.0, 1 / RATE - (time.perf_counter() - start)))
    cpu = (time.process_time() - cpu0) / n * 1e6
    return lat, cpu, (_switches() - sw0) / n


async def _rounds(rounds: int, secs: float) -> None:
    with tempfile.TemporaryDirectory(prefix="jet-handoff-") as tmp:
        log_ = Log.open(Path(tmp) / "log")
        runners = (FsyncRunner(), FsyncRunner(loop_wait_s=WAIT_S))
        per: dict[str, list[tuple[float, float, float, float]]] = {}
        try:
            await _round("thread", log_, runners, 0.5)  # (the worker thread started)
            for r in range(rounds):
                for way in WAYS if r % 2 == 0 else WAYS[::-1]:
                    lat, cpu, switches = await _round(way, log_, runners, secs)
                    p50, p99 = pct(lat, 0.5), pct(lat, 0.99)
                    per.setdefault(way, []).append((p50, p99, cpu, switches))
                    print(
                        f"  r{r} {way:<6} append -> fsync end p50 {p50:7.0f} p99 {p99:7.0f} us;"
                        f" CPU {cpu:5.0f} us, {switches:.1f} context switches per fsync"
                        f" (load {_load()})",
                        flush=True,
                    )
        finally:
            log_.close()
    print(f"  medians over {rounds} rounds:")
    for way, values in per.items():
        p50, p99, cpu, switches = map(statistics.median, zip(*values, strict=True))
        print(
            f"    {way:<6} p50 {p50:.0f} p99 {p99:.0f} us, p99/p50 {p99 / p50:.1f};"
            f" CPU {cpu:.0f} us, {switches:.1f} context switches per fsync"
        )


def run(quick: bool) -> None:
    """Alternate the two ways in rounds (see the module docstring)."""
    import uvloop

    rounds, secs = (3, 1.0) if quick else (6, 2.0)
    print(
        f"one 100 B append and its fsync, {RATE}/s, {rounds} rounds of {secs:g} s per way"
        f" (load {_load()})"
    )
    uvloop.run(_rounds(rounds, secs))
