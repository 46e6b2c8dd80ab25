"""Opening many partitions at once (a start, a new stream, a reconcile, a background turn).

Task safety: the server's event loop.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import anyio

from jetserver.broker.gc_pause import collector_paused
from jetserver.broker.running import RunningPartition
from jetserver.broker.stream_files import OpenJob, OpenJobs, open_partition_logs
from jetserver.errors import ApiError
from jetserver.infra.resources import FILES_PER_PARTITION, check_room
from jetserver.metadata.model import PartitionAssignment, StreamMeta
from jetserver.replication.producers import ProducerTable
from jetserver.storage import Log

START_OPEN_CONCURRENCY = 1
"""Worker-thread calls opening (recovering) partitions at once: GIL-bound Python, so one
thread opens while the event loop starts what it opened. At 10,000 partitions on 2 cores,
4 threads and the loop handed the GIL back and forth around every file call: 5-6 s of
system CPU and 11.4-12.6 s restarts against 1.6-1.8 s and 7.9-9.4 s with 1 (README)."""
START_OPEN_BATCH = 32
"""Partitions one worker-thread call opens, one after the other (a hand-off to a worker
thread and back per partition cost about a third of a restart's event-loop time)."""

Wanted = tuple[StreamMeta, PartitionAssignment]
Start = Callable[[StreamMeta, PartitionAssignment, Log, ProducerTable], Awaitable[RunningPartition]]
Then = Callable[[RunningPartition, PartitionAssignment], Awaitable[None]]
Failed = Callable[[StreamMeta, PartitionAssignment, Exception], None]


async def open_many(
    wanted: list[Wanted],
    make_jobs: OpenJobs,
    start: Start,
    then: Then,
    failed: Failed,
    held: int = 0,
) -> int:
    """Open (recover) the logs of ``wanted`` partitions START_OPEN_BATCH per worker call,
    START_OPEN_CONCURRENCY calls at once; ``start`` the replica of each opened log, then,
    once the batch's replicas are started, ``then`` each; ``failed`` is told of each that
    cannot open. ``held``: the partitions the server holds with these (the collector is
    paused, then what exists frozen, for many of either: see gc_pause). Returns how many
    opened."""
    limiter = anyio.CapacityLimiter(START_OPEN_CONCURRENCY)
    counts: list[int] = []

    async def open_batch(batch: list[Wanted]) -> None:
        jobs: list[tuple[StreamMeta, PartitionAssignment, OpenJob]] = []
        for meta, a in batch:
            try:
                check_room(FILES_PER_PARTITION, f"partition {meta.name}/{a.partition}")
            except ApiError as exc:
                failed(meta, a, exc)
                continue
            jobs.append((meta, a, make_jobs.job(meta, a)))
        results = await anyio.to_thread.run_sync(
            open_partition_logs, [j for _m, _a, j in jobs], limiter=limiter
        )
        started: list[tuple[RunningPartition, PartitionAssignment]] = []
        for (meta, a, _job), result in zip(jobs, results, strict=True):
            if isinstance(result, Exception):
                failed(meta, a, result)
                continue
            started.append((await start(meta, a, *result), a))
        # Subscribed one after the other without yielding: the batch's SUBs go out in
        # one write (one per partition was a quarter of a restart's event-loop time).
        for running, a in started:
            await then(running, a)
        counts.append(len(started))

    with collector_paused(len(wanted), held):  # thousands at a start: see gc_pause
        async with anyio.create_task_group() as tg:
            for i in range(0, len(wanted), START_OPEN_BATCH):
                tg.start_soon(open_batch, wanted[i : i + START_OPEN_BATCH])
    return sum(counts)
