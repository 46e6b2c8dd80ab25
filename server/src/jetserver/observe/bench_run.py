"""The engine of ``jet bench``: publishers and subscribers (or a consumer group) on one stream,
in this process, each with its own :class:`jetsdk.Client` (its own connections).

- **Publishers** share ``msgs`` between them and send with :meth:`Producer.send_soon`; the
  *publish latency* of a message is the time from ``send_soon`` to its ack (the producer's
  done callback). With ``--rate`` the publishers are paced to that total rate.
- **Subscribers** each read every partition from the end the stream had before the run
  (``new-only``) and stop once they saw every message sent (fan-out, like ``nats bench``). In
  **group mode** they join one consumer group instead and share the partitions; the run
  ends once the group saw every message (counted once per (partition, offset), since a
  rebalance may deliver a record twice). The group starts at the partitions' high
  watermarks (simple commits before any member joins).
- Every message carries the ``time.monotonic_ns()`` of its send and its identity (in the
  value, or a header below 18 bytes: :mod:`jetserver.observe.bench_check`), so subscribers
  measure the *end-to-end latency* (send to consume) on the same clock whatever the size.
  **Latency mode** sends at a paced rate with linger 0 so that it measures latency at a
  fixed load, not queueing behind a full window.
- Publishers are idempotent by default (``--no-idempotent``: not), so a retry after a lost
  connection or a leader change does not store a message twice. After the run the
  **check** reads back what the servers hold from where each partition ended before the
  run and counts duplicates and missing messages (acknowledged ones missing are losses).

Counts are bucketed every :data:`STEP_S` seconds for the throughput-over-time plot.
"""

from __future__ import annotations

import functools
import time
import uuid
from collections.abc import Callable
from typing import Any

import anyio
import attrs

from jetsdk import (
    AckPolicy,
    Client,
    Consumer,
    Producer,
    SendHandle,
    StreamNotFound,
    StreamPartition,
)
from jetsdk.consumer.group_admin import commit_offsets
from jetsdk.consumer.positions import StartAt
from jetserver.observe.bench_check import (
    Check,
    MessageId,
    check_held,
    identity,
    payload_maker,
    read_back,
)

STEP_S = 0.1
"""Width of the throughput-over-time buckets, seconds."""
_FETCH_WAIT_S = 0.25
"""Longest a subscriber waits in one fetch before checking whether the run is over."""


@attrs.frozen
class BenchConfig:
    """What one ``jet bench`` run does."""

    stream: str
    publishers: int = 1
    subscribers: int = 0
    msgs: int = 100_000
    size: int = 128
    ack: AckPolicy = AckPolicy.LEADER
    rate: float = 0.0
    """Total messages per second over all publishers; 0: as fast as possible."""
    group: str | None = None
    """Consumer-group mode: the subscribers join this group (``""``: a fresh name)."""
    latency: bool = False
    """Latency mode: linger 0 (each message sent as soon as the partition's sender is free),
    paced at ``rate``."""
    partitions: int = 1
    replicas: int = 1
    timeout: float = 120.0
    """Bound on the whole run, seconds."""
    max_pending: int = 4000
    """Unacknowledged messages per publisher (the producer's window)."""
    idempotent: bool = True
    """Idempotent producers (a retried batch is not stored twice)."""
    check: bool = True
    """Read back what the servers hold at the end (:class:`Check`)."""


@attrs.define
class SideStats:
    """What one publisher or subscriber did."""

    name: str
    count: int = 0
    bytes: int = 0
    errors: int = 0
    first_ns: int | None = None
    last_ns: int | None = None
    latencies_ns: list[int] = attrs.field(factory=list)
    buckets: dict[int, int] = attrs.field(factory=dict)

    def add(self, now_ns: int, start_ns: int, size: int, latency_ns: int | None) -> None:
        """Count one message done at ``now_ns``."""
        self.count += 1
        self.bytes += size
        if self.first_ns is None:
            self.first_ns = now_ns
        self.last_ns = now_ns
        if latency_ns is not None:
            self.latencies_ns.append(latency_ns)
        step = int((now_ns - start_ns) / (STEP_S * 1e9))
        self.buckets[step] = self.buckets.get(step, 0) + 1


@attrs.define
class BenchResult:
    """Everything measured by one run."""

    config: BenchConfig
    start_ns: int
    end_ns: int
    publishers: list[SideStats]
    subscribers: list[SideStats]
    group: str | None
    expected_per_subscriber: int
    unique_received: int
    """Group mode: distinct (partition, offset) seen; else the least a subscriber saw."""
    complete: bool
    """Every message was acknowledged (or sent, ack none) and every subscriber got all."""
    check: Check | None = None
    """What the servers hold of the run (None: not checked)."""


class _Run:
    def __init__(
        self,
        cfg: BenchConfig,
        client_factory: Callable[[], Client],
        on_progress: Callable[[int], None],
    ) -> None:
        self.cfg = cfg
        self.client_factory = client_factory
        self.on_progress = on_progress
        self.start_ns = 0
        self.pub_stats = [SideStats(f"pub #{i + 1}") for i in range(cfg.publishers)]
        self.sub_stats = [SideStats(f"sub #{i + 1}") for i in range(cfg.subscribers)]
        self.seen: set[tuple[int, int]] = set()
        self.subs_done = anyio.Event()
        self.ready = 0
        self.all_ready = anyio.Event()
        self.assigned: dict[int, set[int]] = {i: set() for i in range(cfg.subscribers)}
        self.group_name: str | None = None
        self.run_tag = uuid.uuid4().int & 0xFFFFFFFF
        self.sent: dict[int, int] = {}
        self.acked: set[MessageId] = set()
        if cfg.group is not None:
            self.group_name = cfg.group or f"bench-{uuid.uuid4().hex[:8]}"

    def _check_subs_done(self) -> None:
        total = self.cfg.msgs
        if self.group_name is not None:
            if len(self.seen) >= total:
                self.subs_done.set()
        elif all(s.count >= total for s in self.sub_stats):
            self.subs_done.set()

    def _mark_ready(self) -> None:
        self.ready += 1
        if self.ready >= self.cfg.subscribers:
            self.all_ready.set()

    def _check_group_ready(self) -> None:
        covered = set().union(*self.assigned.values())
        if len(covered) >= self.cfg.partitions and not self.all_ready.is_set():
            self.all_ready.set()

    async def subscriber(self, index: int) -> None:
        stats = self.sub_stats[index]
        async with self.client_factory() as client:
            if self.group_name is None:
                consumer = Consumer(client, self.cfg.stream, start=StartAt.new_only())
            else:

                def assigned(parts: Any) -> None:
                    self.assigned[index].update(p.partition for p in parts)
                    self._check_group_ready()

                def revoked(parts: Any) -> None:
                    self.assigned[index].difference_update(p.partition for p in parts)

                consumer = Consumer(
                    client,
                    self.cfg.stream,
                    group=self.group_name,
                    on_assigned=assigned,
                    on_revoked=revoked,
                    on_lost=revoked,
                )
            async with consumer:
                if self.group_name is None:
                    self._mark_ready()
                while not self.subs_done.is_set():
                    batch = await consumer.fetch(max_records=5000, timeout=_FETCH_WAIT_S)
                    now = time.monotonic_ns()
                    fresh = 0
                    for msg in batch:
                        value = msg.value
                        ident = identity(value, msg.headers)
                        stamp = ident.stamp_ns if ident is not None else None
                        if self.group_name is not None:
                            key = (msg.partition, msg.offset)
                            if key in self.seen:
                                continue
                            self.seen.add(key)
                        fresh += 1
                        stats.add(
                            now, self.start_ns, len(value), None if stamp is None else now - stamp
                        )
                    if fresh:
                        self.on_progress(fresh)
                        self._check_subs_done()

    async def publisher(self, index: int, count: int) -> None:
        stats = self.pub_stats[index]
        payload = payload_maker(self.cfg.size, self.run_tag, index)
        per_pub_rate = self.cfg.rate / self.cfg.publishers if self.cfg.rate > 0 else 0.0
        linger = 0.0 if self.cfg.latency else 0.005
        pending = self.cfg.max_pending
        size = self.cfg.size

        def done(handle: SendHandle, sent_ns: int, seq: int) -> None:
            now = time.monotonic_ns()
            if handle.exception() is not None:
                stats.errors += 1
                return
            self.acked.add((index, seq))
            stats.add(now, self.start_ns, size, now - sent_ns)
            self.on_progress(1)

        async with (
            self.client_factory() as client,
            Producer(
                client,
                self.cfg.stream,
                ack=self.cfg.ack,
                linger=linger,
                max_pending=pending,
                idempotent=self.cfg.idempotent,
            ) as producer,
        ):
            began = time.monotonic()
            for i in range(count):
                if per_pub_rate > 0:
                    delay = began + i / per_pub_rate - time.monotonic()
                    if delay > 0:
                        await anyio.sleep(delay)
                sent = time.monotonic_ns()
                value, headers = payload(i)
                handle = await producer.send_soon(value, headers=headers)
                self.sent[index] = i + 1
                handle.add_done_callback(functools.partial(done, sent_ns=sent, seq=i))
            await producer.flush()


def split(total: int, parts: int) -> list[int]:
    """``total`` shared as evenly as possible between ``parts`` (the first get the extra)."""
    base, extra = divmod(total, parts)
    return [base + (1 if i < extra else 0) for i in range(parts)]


async def run_bench(
    cfg: BenchConfig,
    client_factory: Callable[[], Client],
    on_progress: Callable[[int], None] = lambda n: None,
) -> BenchResult:
    """Run one benchmark (creating the stream when it is missing) and return what it measured.

    Raises:
        JetError: the stream could not be created or reached.
        TimeoutError: the subscribers were not ready within ``cfg.timeout``.
    """
    run = _Run(cfg, client_factory, on_progress)
    async with client_factory() as admin:
        try:
            info = await admin.describe_stream(cfg.stream)
        except StreamNotFound:
            info = await admin.create_stream(
                cfg.stream, partitions=cfg.partitions, replication_factor=cfg.replicas
            )
        cfg = attrs.evolve(cfg, partitions=info.partition_count, replicas=info.replication_factor)
        run.cfg = cfg
        ends = {}
        for p in range(info.partition_count):
            ends[p] = (await admin.list_offsets(cfg.stream, p, "latest")).hw
        if run.group_name is not None:
            starts = {StreamPartition(cfg.stream, p): hw for p, hw in ends.items()}
            await commit_offsets(admin, run.group_name, starts)
    complete = True
    with anyio.move_on_after(cfg.timeout) as scope:
        async with anyio.create_task_group() as tg:
            for i in range(cfg.subscribers):
                tg.start_soon(run.subscriber, i)
            if cfg.subscribers:
                await run.all_ready.wait()
            run.start_ns = time.monotonic_ns()
            async with anyio.create_task_group() as pubs:
                for i, n in enumerate(split(cfg.msgs, cfg.publishers)):
                    pubs.start_soon(run.publisher, i, n)
            if cfg.subscribers == 0:
                run.subs_done.set()
    if scope.cancelled_caught:
        complete = False
    end_ns = time.monotonic_ns()
    if run.start_ns == 0:
        run.start_ns = end_ns
    acked = sum(s.count for s in run.pub_stats)
    unique = (
        len(run.seen)
        if run.group_name is not None
        else min((s.count for s in run.sub_stats), default=0)
    )
    if acked < cfg.msgs or (cfg.subscribers and unique < cfg.msgs):
        complete = False
    check = None
    if cfg.check:
        async with client_factory() as admin:
            held = await read_back(admin, cfg.stream, ends, run.run_tag)
        check = check_held(held, run.sent, run.acked)
    return BenchResult(
        config=cfg,
        start_ns=run.start_ns,
        end_ns=end_ns,
        publishers=run.pub_stats,
        subscribers=run.sub_stats,
        group=run.group_name,
        expected_per_subscriber=cfg.msgs if run.group_name is None else 0,
        unique_received=unique,
        complete=complete,
        check=check,
    )
