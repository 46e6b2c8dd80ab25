"""Stream purge and update (issue 36, item 6): ``Client.purge_stream`` moves a partition's
log start forward on every replica; ``Client.update_stream`` changes retention and
segment settings through the metadata and every replica applies them to its open logs."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from pathlib import Path

import anyio
import pytest

from jetsdk import AckPolicy, Client, Producer
from jetsdk.errors import InvalidArgument, OffsetOutOfRange, StreamNotFound
from jetserver.testing import Cluster
from support.jet_dev import JetDev

Seen = list[tuple[int | None, int | None]]
"""Per server: the partition's (log start, segments) there."""

WAIT_S = 20.0
"""Bound on waiting for followers to show a change."""


async def _fill(client: Client, name: str, count: int, partition: int = 0, size: int = 100) -> None:
    async with Producer(client, name, ack=AckPolicy.ALL) as producer:
        for i in range(count):
            await producer.send(b"%05d" % i + b"x" * size, partition=partition)


@pytest.mark.anyio
async def test_purge_before_an_offset_then_everything(jet_dev: JetDev) -> None:
    name = f"purge-{uuid.uuid4().hex[:8]}"
    async with Client(jet_dev.servers) as client:
        await client.create_stream(name, partitions=2, segment_max_bytes=1024)
        await _fill(client, name, 40)
        await _fill(client, name, 5, partition=1)
        assert await client.purge_stream(name, partition=0, before=25) == {0: 25}
        info = await client.describe_stream(name)
        assert [(p.log_start, p.hw) for p in info.partitions] == [(25, 40), (0, 5)]
        assert (await client.list_offsets(name, 0, "earliest")).offset == 25
        with pytest.raises(OffsetOutOfRange):
            await client.fetch(name, 0, 10, max_bytes=4096, max_wait=0)
        header, _ = await client.fetch(name, 0, 25, max_bytes=1 << 16, max_wait=0)
        assert header.log_start == 25
        with pytest.raises(OffsetOutOfRange):
            await client.purge_stream(name, partition=0, before=41)  # above the HW
        with pytest.raises(InvalidArgument):
            await client.purge_stream(name, before=-1)
        assert await client.purge_stream(name) == {0: 40, 1: 5}  # every committed record
        info = await client.describe_stream(name)
        assert [(p.log_start, p.hw) for p in info.partitions] == [(40, 40), (5, 5)]
        assert info.partitions[0].segments == 1
        await _fill(client, name, 1)
        assert (await client.list_offsets(name, 0, "latest")).offset == 41
        with pytest.raises(StreamNotFound):
            await client.purge_stream(f"{name}-missing")


@pytest.mark.anyio
async def test_update_changes_settings_and_refuses_fixed_ones(jet_dev: JetDev) -> None:
    name = f"edit-{uuid.uuid4().hex[:8]}"
    async with Client(jet_dev.servers) as client:
        await client.create_stream(name, partitions=1, retention_max_messages=1000)
        info = await client.update_stream(
            name, retention_max_messages=None, retention_max_age=3600, segment_max_bytes=1024
        )
        assert info.config["retention_max_messages"] is None
        assert info.config["retention_max_age_s"] == 3600.0
        assert info.config["segment_max_bytes"] == 1024
        assert (await client.stream_info(name)).config["segment_max_bytes"] == 1024
        # The open log rolls by the new size at once.
        await _fill(client, name, 30)
        assert ((await client.describe_stream(name)).partitions[0].segments or 0) > 1
        for setting, value in [
            ("partitions", 3),
            ("replication_factor", 2),
            ("subject", "other"),
            ("retention_max_bytes", 0),
            ("segment_max_bytes", 10),
            ("no_such_setting", 1),
        ]:
            with pytest.raises(InvalidArgument) as caught:
                await client.update_stream(name, **{setting: value})
            assert caught.value.details.get("field") == setting
        with pytest.raises(StreamNotFound):
            await client.update_stream(f"{name}-missing", retention_max_messages=5)


async def _keep_busy(client: Client, name: str) -> None:
    """Send to every partition of ``name`` in turn until cancelled (bounded)."""
    deadline = time.monotonic() + 2 * WAIT_S
    async with Producer(client, name, ack=AckPolicy.ALL) as producer:
        i = 0
        while time.monotonic() < deadline:
            await producer.send(b"busy", partition=i % 3)
            i += 1


def test_purge_and_update_reach_every_replica(tmp_path: Path) -> None:
    settings = {"storage": {"maintenance_interval_s": 0.2, "hw_checkpoint_interval_s": 0.2}}
    with Cluster(size=3, root=tmp_path, settings=settings) as cluster:

        async def describe_everywhere(stream: str) -> Seen:
            seen: Seen = []
            for address in cluster.addresses:
                async with Client([address]) as one:
                    part = (await one.describe_stream(stream)).partitions[0]
                    seen.append((part.log_start, part.segments))
            return seen

        async def until(
            stream: str, check: Callable[[tuple[int | None, int | None]], bool], what: str
        ) -> Seen:
            deadline = time.monotonic() + WAIT_S
            while True:
                seen = await describe_everywhere(stream)
                if all(check(s) for s in seen):
                    return seen
                assert time.monotonic() < deadline, f"{what}: {seen}"
                await anyio.sleep(0.1)

        async def run() -> None:
            async with Client(cluster.addresses) as client:
                await client.create_stream("p", replication_factor=3, segment_max_bytes=1024)
                await _fill(client, "p", 30)
                assert await client.purge_stream("p", before=12) == {0: 12}
                await until("p", lambda s: s[0] == 12, "followers adopt the purge")
                assert await client.purge_stream("p") == {0: 30}
                await until("p", lambda s: s[0] == 30, "followers adopt the purge of all")

                # A purge reaches the followers while their fetch sessions are kept busy
                # by other partitions of the same leaders (the purged one stays idle).
                await client.create_stream("busy", partitions=3, replication_factor=3)
                await _fill(client, "p", 5)
                async with anyio.create_task_group() as tg:
                    tg.start_soon(_keep_busy, client, "busy")
                    await until("p", lambda s: s[0] == 30, "settled before the purge")
                    assert await client.purge_stream("p") == {0: 35}
                    await until("p", lambda s: s[0] == 35, "followers of a busy leader adopt it")
                    tg.cancel_scope.cancel()

                await client.create_stream("u", replication_factor=3)
                await client.update_stream("u", segment_max_bytes=1024)
                await _fill(client, "u", 30)
                await until("u", lambda s: (s[1] or 0) > 1, "every replica rolls by the new size")
                await client.update_stream("u", retention_max_messages=5)
                await until("u", lambda s: (s[0] or 0) >= 20, "every replica's retention")

        anyio.run(run)
