"""What an idle partition costs in tasks: one (its sequencer). Its flusher starts with the
first append, its NATS subscription's delivery task with the first message its sink
declines (issue 17: thousands of idle partitions per server)."""

from __future__ import annotations

import asyncio

import pytest

from jetsdk.codec.error_codes import AckPolicy
from jetsdk.codec.messages import ProduceMessage
from jetserver.server import Server
from support.raw_client import RawClient

pytestmark = pytest.mark.anyio

PARTITIONS = 40


async def test_idle_partitions_hold_one_task_each_and_the_first_append_starts_the_flusher(
    jet: Server,
) -> None:
    async with await RawClient.connect(jet.address) as c:
        await c.create_stream(name="warm", subject="warm")
        before = len(asyncio.all_tasks())
        await c.create_stream(name="idle", subject="idle", partitions=PARTITIONS)
        assert len(asyncio.all_tasks()) - before == PARTITIONS  # the sequencers only
        replica = jet.streams.replica("idle", 5)
        assert not replica._flushing
        for round_ in range(3):  # each ALL ack needs a flush: the flusher serves them all
            acks = await c.produce(
                "idle", 5, [ProduceMessage(b"m%d" % round_)], ack_policy=AckPolicy.ALL
            )
            assert [(a.error_code, a.offset) for a in acks] == [(0, round_)]
            assert replica.log.flushed_offset == round_ + 1
            assert replica.high_watermark == round_ + 1
        assert replica._flushing
        assert len(asyncio.all_tasks()) - before == PARTITIONS + 1
        assert not any(
            jet.streams.replica("idle", p)._flushing for p in range(PARTITIONS) if p != 5
        )
        records = await c.collect("idle", 5, 3)
    assert [r.value for r in records] == [b"m0", b"m1", b"m2"]
