"""Issue 32 (RF 3 ack ALL): a replicated partition's leader starts the fsync of a direct
append where the append ends, from loop callbacks (``CommitSoon``), not from its flusher
task: that task's wake-up (and, on the thread path, its batch turn) was on the leader's
way to its fsync while the followers fetched.

A real log and a real NATS link; the replica leads orders/0 (RF 3) and its followers
never fetch (their servers are not there), so the HW must stay where it is: the leader's
own fsync never commits what the ISR does not hold. The flusher task's fsyncs are
counted (``FsyncRunner.flush``, which only it calls): none may run these appends'.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

from broker.test_replica_lifecycle import ADDRESSES, replica_over_a_real_log
from jetsdk.codec.error_codes import AckPolicy
from jetsdk.codec.messages import ProduceMessage, ProduceRequest, encode_produce_request
from jetsdk.codec.transcode import DirectRecord, produce_envelopes
from jetserver.broker.direct import DirectBatch, ProduceCompletion
from jetserver.natslink.link import NatsLink
from jetserver.replication.core import ROLE_LEADER
from jetserver.storage import Log
from jetserver.storage.fsync_runner import FsyncRunner
from support.fsync_choice import fsyncs_on_the_loop

pytestmark = pytest.mark.anyio

BOUND_S = 10.0
"""Bound on every wait."""
POLL_S = 0.005


def _all_acked_batch(values: list[bytes]) -> DirectBatch:
    """The typed batch the Produce service hands the leader for ``values``, ack ALL."""
    body = encode_produce_request(
        ProduceRequest("orders", 0, AckPolicy.ALL, 5000, tuple(ProduceMessage(v) for v in values))
    )
    records: list[DirectRecord | None] = []
    _head, envelopes = produce_envelopes(body, "", records)
    completion = ProduceCompletion("orders", 0, [None] * len(values), remaining=len(values))
    return DirectBatch(
        subjects=["orders"] * len(values),
        records=[r for r in records if r is not None],
        indexes=list(range(len(values))),
        policy=AckPolicy.ALL,
        completion=completion,
        size=sum(len(e or b"") for _s, _n, e in envelopes),
    )


@pytest.mark.parametrize("where", ["loop", "thread"])
async def test_a_replicated_leader_fsyncs_a_direct_append_without_its_flusher(
    link: NatsLink, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    if where == "loop":
        fsyncs_on_the_loop(monkeypatch)  # (a slow disk or a busy loop would say no)
    replica, state = await replica_over_a_real_log(tmp_path, link)
    if where == "thread":
        replica.committer.fsyncs.on_loop = False
    a = state.streams["orders"].partitions[0]
    flusher_fsyncs: list[int | None] = []  # the flusher task's fsyncs (FsyncRunner.flush)
    flush = FsyncRunner.flush

    async def counted(runner: FsyncRunner, log_: Log, upto: int | None = None, **kw: Any) -> int:
        flusher_fsyncs.append(upto)
        return await flush(runner, log_, upto, **kw)

    monkeypatch.setattr(FsyncRunner, "flush", counted)
    async with anyio.create_task_group() as tg:
        await tg.start(replica.run)
        with anyio.fail_after(BOUND_S):
            await replica.apply_assignment(a, ADDRESSES)
        assert replica.role == ROLE_LEADER
        log_ = replica.log
        start = log_.log_end_offset
        with anyio.fail_after(BOUND_S):  # the new epoch's own writes fsynced first
            while log_.flushed_offset < start:  # noqa: ASYNC110 - no event for this
                await anyio.sleep(POLL_S)
        del flusher_fsyncs[:]
        for round_ in range(3):
            batch = _all_acked_batch([b"a%d" % round_, b"b%d" % round_])
            assert await replica.ingest_direct(batch)
            end = start + 2 * (round_ + 1)
            assert log_.log_end_offset == end
            with anyio.fail_after(BOUND_S):
                while log_.flushed_offset < end:  # noqa: ASYNC110 - no event for this
                    await anyio.sleep(POLL_S)
            # Started where the append ended: the flusher task did not run it.
            assert flusher_fsyncs == []
            # The followers hold none of it: nothing is committed, nobody is acked.
            assert replica.high_watermark == start
            assert batch.completion.remaining == 2
        replica.stop()
        with anyio.fail_after(BOUND_S):
            await replica.wait_stopped()
