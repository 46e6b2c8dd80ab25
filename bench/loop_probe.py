"""What holds an asyncio event loop: the CPU time of each loop callback (bench only).

:func:`install` wraps ``asyncio.events.Handle._run`` (every callback and task step of an
asyncio loop, not uvloop's) to measure the thread CPU time of each one
(``time.thread_time_ns``), so a long turn is told from a preempted one: a callback that
takes 3 ms of wall time but 0.1 ms of CPU was waiting for a CPU (or in a blocking system
call), one that takes 3 ms of CPU is work this process did in one go on its loop. Kept:
a histogram of CPU per callback and every callback over :data:`KEEP_US` with its wall
start, wall and CPU time and what it was (a task's coroutine, or the callback's name).
:func:`report` returns them; :func:`dump_at_exit` writes them as JSON at exit.
"""

from __future__ import annotations

import asyncio
import atexit
import os
import time
from typing import Any

import orjson

KEEP_US = 500
"""Callbacks of at least this many microseconds of CPU are kept one by one."""
BUCKETS_US = (50, 100, 200, 500, 1_000, 2_000, 5_000, 10_000, 1 << 62)
"""Upper bounds of the histogram of CPU per callback."""

_hist = [0] * len(BUCKETS_US)
_kept: list[tuple[int, int, int, str]] = []


def _what(handle: asyncio.Handle) -> str:
    callback: Any = handle._callback  # type: ignore[attr-defined]
    owner = getattr(callback, "__self__", None)
    if isinstance(owner, asyncio.Task):
        coro: Any = owner.get_coro()
        frame = getattr(coro, "cr_frame", None)
        where = (
            f" at {frame.f_code.co_filename.rsplit('/', 1)[-1]}:{frame.f_lineno}" if frame else ""
        )
        return f"task {getattr(coro, '__qualname__', coro)!s}{where}"
    return str(getattr(callback, "__qualname__", callback))


def install() -> None:
    """Measure every callback of the asyncio loops of this process from now on."""
    original = asyncio.events.Handle._run

    def _run(self: asyncio.Handle) -> None:
        wall = time.perf_counter_ns()
        cpu = time.thread_time_ns()
        what = _what(self) if len(_kept) < 100_000 else ""
        original(self)
        used = time.thread_time_ns() - cpu
        us = used // 1000
        i = 0
        while us > BUCKETS_US[i]:
            i += 1
        _hist[i] += 1
        if us >= KEEP_US and what:
            _kept.append((wall, time.perf_counter_ns() - wall, used, what))

    asyncio.events.Handle._run = _run  # type: ignore[method-assign]


def report() -> dict[str, Any]:
    """The histogram (``{bound_us: count}``) and the kept callbacks (wall start ns, wall
    ns, CPU ns, what)."""
    return {"hist": dict(zip(map(str, BUCKETS_US), _hist, strict=True)), "kept": _kept}


def dump_at_exit(path: str) -> None:
    """Write :func:`report` to ``<path>.<pid>`` when the process exits."""

    def _dump() -> None:
        with open(f"{path}.{os.getpid()}", "wb") as f:
            f.write(orjson.dumps(report()))

    atexit.register(_dump)
