"""The first append of a partition's leader epoch leaves its leader-epoch checkpoint to a
worker thread (jetserver.storage.epoch_writes), as a new cluster leader does: the event
loop makes no file for it (a new stream's first keyed ProduceMany made and renamed one per
partition there, issue 34 item 4). The epoch is in the cache at once and on disk soon."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from pathlib import Path

import anyio
import pytest

from jetsdk.codec.error_codes import AckPolicy, ErrorCode
from jetsdk.codec.messages import ProduceMessage
from jetserver.server import Server
from jetserver.storage import epoch_cache
from jetserver.storage.checkpoint import LEADER_EPOCH_FILE, read_checkpoint
from support.raw_client import RawClient

pytestmark = pytest.mark.anyio


async def test_a_new_partitions_first_append_writes_its_epoch_file_off_the_loop(
    jet: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    writers: list[threading.Thread] = []
    write = epoch_cache.write_checkpoint

    def traced(
        directory: Path, name: str, entries: Sequence[Sequence[int]], *, sync: bool = True
    ) -> None:
        write(directory, name, entries, sync=sync)
        if name == LEADER_EPOCH_FILE:  # counted once written: the test then reads the file
            writers.append(threading.current_thread())

    monkeypatch.setattr(epoch_cache, "write_checkpoint", traced)
    async with await RawClient.connect(jet.address) as c:
        await c.create_stream(name="e", subject="e.x", partitions=4)
        for partition in range(4):
            results = await c.produce(
                "e", partition, [ProduceMessage(b"v")], ack_policy=AckPolicy.LEADER
            )
            assert results[0].error_code == ErrorCode.NONE
    logs = [jet.streams.replica("e", p).log for p in range(4)]
    assert all(log_.epochs.latest_epoch == 0 for log_ in logs)
    with anyio.fail_after(10):
        while len(writers) < 4:  # noqa: ASYNC110 - written by worker threads, no event
            await anyio.sleep(0.01)
    assert threading.main_thread() not in writers
    for log_ in logs:
        assert read_checkpoint(log_.directory, LEADER_EPOCH_FILE, 2) == [(0, 0)]
