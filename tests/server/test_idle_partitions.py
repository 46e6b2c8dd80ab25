"""What an idle partition costs in tasks: one (its sequencer). Its flusher starts with the
first append, its NATS subscription's delivery task with the first message its sink
declines, and nats-py's own delivery task never (issue 17: thousands of idle partitions
per server)."""

from __future__ import annotations

import asyncio
import gc
import threading
from collections import Counter

import anyio
import pytest

from jetsdk.codec.error_codes import AckPolicy
from jetsdk.codec.messages import ProduceMessage
from jetserver.broker.sequencer import DEFER_MAX_RECORDS
from jetserver.server import Server
from support.raw_client import RawClient

pytestmark = pytest.mark.anyio

PARTITIONS = 40
THREADS_STARTED_MEANWHILE = PARTITIONS // 4
"""Bound on threading.Conditions that threads started while partitions are created may
bring (a Thread's ``_started`` event holds one, a worker's queue three more: 1 and 5 seen
in CI runs): a Condition per log would be PARTITIONS."""


def _name(task: asyncio.Task[object]) -> str:
    name = str(getattr(task.get_coro(), "__qualname__", "?"))
    if name.endswith("_run_coro"):  # anyio's wrapper: the task is named after the function
        name = ".".join(task.get_name().split(".")[-2:])
    return name


def _objects(*kinds: type) -> int:
    """Live objects of these types (a GC pass first)."""
    gc.collect()
    return sum(1 for o in gc.get_objects() if isinstance(o, kinds))


def _events() -> int:
    """Live asyncio and anyio events."""
    return _objects(asyncio.Event, anyio.Event)


def _tasks() -> Counter[str]:
    """Running tasks by the name of the function they run (``Class.method``)."""
    return Counter(_name(t) for t in asyncio.all_tasks() if not t.done())


async def test_idle_partitions_hold_one_task_each_and_the_first_append_starts_the_flusher(
    jet: Server,
) -> None:
    async with await RawClient.connect(jet.address) as c:
        await c.create_stream(name="warm", subject="warm")
        before = _tasks()
        await c.create_stream(name="idle", subject="idle", partitions=PARTITIONS)
        new = _tasks() - before
        assert new["PartitionReplica.run"] == PARTITIONS  # the sequencers
        # No flusher, no delivery task of jet's or of nats-py's per subscription.
        assert new["Committer._flusher"] == 0, new
        assert new["_Direct._run"] == 0, new
        assert new["Subscription._wait_for_msgs"] == 0, new
        replica = jet.streams.replica("idle", 5)
        assert not replica.committer.flushing
        for round_ in range(3):  # an ALL ack on an idle partition commits in its request
            acks = await c.produce(
                "idle", 5, [ProduceMessage(b"m%d" % round_)], ack_policy=AckPolicy.ALL
            )
            assert [(a.error_code, a.offset) for a in acks] == [(0, round_)]
            assert replica.log.flushed_offset == round_ + 1
            assert replica.high_watermark == round_ + 1
        assert not replica.committer.flushing
        # A LEADER-acked request over DEFER_MAX_RECORDS leaves the fsync to the flusher
        # (a smaller one fsyncs in its own after-work, on the loop or in a worker thread):
        # the first one starts it.
        big = [ProduceMessage(b"m3")] * (DEFER_MAX_RECORDS + 1)
        acks = await c.produce("idle", 5, big, ack_policy=AckPolicy.LEADER)
        assert [(a.error_code, a.offset) for a in acks] == [(0, 3 + i) for i in range(len(big))]
        assert replica.committer.flushing
        new = _tasks() - before
        assert new["Committer._flusher"] == 1
        assert new["PartitionReplica.run"] == PARTITIONS
        others = [jet.streams.replica("idle", p) for p in range(PARTITIONS) if p != 5]
        assert not any(r.committer.flushing for r in others)
        records = await c.collect("idle", 5, 3 + len(big))
    assert [r.value for r in records] == [b"m0", b"m1", b"m2"] + [b"m3"] * len(big)


async def test_idle_partitions_hold_no_events_or_conditions(jet: Server) -> None:
    """Waiting idle costs a bare future: no asyncio/anyio Event (1.5 KB with its deque)
    behind a sequencer's wait, no threading.Condition (1 KB) per log's group commit until
    two flushes of it meet (issue 34: 50,000 idle partitions on one server). What is left
    is anyio's own: its handle of each task (4.14 on) holds an anyio.Event over an
    asyncio.Event."""
    async with await RawClient.connect(jet.address) as c:
        await c.create_stream(name="warm", subject="warm")
        events, conditions, tasks = _events(), _objects(threading.Condition), _tasks()
        await c.create_stream(name="idle", subject="idle", partitions=PARTITIONS)
        await c.create_stream(name="after", subject="after")  # a round trip later
        new_tasks = (_tasks() - tasks).total()
        assert new_tasks == PARTITIONS + 1  # the sequencers' run tasks
        # One per log would be PARTITIONS more; a worker thread started meanwhile (its
        # ``_started`` event) brings one of its own: seen at load 10-35, 1 more.
        assert _objects(threading.Condition) - conditions <= THREADS_STARTED_MEANWHILE
        assert _events() - events <= 2 * new_tasks  # anyio's per task, no more
        replicas = [jet.streams.replica("idle", p) for p in range(PARTITIONS)]
        assert all(r.sequencer._wake._futures for r in replicas)  # each waits, on a future
        acks = await c.produce("idle", 3, [ProduceMessage(b"m")], ack_policy=AckPolicy.ALL)
        assert [(a.error_code, a.offset) for a in acks] == [(0, 0)]
        assert replicas[3].log.flushed_offset == 1
