"""Running out of open files is an error someone sees, never a half-created stream.

A real `jet server` process runs under a low open-file limit (soft = hard, so raising the
soft limit at start cannot help):

- CreateStream fails with STORAGE_ERROR naming the limit and the remedy once the limit
  leaves no room, and nothing of that stream remains; the streams before it keep working.
- Restarted under a lower limit, the partitions that cannot open are *offline*: describe
  says why, Produce and Fetch to them fail at once (not after a timeout), the others serve.
"""

from __future__ import annotations

import time
from pathlib import Path

import anyio
import pytest

from jetsdk import AckPolicy, Client, Consumer, Producer
from jetsdk.errors import JetError, PartitionOffline, StorageError, StreamNotFound
from support.jet_server import start_server_process
from support.nats_server import NatsServer

pytestmark = pytest.mark.anyio

PARTITIONS = 10
MAX_STREAMS = 60
"""Bound on the create loop (the limit is reached well before)."""


async def _create_until_refused(address: str) -> tuple[list[str], JetError]:
    created: list[str] = []
    async with Client([address]) as client:
        for i in range(MAX_STREAMS):
            name = f"s{i}"
            try:
                await client.create_stream(name, name, partitions=PARTITIONS)
            except JetError as exc:
                return created, exc
            created.append(name)
    raise AssertionError(f"{MAX_STREAMS} streams of {PARTITIONS} partitions all fit")


async def test_create_fails_clearly_and_leaves_nothing_behind(
    nats_server: NatsServer, tmp_path: Path
) -> None:
    server = start_server_process(nats_server.url, tmp_path / "data", file_limit=200)
    try:
        created, error = await _create_until_refused(server.address)
        assert isinstance(error, StorageError)
        assert "open files" in str(error)
        assert "limit 200" in str(error)
        assert "raise the open-file limit" in str(error)
        assert created, "some streams fit under 200 files"
        refused = f"s{len(created)}"
        async with Client([server.address]) as client:
            with pytest.raises(StreamNotFound):
                await client.describe_stream(refused)
            names = {s.name for s in await client.list_streams()}
            assert refused not in names
            assert set(created) <= names
            # The first stream still stores and serves.
            async with Producer(client, created[0], ack=AckPolicy.ALL) as producer:
                ack = await producer.send(b"still here", partition=3)
            async with Consumer(client, created[0], partitions=[3]) as consumer:
                with anyio.fail_after(10):
                    (msg,) = await consumer.fetch(max_records=1)
        assert (ack.offset, msg.value) == (0, b"still here")
        assert not (tmp_path / "data" / "streams" / refused).exists()
    finally:
        server.stop()


async def test_partitions_that_cannot_open_at_start_are_offline(
    nats_server: NatsServer, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    server = start_server_process(nats_server.url, data, file_limit=400)
    try:
        async with Client([server.address]) as client:
            for i in range(8):
                await client.create_stream(f"s{i}", f"s{i}", partitions=PARTITIONS)
    finally:
        assert server.stop() == 0
    # 80 partitions, and room for about half of them after the reserve.
    server = start_server_process(nats_server.url, data, file_limit=110)
    try:
        async with Client([server.address]) as client:
            infos = [await client.describe_stream(f"s{i}") for i in range(8)]
            parts = [(info.name, p) for info in infos for p in info.partitions]
            offline = [(name, p) for name, p in parts if p.offline is not None]
            online = [(name, p) for name, p in parts if p.offline is None]
            assert offline, "some partitions cannot open under 110 files"
            assert online, "the others open"
            reason = offline[0][1].offline
            assert reason is not None
            assert "open files" in reason
            assert "limit 110" in reason
            name, part = offline[0][0], offline[0][1].partition
            started = time.monotonic()
            async with Producer(client, name, ack=AckPolicy.LEADER) as producer:
                with pytest.raises(PartitionOffline, match="offline"):
                    await producer.send(b"x", partition=part)
            with pytest.raises(PartitionOffline, match="offline"):  # at open or first fetch
                async with Consumer(client, name, partitions=[part]) as consumer:
                    await consumer.fetch(max_records=1, timeout=20)
            assert time.monotonic() - started < 10, "answered at once, not after a timeout"
            ok_name, ok_part = online[0][0], online[0][1].partition
            async with Producer(client, ok_name, ack=AckPolicy.ALL) as producer:
                ack = await producer.send(b"fine", partition=ok_part)
            assert ack.partition == ok_part
    finally:
        server.stop()
