"""The measuring process's own heap, kept out of the latency it measures.

A benchmark's client process holds far more than the SDK: the test kit that starts the
servers (``jetserver.testing``), nats-py for the JetStream side, the benchmark modules,
and what earlier parts left (``bench sdk``'s throughput parts). CPython's full collection
walks every tracked object, and the cyclic collector starts one whenever the objects that
survived young collections since the last grow by a quarter of those that survived it:
under ``bench sdk``'s throughput parts, 32 full collections in one ``--quick`` run. An
SDK and anyio alone are some 9,000 objects; such a bench process some 38,000 after
imports, 45,000-65,000 at its full collections, each 32-60 ms of the client thread's CPU
at load 35-40 (``gc.callbacks``, ``thread_time``; docs/latency.md, 2026-11-30 session 24,
helper sdklat), in three of six 5,000 msg/s rounds of (c). That is the harness's heap,
not the SDK's per-message cost, so before the latency rounds :func:`settle_heap` collects
once and freezes what exists (``gc.freeze``: later collections skip it), as ``jet server``
does after its start-up (``jetserver.infra.runtime.tune_gc``) and as a latency-sensitive
client application would; the SDK's own garbage is collected as before.
"""

from __future__ import annotations

import contextlib
import gc
import time
from collections.abc import Iterator

__all__ = ["FullCollections", "full_collections", "settle_heap"]


def settle_heap() -> str:
    """Collect once, then freeze every object that exists; a line saying what it froze
    and how long the collection took (for the benchmark's output)."""
    started = time.perf_counter()
    gc.collect()
    gc.freeze()
    took_ms = (time.perf_counter() - started) * 1e3
    return f"(client heap: {gc.get_freeze_count():,} objects frozen, collected in {took_ms:.0f} ms)"


class FullCollections:
    """The full (generation 2) collections of this process while :func:`full_collections`
    ran: how many, and the CPU of the thread that ran them (ms)."""

    def __init__(self) -> None:
        self.count = 0
        self.cpu_ms = 0.0
        self._started = 0

    def __call__(self, phase: str, info: dict[str, int]) -> None:
        if info.get("generation") != 2:
            return
        if phase == "start":
            self._started = time.thread_time_ns()
        else:
            self.count += 1
            self.cpu_ms += (time.thread_time_ns() - self._started) / 1e6

    def __str__(self) -> str:
        return f"{self.count} ({self.cpu_ms:.0f} ms CPU)" if self.count else "0"


@contextlib.contextmanager
def full_collections() -> Iterator[FullCollections]:
    """Count this process's full collections while the block runs (``gc.callbacks``)."""
    seen = FullCollections()
    gc.callbacks.append(seen)
    try:
        yield seen
    finally:
        gc.callbacks.remove(seen)
