"""Group consumers against the in-memory fake cluster: membership, commits, callbacks, acks."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import anyio
import anyio.lowlevel
import pytest

from jetsdk import Client
from jetsdk.codec.error_codes import ErrorCode
from jetsdk.codec.record import iter_records
from jetsdk.consumer import Consumer, OffsetAndMetadata
from jetsdk.group import StreamPartition as SP
from jetsdk.group.errors import CommitFailed, MemberFenced, NoCommittedOffset
from jetsdk.group.member import MemberConfig
from jetsdk.group.records import GROUPS_STREAM, GroupRecord, decode_record
from jetsdk.group.records import Leave as LeaveRecord

from .fake_jet import FakeCluster
from .helpers import cluster_and_client

pytestmark = pytest.mark.anyio

CFG = MemberConfig(
    session_timeout=1.0, heartbeat_interval=0.1, release_timeout=2.0, checkpoint_interval=5.0
)


def member(client: Client, group: str = "g", **kwargs: Any) -> Consumer:
    kwargs.setdefault("group_config", CFG)
    return Consumer(client, group=group, streams=kwargs.pop("streams", ["s"]), **kwargs)


def fill(cluster: FakeCluster, partitions: int, per_partition: int, stream: str = "s") -> None:
    cluster.add_stream(stream, partitions=partitions)
    for i in range(per_partition):
        for p in range(partitions):
            cluster.append(stream, p, b"%d-%d" % (p, i))


async def take(consumer: Consumer, n: int) -> list[tuple[int, int]]:
    got: list[tuple[int, int]] = []
    with anyio.fail_after(10):
        while len(got) < n:
            got += [(m.partition, m.offset) for m in await consumer.fetch(n - len(got))]
    return got


async def drain_until_error(consumer: Consumer) -> None:
    while True:
        await consumer.fetch(timeout=0.05)


def group_records(cluster: FakeCluster) -> list[GroupRecord]:
    out = []
    for part in cluster.streams[GROUPS_STREAM].partitions:
        for record in iter_records(b"".join(part.records)):
            out.append(decode_record(record.value))
    return out


async def test_one_member_reads_all_and_a_restart_resumes_from_commits() -> None:
    async with cluster_and_client() as (cluster, client):
        fill(cluster, 4, 5)
        async with member(client) as c:
            assert c.group == "g"
            assert c.member_id
            assert c.generation == 1
            got = await take(c, 20)
            assert sorted(got) == [(p, o) for p in range(4) for o in range(5)]
            assert c.assignment() == [SP("s", p) for p in range(4)]
            assert c.lag() == 0
        assert any(isinstance(r, LeaveRecord) for r in group_records(cluster))
        for p in range(4):
            cluster.append("s", p, b"new")
        async with member(client) as c:
            assert [c.committed(p) for p in range(4)] == [OffsetAndMetadata(5)] * 4
            got = await take(c, 4)
            assert sorted(got) == [(p, 5) for p in range(4)]


async def test_two_members_share_then_one_leaves() -> None:
    async with cluster_and_client() as (cluster, client):
        fill(cluster, 4, 3)
        seen: list[tuple[int, int]] = []
        async with member(client) as a:
            seen += await take(a, 12)
            async with member(client) as b:
                with anyio.fail_after(10):
                    while len(a.assignment()) != 2 or len(b.assignment()) != 2:
                        await a.fetch(timeout=0.05)  # a's iteration lets revocations finish
                        await b.fetch(timeout=0.05)
                assert set(a.assignment()) | set(b.assignment()) == {SP("s", p) for p in range(4)}
                for p in range(4):
                    cluster.append("s", p, b"more")
                got_a: list[tuple[int, int]] = []
                got_b: list[tuple[int, int]] = []
                with anyio.fail_after(10):
                    while len(got_a) + len(got_b) < 4:
                        got_a += [(m.partition, m.offset) for m in await a.fetch(timeout=0.05)]
                        got_b += [(m.partition, m.offset) for m in await b.fetch(timeout=0.05)]
                assert sorted(got_a + got_b) == [(p, 3) for p in range(4)]
                assert {p for p, _ in got_a} == {k.partition for k in a.assignment()}
            # b left: a gets everything back at once (the leave released them)
            with anyio.fail_after(10):
                while len(a.assignment()) != 4:
                    await a.fetch(timeout=0.05)
            for p in range(4):
                cluster.append("s", p, b"last")
            assert sorted(await take(a, 4)) == [(p, 4) for p in range(4)]


async def test_callbacks_sync_and_async() -> None:
    async with cluster_and_client() as (cluster, client):
        fill(cluster, 2, 1)
        events: list[tuple[str, list[int]]] = []

        def assigned(parts: list[SP]) -> None:
            events.append(("assigned", [p.partition for p in parts]))

        async def revoked(parts: list[SP]) -> None:
            await anyio.lowlevel.checkpoint()
            events.append(("revoked", [p.partition for p in parts]))

        async with member(client, on_assigned=assigned, on_revoked=revoked) as a:
            await take(a, 2)
            async with member(client, assignors=["range"]) as b:
                with anyio.fail_after(10):
                    while not b.assignment():
                        await a.fetch(timeout=0.05)
                        await b.fetch(timeout=0.05)
            with anyio.fail_after(10):
                while len(a.assignment()) != 2:
                    await a.fetch(timeout=0.05)
        assert events[0] == ("assigned", [0, 1])
        assert events[1][0] == "revoked"
        assert len(events[1][1]) == 1
        assert events[2] == ("assigned", events[1][1])


async def test_manual_commit_with_metadata_and_failures() -> None:
    async with cluster_and_client() as (cluster, client):
        fill(cluster, 2, 5)
        async with member(client, auto_commit=None) as c:
            await take(c, 10)
            await c.commit({0: 3, 1: OffsetAndMetadata(4, "note")})
            assert c.committed(0) == OffsetAndMetadata(3)
            assert c.committed(1) == OffsetAndMetadata(4, "note")
            with pytest.raises(CommitFailed) as info:
                await c.commit({0: 1})  # below the committed offset
            assert info.value.reason == "regression"
            with pytest.raises(CommitFailed) as info:
                await c.commit({SP("other", 0): 1})
            assert info.value.reason == "not_owner"
            await c.commit(metadata="all")
            assert c.committed(0) == OffsetAndMetadata(5, "all")
        async with member(client, auto_commit=None) as c:
            assert c.committed(1) == OffsetAndMetadata(5, "all")  # no auto commit on close
            assert c.position(1) == 5


async def test_manual_acks_out_of_order_and_redelivery_counts() -> None:
    async with cluster_and_client() as (cluster, client):
        fill(cluster, 1, 6)
        async with member(client, manual_ack=True) as c:
            msgs = await c.fetch(timeout=5)
            assert [m.offset for m in msgs] == list(range(6))
            assert all(m.delivery_count == 1 for m in msgs)
            for i in (1, 3, 4):
                msgs[i].ack()
            c.ack(msgs[1])  # twice: no effect
            await c.commit()
            assert c.committed(0) == OffsetAndMetadata(0)
            msgs[0].ack()
            await c.commit()
            assert c.committed(0) == OffsetAndMetadata(2)
        # 2 and 5 were never acked: redelivered (and only they), counted as second deliveries
        async with member(client, manual_ack=True) as c:
            again = await c.fetch(timeout=5)
            assert [(m.offset, m.delivery_count) for m in again] == [(2, 2), (5, 2)]
            for m in again:
                m.ack()
            assert c.position(0) == 6
        async with member(client, manual_ack=True) as c:
            assert c.committed(0) == OffsetAndMetadata(6)


async def test_backpressure_bounds_unacked_messages() -> None:
    async with cluster_and_client() as (cluster, client):
        fill(cluster, 1, 10)
        async with member(client, manual_ack=True, max_unacked=3) as c:
            first = await c.fetch(timeout=5)
            assert len(first) == 3
            assert await c.fetch(timeout=0.1) == []  # waits: 3 un-acked
            first[1].ack()
            (nxt,) = await c.fetch(timeout=5)
            assert nxt.offset == 3


async def test_reset_raise_without_committed_offset_then_seek() -> None:
    async with cluster_and_client() as (cluster, client):
        fill(cluster, 1, 3)
        async with member(client, reset="raise") as c:
            with pytest.raises(NoCommittedOffset), anyio.fail_after(5):
                await c.fetch(timeout=5)
            c.seek(0, 1)
            assert [m.offset for m in await c.fetch(timeout=5)] == [1, 2]


async def test_start_latest_for_a_new_group() -> None:
    async with cluster_and_client() as (cluster, client):
        fill(cluster, 1, 3)
        async with member(client, reset="latest") as c:
            # Until the member has its partition, its start position is not chosen yet:
            # appending before that (a fixed 0.2 s wait did, on a loaded machine) would
            # put "fresh" below the latest offset it starts from.
            with anyio.fail_after(10):
                while not c.assignment():
                    assert await c.fetch(timeout=0.05) == []
            assert c.position(0) == 3
            cluster.append("s", 0, b"fresh")
            assert [m.value for m in await c.fetch(timeout=5)] == [b"fresh"]


async def test_static_member_restart_and_fencing() -> None:
    async with cluster_and_client() as (cluster, client):
        fill(cluster, 2, 2)
        async with member(client, instance_id="host-1") as a:
            await take(a, 4)
        # a temporary leave parked the slot; the new incarnation takes it at once
        async with member(client, instance_id="host-1") as a2:
            assert [a2.committed(p) for p in range(2)] == [OffsetAndMetadata(2)] * 2
            with anyio.fail_after(10):
                while len(a2.assignment()) != 2:
                    await a2.fetch(timeout=0.05)
            async with member(client, instance_id="host-1") as a3:
                with pytest.raises(MemberFenced), anyio.fail_after(10):
                    await drain_until_error(a2)
                with anyio.fail_after(10):
                    while len(a3.assignment()) != 2:
                        await a3.fetch(timeout=0.05)


async def test_several_streams_and_custom_assignor() -> None:
    class Everything:
        """Gives every partition to the first member (by key)."""

        name = "first"

        def assign(self, members: Sequence[Any], partitions: Sequence[SP]) -> dict[str, list[SP]]:
            keys = sorted(m.member for m in members)
            out: dict[str, list[SP]] = {k: [] for k in keys}
            out[keys[0]] = sorted(partitions)
            return out

    async with cluster_and_client() as (cluster, client):
        fill(cluster, 2, 1, "s")
        fill(cluster, 1, 1, "t")
        async with member(client, streams=["s", "t"], assignors=[Everything()]) as c:
            got = await take(c, 3)
            assert len(got) == 3
            with pytest.raises(Exception, match="several streams"):
                c.position(0)
            assert c.position(SP("t", 0)) == 1
            assert c.position(("s", 1)) == 1


async def test_lease_runs_out_when_appends_fail_then_the_member_resumes() -> None:
    async with cluster_and_client() as (cluster, client):
        fill(cluster, 2, 3)
        lost: list[list[SP]] = []
        assigned: list[list[SP]] = []
        async with member(
            client, on_lost=lost.append, on_assigned=assigned.append, auto_commit=0.05
        ) as c:
            assert sorted(await take(c, 6)) == [(p, o) for p in range(2) for o in range(3)]
            with anyio.fail_after(5):
                while any(c.committed(p) != OffsetAndMetadata(3) for p in range(2)):
                    await c.fetch(timeout=0.05)
            # Nothing reaches the group log for a while: no heartbeat is stored, so the
            # member cannot know it still owns its partitions and stops consuming them.
            cluster.fail_next_produce.extend([ErrorCode.UNAVAILABLE] * 60)
            with anyio.fail_after(10):
                while not lost:
                    await c.fetch(timeout=0.05)
            assert sorted(lost[0]) == [SP("s", 0), SP("s", 1)]
            assert c.assignment() == []
            for p in range(2):
                cluster.append("s", p, b"later")
            cluster.fail_next_produce.clear()
            # appends go through again: the ownership in the log is still ours, so it resumes
            got = await take(c, 2)
            assert sorted(got) == [(0, 3), (1, 3)]
            assert len(assigned) >= 2


async def test_unacked_messages_move_with_a_revoked_partition() -> None:
    async with cluster_and_client() as (cluster, client):
        fill(cluster, 2, 4)
        async with member(client, manual_ack=True, assignors=["range"]) as a:
            msgs = await a.fetch(timeout=5)
            with anyio.fail_after(5):
                while len(msgs) < 8:
                    msgs += await a.fetch(timeout=5)
            for m in msgs:
                if m.offset in (0, 2):
                    m.ack()  # 1 and 3 of each partition stay un-acked
            async with member(client, manual_ack=True, assignors=["range"]) as b:
                # a cannot finish (un-acked messages): the release goes out shortly before
                # its lease ends, carrying the progress; b skips 0 and 2 and counts 1 and 3
                got: list[tuple[int, int, int]] = []
                with anyio.fail_after(10):
                    while len(got) < 2:
                        await a.fetch(timeout=0.02)
                        got += [
                            (m.partition, m.offset, m.delivery_count)
                            for m in await b.fetch(timeout=0.02)
                        ]
                (moved,) = {p for p, _, _ in got}
                assert sorted(got) == [(moved, 1, 2), (moved, 3, 2)]
                assert [k.partition for k in b.assignment()] == [moved]
                assert b.committed(moved) == OffsetAndMetadata(1)
