"""Open files: idle partitions hold none, and running out is an error someone sees.

A real `jet server` process runs under a low open-file limit (soft = hard, so raising the
soft limit at start cannot help):

- Idle partitions' active segment files are parked (closed until used): a server holds
  more partitions than its limit, and each still takes produce and fetch.
- CreateStream fails with STORAGE_ERROR naming the limit and the remedy when the stream
  cannot fit (its partitions, in use, would not), and nothing of that stream remains; the
  streams before it keep working.
- Restarted under a limit that leaves no room beyond the reserve, the partitions are
  *offline*: describe says why, Produce and Fetch to them fail at once (not after a timeout).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import anyio
import pytest

from jetsdk import AckPolicy, Client, Consumer, Producer
from jetsdk.errors import PartitionOffline, StorageError, StreamNotFound
from support.jet_server import start_server_process, stopping
from support.nats_server import NatsServer

pytestmark = pytest.mark.anyio

PARTITIONS = 10
STREAMS = 30
"""Streams of PARTITIONS created under a limit of 200 files: 300 partitions."""


def _fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


async def _roundtrip(client: Client, stream: str, partition: int, value: bytes) -> None:
    async with Producer(client, stream, ack=AckPolicy.ALL) as producer:
        ack = await producer.send(value, partition=partition)
    async with Consumer(client, stream, partitions=[partition]) as consumer:
        with anyio.fail_after(10):
            (msg,) = await consumer.fetch(max_records=1)
    assert (ack.offset, msg.value) == (0, value)


async def test_idle_partitions_hold_no_file_and_a_stream_that_cannot_fit_is_refused(
    nats_server: NatsServer, tmp_path: Path
) -> None:
    with stopping(
        start_server_process(nats_server.url, tmp_path / "data", file_limit=200)
    ) as server:
        empty = _fds(server.pid)
        async with Client([server.address]) as client:
            for i in range(STREAMS):
                await client.create_stream(f"s{i}", f"s{i}", partitions=PARTITIONS)
            # 300 partitions under a limit of 200: their files are parked when idle.
            assert _fds(server.pid) - empty < STREAMS * PARTITIONS // 10
            await _roundtrip(client, "s0", 3, b"first")
            await _roundtrip(client, f"s{STREAMS - 1}", 7, b"last")
            with pytest.raises(StorageError) as refused:
                await client.create_stream("big", "big", partitions=300)
            error = str(refused.value)
            assert "open files" in error
            assert "limit 200" in error
            assert "raise the open-file limit" in error
            with pytest.raises(StreamNotFound):
                await client.describe_stream("big")
            names = {s.name for s in await client.list_streams()}
            assert "big" not in names
            assert {f"s{i}" for i in range(STREAMS)} <= names
            await _roundtrip(client, "s1", 0, b"still here")
        assert not (tmp_path / "data" / "streams" / "big").exists()


async def test_partitions_that_cannot_open_at_start_are_offline(
    nats_server: NatsServer, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    with stopping(start_server_process(nats_server.url, data, file_limit=400)) as server:
        async with Client([server.address]) as client:
            for i in range(8):
                await client.create_stream(f"s{i}", f"s{i}", partitions=PARTITIONS)
    # 80 partitions parked at open: all of them fit under 110 files.
    with stopping(start_server_process(nats_server.url, data, file_limit=110)) as server:
        async with Client([server.address]) as client:
            infos = [await client.describe_stream(f"s{i}") for i in range(8)]
            assert all(p.offline is None for info in infos for p in info.partitions)
            await _roundtrip(client, "s5", 5, b"fine")
    # Under 80 files the reserve (64) and the server's own (about 18) leave no room.
    with stopping(start_server_process(nats_server.url, data, file_limit=80)) as server:
        async with Client([server.address]) as client:
            infos = [await client.describe_stream(f"s{i}") for i in range(8)]
            parts = [(info.name, p) for info in infos for p in info.partitions]
            offline = [(name, p) for name, p in parts if p.offline is not None]
            assert offline, "partitions cannot open under 80 files"
            reason = offline[0][1].offline
            assert reason is not None
            assert "open files" in reason
            assert "limit 80" in reason
            name, part = offline[0][0], offline[0][1].partition
            started = time.monotonic()
            async with Producer(client, name, ack=AckPolicy.LEADER) as producer:
                with pytest.raises(PartitionOffline, match="offline"):
                    await producer.send(b"x", partition=part)
            with pytest.raises(PartitionOffline, match="offline"):  # at open or first fetch
                async with Consumer(client, name, partitions=[part]) as consumer:
                    await consumer.fetch(max_records=1, timeout=20)
            assert time.monotonic() - started < 10, "answered at once, not after a timeout"
