"""The shared shape of a fault test: a stream on a running cluster, drivers in the
background, and the final verification with every checker.

    async with Scenario.open(cluster, "orders", partitions=3, rf=3) as sc:
        sc.start_producer(count=20_000, time_limit_s=60)
        await sc.producer.wait_acked(1000, 20)
        ... inject faults ...
        await sc.verify()   # stops the drivers (bounded), then: acked ⊆ stored, exactly
                            # once, order, HW monotonic, consumer, replica logs identical
"""

from __future__ import annotations

import os
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
import anyio.abc
import attrs

from cluster.checkers import (
    Stored,
    assert_clean,
    check_acked_stored,
    check_consumed,
    check_exactly_once,
    check_hw_monotonic,
    check_one_leader_per_epoch,
    check_order,
    check_replicas_identical,
)
from cluster.harness import Cluster, WaitTimeout, wait_until_async
from cluster.views import read_through, replica_logs, wait_caught_up, wait_leader
from cluster.workload import ConsumerDriver, HwMonitor, ProducerDriver, client, read_committed
from jetsdk import Client
from jetsdk.metadata import PartitionInfo
from support.fault_report import longest_gap, write_report

LEADER_TIMEOUT_S = 30.0
MEMBER_READ_S = 10.0
"""How long an ISR member's NOT_LEADER refusal is asked again before it is reported."""
MEMBER_READ_RETRY_S = 0.1
"""Bound on a partition getting a (new) leader."""
CATCH_UP_TIMEOUT_S = 30.0
"""Bound on every replica catching up at the end."""
DRAIN_TIMEOUT_S = 40.0
"""Bound on the drivers finishing after the stop signal."""
BACKGROUND_LIMIT_S = 150.0
"""Hard bound on any background driver."""
BALLAST_ENV = "JET_FAULT_BALLAST_PARTITIONS"
"""If set to N > 0, each scenario first creates N idle replicated partitions beside its
stream (streams ``ballast-0``, ``ballast-1``, ... of :data:`BALLAST_PER_STREAM`; RF 3, or
the cluster's size if smaller), and at the end checks that each with a live ISR member
leads again on a live server: the faults then also move hundreds of leaderships at once
(``nox -s faults -- --partitions 1000``)."""
BALLAST_PER_STREAM = 100
"""Partitions of one ballast stream."""
REQUEST_BOUND_S = 10.0
"""Timeout of the ballast checks' metadata requests."""
BALLAST_TIMEOUT_S = 120.0
"""Bound on creating the ballast, and on its partitions leading again at the end."""


def ballast_partitions() -> int:
    """The ballast partitions asked for in :data:`BALLAST_ENV` (0: none)."""
    return max(int(os.environ.get(BALLAST_ENV, "0") or 0), 0)


async def create_ballast(cluster: Cluster, partitions: int) -> list[str]:
    """Create the ballast streams of ``partitions`` partitions; wait (bounded) until each
    partition has a leader. Returns the streams' names."""
    rf = min(3, len(cluster.servers))
    names = []
    async with Client(cluster.addresses, request_timeout=BALLAST_TIMEOUT_S) as jet:

        async def led() -> bool:
            return not await ballast_problems(cluster, jet, names, live_only=False)

        with anyio.fail_after(BALLAST_TIMEOUT_S):
            for i in range(0, partitions, BALLAST_PER_STREAM):
                name = f"ballast-{i // BALLAST_PER_STREAM}"
                count = min(BALLAST_PER_STREAM, partitions - i)
                await jet.create_stream(name, partitions=count, replication_factor=rf)
                names.append(name)
        await wait_until_async(led, BALLAST_TIMEOUT_S, "every ballast partition leads")
    return names


async def ballast_problems(
    cluster: Cluster, jet: Client, names: list[str], *, live_only: bool = True
) -> list[str]:
    """Ballast partitions without a leader (``live_only``: without a leader on a live
    server although a live server is in their ISR)."""
    live = {s.server_id for s in cluster.servers if s.alive}
    meta = await jet.metadata(refresh=True)
    out = []
    for name in names:
        info = meta.streams.get(name)
        if info is None:
            out.append(f"{name}: missing from the metadata")
            continue
        for p in info.partitions:
            leaderless = p.leader is None or (live_only and p.leader not in live)
            if leaderless and (not live_only or live & set(p.isr)):
                out.append(f"{name}/{p.partition}: leader {p.leader}, ISR {p.isr}")
    return out


@attrs.define(eq=False)
class Scenario:
    """A stream under test with its producer, consumer and HW monitor."""

    cluster: Cluster
    """The cluster."""
    jet: Client
    """The drivers' SDK client."""
    stream: str
    """The stream."""
    partitions: int
    """Its partition count."""
    tg: anyio.abc.TaskGroup
    """Where the drivers run."""
    producer: ProducerDriver
    """The acked producer."""
    consumer: ConsumerDriver
    """The consumer (started with the scenario)."""
    monitor: HwMonitor
    """The HW monitor (started with the scenario)."""
    stop: anyio.Event = attrs.field(factory=anyio.Event)
    """Set to stop the consumer and the monitor."""
    stop_producer: anyio.Event = attrs.field(factory=anyio.Event)
    """Set to stop the producer."""
    producer_done: anyio.Event = attrs.field(factory=anyio.Event)
    """Set once the producer has flushed and returned."""
    notes: list[str] = attrs.field(factory=list)
    """What the test wants printed at the end (timings, counts)."""
    ballast: list[str] = attrs.field(factory=list)
    """The ballast streams (:data:`BALLAST_ENV`)."""
    faults: int = 1
    """Faults the test injected (for the durability report of ``nox -s faults``)."""

    @classmethod
    @asynccontextmanager
    async def open(
        cls,
        cluster: Cluster,
        stream: str,
        *,
        partitions: int,
        rf: int,
        value_bytes: int = 100,
        **stream_options: int | float,
    ) -> AsyncIterator[Scenario]:
        """Create the ballast (:data:`BALLAST_ENV`) and the stream, wait for their leaders,
        start the consumer and the monitor."""
        ballast = ballast_partitions()
        names = await create_ballast(cluster, ballast) if ballast else []
        async with client(cluster.addresses) as jet:
            await jet.create_stream(
                stream,
                partitions=partitions,
                replication_factor=rf,
                **stream_options,  # type: ignore[arg-type]
            )
            for p in range(partitions):
                await wait_leader(cluster, stream, p, LEADER_TIMEOUT_S)
            async with anyio.create_task_group() as tg:
                sc = cls(
                    cluster,
                    jet,
                    stream,
                    partitions,
                    tg,
                    ProducerDriver(jet, stream, partitions, value_bytes=value_bytes),
                    ConsumerDriver(jet, stream),
                    HwMonitor(cluster, stream),
                    ballast=names,
                )
                tg.start_soon(sc.consumer.run, sc.stop, BACKGROUND_LIMIT_S)
                tg.start_soon(sc.monitor.run, sc.stop, BACKGROUND_LIMIT_S)
                try:
                    yield sc
                finally:
                    sc.stop_producer.set()
                    sc.stop.set()
                    with anyio.move_on_after(DRAIN_TIMEOUT_S) as scope:
                        await sc.producer_done.wait()
                    if scope.cancelled_caught:
                        tg.cancel_scope.cancel()

    async def _drain(self) -> None:
        """Stop the producer (bounded), let the consumer catch up with every ack (bounded;
        verify() reports if it did not), then stop the consumer and the monitor."""
        self.stop_producer.set()
        with anyio.move_on_after(DRAIN_TIMEOUT_S):
            await self.producer_done.wait()
        want: dict[int, int] = {}
        for a in self.producer.acked:
            want[a.partition] = max(want.get(a.partition, 0), a.offset + 1)
        deadline = time.monotonic() + CATCH_UP_TIMEOUT_S
        while time.monotonic() < deadline and not self.consumer.error:
            if all(self.consumer.reached(p) >= end for p, end in want.items()):
                break
            await anyio.sleep(0.1)
        self.stop.set()

    def start_producer(self, count: int, time_limit_s: float, *, rate: float = 1000.0) -> None:
        """Start the producer in the background (stops at ``self.stop``)."""

        async def run() -> None:
            try:
                await self.producer.run(count, time_limit_s, rate=rate, stop=self.stop_producer)
            finally:
                self.producer_done.set()

        self.tg.start_soon(run)

    async def wait_leaders(
        self, timeout_s: float = LEADER_TIMEOUT_S, *, not_on: str | None = None
    ) -> dict[int, str]:
        """Wait until every partition has a running leader (not ``not_on``)."""
        leaders = {}
        for p in range(self.partitions):
            info = await wait_leader(self.cluster, self.stream, p, timeout_s, not_on=not_on)
            assert info.leader is not None
            leaders[p] = info.leader
        return leaders

    def note(self, text: str) -> None:
        """Print ``text`` now and keep it for the summary."""
        print(text)
        self.notes.append(text)

    async def verify(self, *, compare_replicas: bool = True) -> dict[int, list[Stored]]:
        """Stop the drivers, run every checker; return what is stored.

        Waits (bounded) for leaders and for every replica to catch up to the HW, reads every
        partition through its leader and every replica's files, then checks: acked ⊆
        stored, exactly once, order, HW monotonic, consumer in order without gaps or
        repeats and complete, replica logs byte-identical below the HW.
        """
        await self._drain()
        await self.wait_leaders()
        ballast = await self._ballast_leads_again()
        stored: dict[int, list[Stored]] = {}
        replicas: list[str] = []
        replica_reads: list[str] = []
        hws: dict[int, int] = {}
        for p in range(self.partitions):
            records, hw = await read_committed(self.jet, self.stream, p)
            stored[p] = records
            hws[p] = hw
            if compare_replicas:
                info, caught_up_hw = await wait_caught_up(
                    self.cluster, self.stream, p, CATCH_UP_TIMEOUT_S
                )
                logs = await anyio.to_thread.run_sync(
                    replica_logs, self.cluster, self.stream, p, info.replicas
                )
                replicas.extend(check_replicas_identical(logs, min(caught_up_hw, hw), log_start=0))
                replica_reads.extend(await self._read_every_isr_member(info, records, hw))
        consumed = self.consumer.consumed
        reached = {p: self.consumer.reached(p) for p in range(self.partitions)}
        consumer_problems = check_consumed(consumed, self.producer.acked)
        if self.consumer.error:
            consumer_problems.append(f"consumer stopped: {self.consumer.error}")
        for p in range(self.partitions):
            acked_offsets = [a.offset for a in self.producer.acked if a.partition == p]
            if acked_offsets and reached[p] <= max(acked_offsets):
                consumer_problems.append(
                    f"consumer reached {reached[p]} in partition {p}, acked up to "
                    f"{max(acked_offsets)}"
                )
        summary = (
            f"sent {self.producer.sent}, acked {len(self.producer.acked)}, failed "
            f"{self.producer.failures}, stored {sum(len(v) for v in stored.values())}, "
            f"hw {hws}, consumed {len(consumed)}, hw samples {len(self.monitor.samples)}"
        )
        self.note(summary)
        checks = {
            "acked_subset_of_stored": check_acked_stored(self.producer.acked, stored),
            "exactly_once": check_exactly_once(stored),
        }
        write_report(
            faults=self.faults,
            acked=len(self.producer.acked),
            lost=len(checks["acked_subset_of_stored"]),
            duplicated=len(checks["exactly_once"]),
            longest_without_ack_s=longest_gap(a.at for a in self.producer.acked),
            ballast_partitions=ballast_partitions() if self.ballast else 0,
        )
        assert_clean(
            acked_subset_of_stored=checks["acked_subset_of_stored"],
            exactly_once=checks["exactly_once"],
            order=check_order(stored),
            hw_monotonic=check_hw_monotonic(self.monitor.samples),
            consumer=consumer_problems,
            replicas_identical=replicas,
            reads_through_every_isr_member=replica_reads,
            one_leader_per_epoch=check_one_leader_per_epoch(self.cluster.all_logs()),
            ballast_leads_again=ballast,
        )
        return stored

    async def _ballast_leads_again(self) -> list[str]:
        """Wait (bounded) until every ballast partition with a live ISR member leads on a
        live server; what is still without one then."""
        if not self.ballast:
            return []
        problems: list[str] = []
        async with Client(self.cluster.addresses, request_timeout=REQUEST_BOUND_S) as jet:

            async def led() -> bool:
                problems[:] = await ballast_problems(self.cluster, jet, self.ballast)
                return not problems

            try:
                took = await wait_until_async(led, BALLAST_TIMEOUT_S, "ballast leads again")
            except WaitTimeout:
                return problems
        self.note(f"ballast: {ballast_partitions()} partitions lead again ({took:.1f} s)")
        return []

    async def _read_every_isr_member(
        self, info: PartitionInfo, leader_records: list[Stored], leader_hw: int
    ) -> list[str]:
        """What a consumer reads at each ISR member (leader, read replicas) is the leader's
        committed log up to that member's HW, which is not above the leader's."""
        out = []
        for sid in info.isr:
            answer = await self._read_member(sid, info.partition)
            if isinstance(answer, str):
                out.append(f"partition {info.partition}: {answer}")
                continue
            records, hw = answer
            if hw > leader_hw:
                out.append(
                    f"partition {info.partition}: {sid} serves HW {hw} > leader's {leader_hw}"
                )
            out.extend(
                f"partition {info.partition} read at {sid}: {v}"
                for v in check_replicas_identical(
                    {"leader": leader_records, sid: records}, min(hw, leader_hw)
                )
            )
        return out

    async def _read_member(self, sid: str, partition: int) -> tuple[list[Stored], int] | str:
        """``read_through`` at ``sid``; a NOT_LEADER refusal is asked again for a bounded
        time, as a consumer retries it: a leadership move (preferred leaders put leadership
        back once the first replica has rejoined) may be in flight. A member that still
        refuses after ``MEMBER_READ_S`` is reported."""
        deadline = time.monotonic() + MEMBER_READ_S
        while True:
            answer = await read_through(self.cluster.server(sid).address, self.stream, partition)
            if not (isinstance(answer, str) and "NOT_LEADER" in answer):
                return answer
            if time.monotonic() > deadline:
                return answer
            await anyio.sleep(MEMBER_READ_RETRY_S)


def first_ack_after(producer: ProducerDriver, t0: float, partition: int | None = None) -> float:
    """Seconds from ``t0`` to the first ack after it (of ``partition`` if given); inf if none."""
    times = [
        a.at
        for a in producer.acked
        if a.at > t0 and (partition is None or a.partition == partition)
    ]
    return min(times) - t0 if times else float("inf")


def elapsed(t0: float) -> float:
    """Seconds since ``t0`` (time.monotonic())."""
    return time.monotonic() - t0
