"""One task for the periodic work of every partition of a server: HW checkpoints and
maintenance (retention, compaction).

Each partition ran its own loop before, waking every ``hw_checkpoint_interval_s`` (5 s):
at 10,000 idle partitions, 2,000 timer wake-ups a second, about a tenth of a core on the
2-core dev VM (`python -m bench scale`, 2026-11-26: idle CPU 9.8 %). One loop over all of
them does the same work with one wake-up per interval, and checkpoints the moved HWs 64
per worker-thread call.

Task safety: event loop; the checkpoints themselves run in a worker thread (the storage
engine allows them beside the writer).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import Any

import anyio

from jetserver.broker.partition import PartitionReplica
from jetserver.broker.running import RunningPartition
from jetserver.config.server import StorageConfig
from jetserver.infra import hops
from jetserver.logs import fields

log = logging.getLogger(__name__)

CHECKPOINT_CHUNK = 64
"""HW checkpoints per worker-thread call (the chunks run in parallel threads)."""

__all__ = ["run_housekeeping"]


async def run_housekeeping(running: Mapping[Any, RunningPartition], storage: StorageConfig) -> None:
    """Every ``hw_checkpoint_interval_s``: checkpoint the HW of each open replica in
    ``running`` (the server's partitions, read anew each round) that moved; every
    ``maintenance_interval_s`` per replica (from its first round): run its maintenance.
    Runs until cancelled."""
    due: dict[int, float] = {}  # id(replica) -> when its maintenance is next due
    while True:
        await anyio.sleep(storage.hw_checkpoint_interval_s)
        if hops.ENABLED:
            hops.mark("housekeeping.start")
        # Not one that is stopping: its log closes in a worker thread before it reads as
        # closed, and its stop checkpoints the HW itself.
        live = [r.replica for r in list(running.values()) if not r.replica.life.ending]
        moved = [(r, r.log.high_watermark) for r in live if r.hw_moved_since_checkpoint]
        if moved:
            # Worker threads in parallel (each checkpoint waits for its fsyncs), a chunk each.
            async with anyio.create_task_group() as tg:
                for i in range(0, len(moved), CHECKPOINT_CHUNK):
                    tg.start_soon(_checkpoint_chunk, moved[i : i + CHECKPOINT_CHUNK])
        now = time.monotonic()
        seen = {id(r) for r in live}
        for key in [k for k in due if k not in seen]:
            del due[key]
        for replica in live:
            at = due.setdefault(id(replica), now + storage.maintenance_interval_s)
            if now >= at and not replica.life.ending:
                due[id(replica)] = now + storage.maintenance_interval_s
                await replica.run_maintenance()
        if hops.ENABLED:
            hops.mark("housekeeping.end")


async def _checkpoint_chunk(moved: list[tuple[PartitionReplica, int]]) -> None:
    failed = await anyio.to_thread.run_sync(_checkpoint_all, [r for r, _hw in moved])
    for (replica, hw), error in zip(moved, failed, strict=True):
        if error is None:
            replica.checkpointed(hw)
        elif not replica.life.ending:  # a stop that began meanwhile checkpoints it itself
            log.warning(
                "hw checkpoint failed",
                extra=fields(stream=replica.stream, partition=replica.partition, error=error),
            )


def _checkpoint_all(replicas: list[PartitionReplica]) -> list[str | None]:
    """Checkpoint each replica's HW (in a worker thread); the error text of each, or None."""
    out: list[str | None] = []
    for replica in replicas:
        if replica.closed:
            out.append(None)  # its stop checkpoints it
            continue
        try:
            replica.log.checkpoint_high_watermark()
        except Exception as exc:
            out.append(repr(exc))
        else:
            out.append(None)
    return out
