"""Reading a group's offsets from outside it, and simple commits (spec/groups.md §7.2),
against a real `jet dev`."""

from __future__ import annotations

import uuid

import anyio
import pytest

from jetsdk import Client, Producer
from jetsdk.codec.error_codes import AckPolicy
from jetsdk.codec.record import iter_records
from jetsdk.consumer import Consumer, OffsetAndMetadata
from jetsdk.consumer.group_admin import (
    PartitionLag,
    commit_offsets,
    group_lag,
    group_offsets,
    read_group,
)
from jetsdk.group.errors import CommitFailed
from jetsdk.group.member import MemberConfig
from jetsdk.group.reader import GroupLogReader
from jetsdk.group.records import GROUPS_STREAM, Checkpoint, decode_record
from jetsdk.group.stream_partition import StreamPartition as SP
from jetsdk.partitioner import partition_for_key
from support.jet_dev import JetDev

pytestmark = pytest.mark.anyio

CFG = MemberConfig(session_timeout=5.0, heartbeat_interval=0.25, release_timeout=5.0)
WAIT_S = 30.0


async def test_simple_commits_lag_and_a_member_taking_over(jet_dev: JetDev) -> None:
    stream, group = f"so-{uuid.uuid4().hex[:6]}", f"g-{uuid.uuid4().hex[:6]}"
    p0, p1 = SP(stream, 0), SP(stream, 1)
    async with Client(jet_dev.servers) as client:
        await client.create_stream(stream, stream, partitions=2)
        async with Producer(client, stream, ack=AckPolicy.ALL) as producer:
            for i in range(10):
                await producer.send(b"v%d" % i, partition=i % 2)
        assert await group_offsets(client, group) == {}
        await commit_offsets(client, group, {p0: 3, p1: OffsetAndMetadata(4, "tool")})
        assert await group_offsets(client, group) == {
            p0: OffsetAndMetadata(3),
            p1: OffsetAndMetadata(4, "tool"),
        }
        # A reset may move an offset back while the group has no members.
        await commit_offsets(client, group, {p0: 2}, committer="ops")
        lag = await group_lag(client, group)
        assert lag == {p0: PartitionLag(2, 5, 3), p1: PartitionLag(4, 5, 1)}
        state = await read_group(client, group)
        assert state is not None
        entry = state.committed(p0)
        assert entry is not None
        assert (entry.member, entry.generation) == ("ops", -1)

        # A member starts from the simple commits; while it owns the partitions, simple
        # commits are refused.
        got: set[tuple[int, int]] = set()
        async with Consumer(
            client, stream, group=group, group_config=CFG, auto_commit=None
        ) as consumer:
            with anyio.fail_after(WAIT_S):
                while len(got) < 4:
                    for msg in await consumer.fetch(timeout=0.5):
                        got.add((msg.partition, msg.offset))
            assert got == {(0, 2), (0, 3), (0, 4), (1, 4)}
            with pytest.raises(CommitFailed) as info:
                await commit_offsets(client, group, {p0: 0})
            assert info.value.reason == "group_active"
            await consumer.commit()
        # The member left (its final offsets committed): simple commits apply again.
        assert (await group_offsets(client, group))[p0].offset == 5
        await commit_offsets(client, group, {p0: 1})
        assert (await group_lag(client, group, [stream]))[p0] == PartitionLag(1, 5, 4)


async def test_simple_commits_write_checkpoints_for_a_group_without_members(
    jet_dev: JetDev,
) -> None:
    stream, group = f"sc-{uuid.uuid4().hex[:6]}", f"g-{uuid.uuid4().hex[:6]}"
    async with Client(jet_dev.servers) as client:
        await client.create_stream(stream, stream, partitions=1)
        await commit_offsets(client, group, {SP(stream, 0): 1})
        await commit_offsets(client, group, {SP(stream, 0): 2}, checkpoint_interval=1e-9)
        state = await read_group(client, group)
        assert state is not None
        info = await client.stream_info(GROUPS_STREAM, refresh=True)
        gp = partition_for_key(group.encode(), info.partition_count)
        hw = (await client.list_offsets(GROUPS_STREAM, gp, "latest")).hw
        _, raw = await client.fetch(GROUPS_STREAM, gp, 0, max_bytes=1 << 20, max_wait=0)
        mine = [r for r in iter_records(raw) if r.offset < hw and r.key == group.encode()]
        last = decode_record(mine[-1].value)
        assert isinstance(last, Checkpoint)
        assert (last.member, last.as_of) == ("simple", mine[-2].offset)
        # A reader starting after the last commit restores the state from the checkpoint.
        reader = GroupLogReader(group, 0, mine[-2].offset + 1)
        reader.feed(mine[-1].offset, mine[-1].timestamp, mine[-1].value)
        reader.caught_up(mine[-1].offset + 1)
        assert reader.state is not None
        assert reader.state.committed_offsets() == state.committed_offsets()


async def test_simple_consumer_resumes_from_and_commits_to_the_group(jet_dev: JetDev) -> None:
    stream, group = f"sx-{uuid.uuid4().hex[:6]}", f"g-{uuid.uuid4().hex[:6]}"
    p0 = SP(stream, 0)
    async with Client(jet_dev.servers) as client:
        await client.create_stream(stream, stream, partitions=2)
        async with Producer(client, stream, ack=AckPolicy.ALL) as producer:
            for i in range(6):
                await producer.send(b"v%d" % i, partition=0)
        await commit_offsets(client, group, {p0: 2})
        async with Consumer(client, stream, group=group, partitions=[0]) as consumer:
            assert consumer.group == group
            assert consumer.committed(0) == OffsetAndMetadata(2)
            with anyio.fail_after(WAIT_S):
                first = await consumer.__anext__()
                second = await consumer.__anext__()
            assert (first.offset, second.offset) == (2, 3)
            await consumer.commit()  # both handed out: processed
            assert consumer.committed(0) == OffsetAndMetadata(4)
        assert (await group_offsets(client, group))[p0].offset == 4
        # A restarted simple consumer resumes there.
        async with Consumer(client, stream, group=group, partitions=[0]) as consumer:
            with anyio.fail_after(WAIT_S):
                assert (await consumer.__anext__()).offset == 4
            # While a member owns the partition, the simple consumer's commits are refused.
            assigned = anyio.Event()
            async with Consumer(
                client,
                stream,
                group=group,
                group_config=CFG,
                auto_commit=None,
                on_assigned=lambda _parts: assigned.set(),
            ):
                with anyio.fail_after(WAIT_S):
                    await assigned.wait()
                with pytest.raises(CommitFailed) as info:
                    await consumer.commit({0: 5})
                assert info.value.reason == "group_active"


def test_the_old_module_name_is_gone() -> None:
    """jetsdk.consumer.group_offsets was a deprecated alias in 0.1.0; nothing depends on it."""
    with pytest.raises(ModuleNotFoundError):
        __import__("jetsdk.consumer.group_offsets")
