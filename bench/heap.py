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

import gc
import time

__all__ = ["settle_heap"]


def settle_heap() -> str:
    """Collect once, then freeze every object that exists; a line saying what it froze
    and how long the collection took (for the benchmark's output)."""
    started = time.perf_counter()
    gc.collect()
    gc.freeze()
    took_ms = (time.perf_counter() - started) * 1e3
    return f"(client heap: {gc.get_freeze_count():,} objects frozen, collected in {took_ms:.0f} ms)"
