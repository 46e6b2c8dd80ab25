"""The commits of large ack-ALL Produce requests on a server alone (durability
``flushed``): their fsyncs leave the event loop, and while one request's fsync runs in a
worker thread the requests appended meanwhile are committed by the partition's flusher,
whose next fsync covers them all (jetserver.storage.fsync_runner, Committer.commit_here).

An in-process server; the log's fdatasync is wrapped to wait at a gate (bounded), both
where ``Log.flush`` calls it and where a request's own thread fsync does
(``FsyncRunner.thread_sync``, the split sync of ``Committer.commit_here``), so the
requests pile up behind one fsync as they do behind a slow disk.
"""

from __future__ import annotations

import threading

import anyio
import pytest

from jetsdk.codec.error_codes import AckPolicy, ErrorCode
from jetsdk.codec.frames import Api, encode_frame
from jetsdk.codec.messages import (
    ProduceMessage,
    ProduceRequest,
    decode_produce_response,
    encode_produce_request,
)
from jetserver.server import Server
from jetserver.storage import fsync_runner
from jetserver.storage import log as log_module
from support.raw_client import RawClient

pytestmark = pytest.mark.anyio

GATE_S = 5.0
"""Most a gated fdatasync waits (the test opens the gate long before)."""
REQUESTS = 6
VALUE = b"v" * (fsync_runner.INLINE_MAX_BYTES + 44_000)


async def test_large_all_requests_behind_a_thread_fsync_share_the_flushers_next_one(
    jet: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Six pipelined ALL requests of 300 KiB each: the first one's fsync goes to a thread
    (too many bytes for the loop); the five appended while it waits leave their commit to
    the flusher, one more thread fsync for all five. Failed before: an fsync per request
    (each its own thread job, the first one on the loop if it looked free), 6 in all."""
    gate = threading.Event()
    held = threading.Event()
    real = log_module.fdatasync

    def gated(fd: int) -> None:
        held.set()
        gate.wait(GATE_S)
        real(fd)

    async with await RawClient.connect(jet.address) as c:
        await c.create_stream(name="big", subject="big.x")
        replica = jet.streams.replica("big", 0)
        runner = replica.committer.fsyncs
        before = runner.thread_fsyncs + runner.loop_fsyncs
        monkeypatch.setattr(log_module, "fdatasync", gated)
        # The first request's fsync is a split sync (FsyncRunner.sync_in_thread_then),
        # which calls os.fdatasync, not the log module's: gated too, or it ended at disk
        # speed and a request read a few loop turns later (a loaded machine reads the
        # 300 KiB frames over several) rightly asked an fsync of its own (3 or 4 in all).
        monkeypatch.setattr(runner, "thread_sync", gated)
        try:
            request = ProduceRequest("big", 0, AckPolicy.ALL, 20_000, (ProduceMessage(VALUE),))
            body = encode_produce_request(request)
            for cid in range(1, REQUESTS + 1):
                await c.send_raw(encode_frame(Api.PRODUCE, cid, body))
            # Every fsync the six ask for before the gate opens is asked once all six
            # are appended and the sequencer is idle (a request's commit decides with no
            # await after its append: Sequencer.append_now, Committer.commit_here) and
            # the flusher asked its one (it cannot ask again while its fsync is held).
            with anyio.fail_after(10):
                while not (  # noqa: ASYNC110 - no event for these
                    replica.log.log_end_offset == REQUESTS
                    and replica.sequencer.idle
                    and runner.thread_fsyncs + runner.loop_fsyncs - before >= 2
                ):
                    await anyio.sleep(0.01)
            await anyio.lowlevel.checkpoint()  # a flusher woken in that turn has asked
            assert held.is_set()
            asked = runner.thread_fsyncs + runner.loop_fsyncs - before
        finally:
            gate.set()
        offsets = []
        for _ in range(REQUESTS):
            frame = await c.recv_frame(20.0)
            results = decode_produce_response(frame.body)
            assert [r.error_code for r in results] == [ErrorCode.NONE]
            offsets.append(results[0].offset)
    assert sorted(offsets) == list(range(REQUESTS))
    assert asked == 2  # the first request's own, then the flusher's for the other five
    assert replica.log.flushed_offset == REQUESTS
