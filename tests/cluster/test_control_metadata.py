"""Control plane on a real 3-server cluster (nats-server + 3 `jet server` processes):
replicated stream metadata, placement, forwarding, idempotency, deletion everywhere.

One cluster is shared by the module (nothing here kills a server); every wait is bounded.
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Iterator
from functools import partial
from typing import Any

import pytest

from jetsdk import Client, Producer
from jetsdk.codec.error_codes import AckPolicy, ErrorCode
from jetsdk.codec.frames import Api
from jetsdk.codec.messages import ProduceMessage, encode_json
from jetserver.testing.devcluster import DevCluster
from support.raw_client import RawClient, ServerError

from .control_kit import assignments, call, dev_cluster, eventually, metadata, metadata_leader


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevCluster]:
    with dev_cluster(tmp_path_factory.mktemp("control")) as dev:
        yield dev


async def followers(cluster: DevCluster) -> list[str]:
    leader = await metadata_leader(cluster)
    return [p.server_id for p in cluster.servers if p.server_id != leader]


@pytest.mark.anyio
async def test_metadata_lists_every_server_and_the_metadata_leader(cluster: DevCluster) -> None:
    leader = await metadata_leader(cluster)
    for p in cluster.servers:
        answer = await metadata(p.address)
        assert answer["servers"] == [
            {"id": q.server_id, "address": q.address, "live": True} for q in cluster.servers
        ]
        assert answer["metadata_leader"] == leader


@pytest.mark.anyio
async def test_rf3_stream_is_known_everywhere_and_spread_evenly(cluster: DevCluster) -> None:
    follower = cluster.server((await followers(cluster))[0])
    answer = await call(
        follower.address,
        lambda c: c.create_stream(name="even", subject="even", partitions=6, replication_factor=3),
    )
    assert answer["created"] is True
    parts = answer["stream"]["partitions"]
    assert Counter(p["leader"] for p in parts) == {"s1": 2, "s2": 2, "s3": 2}
    for p in parts:
        assert sorted(p["replicas"]) == ["s1", "s2", "s3"]
        assert p["replicas"][0] == p["leader"]
        assert p["isr"] == p["replicas"]
        assert p["leader_epoch"] == 0
    expected = [(p["leader"], tuple(p["replicas"]), 0) for p in parts]

    async def everywhere() -> bool | None:
        for q in cluster.servers:
            if assignments(await metadata(q.address), "even") != expected:
                return None
        return True

    await eventually(everywhere, "every server knows the stream")
    # Every partition leader has opened its replica: ListOffsets answers at once there,
    # and NOT_LEADER elsewhere.
    for p in parts:
        for q in cluster.servers:
            request = partial(RawClient.list_offsets, stream="even", partition=p["partition"])
            if q.server_id == p["leader"]:
                assert (await call(q.address, request))["offset"] == 0
            else:
                with pytest.raises(ServerError) as info:
                    await call(q.address, request)
                assert info.value.code == ErrorCode.NOT_LEADER
                assert info.value.error.details["leader"] == p["leader"]


@pytest.mark.anyio
async def test_create_and_delete_through_a_follower_are_forwarded(cluster: DevCluster) -> None:
    for sid in await followers(cluster):
        name = f"fwd-{sid}"
        address = cluster.server(sid).address
        spec: dict[str, Any] = {"name": name, "subject": name, "replication_factor": 2}
        created = await call(address, partial(RawClient.create_stream, **spec))
        assert created["created"] is True
        # Read-your-writes on the server that answered.
        assert assignments(await metadata(address), name)
        deleted = await call(address, partial(RawClient.delete_stream, name=name))
        assert deleted == {"deleted": True}
        assert not assignments(await metadata(address), name)


@pytest.mark.anyio
async def test_creates_are_idempotent_across_servers(cluster: DevCluster) -> None:
    spec = {"name": "idem", "subject": "idem", "partitions": 2, "replication_factor": 3}
    first = await call(cluster.servers[0].address, lambda c: c.create_stream(**spec))
    assert first["created"] is True
    for p in cluster.servers:
        again = await call(p.address, lambda c: c.create_stream(**spec))
        assert again["created"] is False
        assert again["stream"] == first["stream"]
    with pytest.raises(ServerError) as info:
        await call(cluster.servers[1].address, lambda c: c.create_stream(**spec, compact=True))
    assert info.value.code == ErrorCode.STREAM_EXISTS


@pytest.mark.anyio
async def test_an_op_id_is_applied_once_whichever_server_receives_it(cluster: DevCluster) -> None:
    op_id = uuid.uuid4().hex
    spec = {"name": "once", "subject": "once", "op_id": op_id}
    answers = [await call(p.address, lambda c: c.create_stream(**spec)) for p in cluster.servers]
    # The retries are answered with the first outcome, not a fresh "created": false.
    assert [a["created"] for a in answers] == [True, True, True]
    delete = {"name": "once", "op_id": uuid.uuid4().hex}
    for p in cluster.servers:
        answer = await call(p.address, lambda c: c.call_json(Api.DELETE_STREAM, delete))
        assert answer == {"deleted": True}  # not STREAM_NOT_FOUND for the retries
    with pytest.raises(ServerError) as info:
        await call(cluster.servers[0].address, lambda c: c.delete_stream("once"))
    assert info.value.code == ErrorCode.STREAM_NOT_FOUND


@pytest.mark.anyio
async def test_replication_factor_above_the_servers_is_refused(cluster: DevCluster) -> None:
    big = {"name": "big", "subject": "big", "replication_factor": 4}
    for p in cluster.servers:
        with pytest.raises(ServerError) as info:
            await call(p.address, lambda c: c.create_stream(**big))
        assert info.value.code == ErrorCode.INVALID_ARGUMENT
        assert info.value.error.details == {"field": "replication_factor"}
        assert info.value.error.message == (
            "replication factor 4 exceeds the 3 live servers of the cluster (s1, s2, s3)"
        )


@pytest.mark.anyio
async def test_sdk_produces_and_consumes_through_every_leader(cluster: DevCluster) -> None:
    async with Client(cluster.addresses[-1:]) as client:
        # RF 1: every partition led by another server, and nothing here waits on replication.
        info = await client.create_stream("sdk", partitions=3, replication_factor=1)
        assert sorted(p.leader or "" for p in info.partitions) == ["s1", "s2", "s3"]
        async with Producer(client, "sdk", ack=AckPolicy.ALL) as producer:
            acks = [await producer.send(b"m%d" % i, partition=i % 3) for i in range(9)]
        assert sorted((a.partition, a.offset) for a in acks) == [
            (p, o) for p in range(3) for o in range(3)
        ]
        for p in range(3):
            header, _records = await client.fetch("sdk", p, 0, max_bytes=1 << 20, max_wait=1.0)
            assert header.hw == 3


@pytest.mark.anyio
async def test_produce_to_a_non_leader_is_refused(cluster: DevCluster) -> None:
    answer = await call(
        cluster.servers[0].address,
        lambda c: c.create_stream(name="nl", subject="nl", replication_factor=3),
    )
    leader = answer["stream"]["partitions"][0]["leader"]
    other = next(p for p in cluster.servers if p.server_id != leader)
    with pytest.raises(ServerError) as info:
        await call(other.address, lambda c: c.produce("nl", 0, [ProduceMessage(b"x")]))
    assert info.value.code == ErrorCode.NOT_LEADER
    assert info.value.error.details["leader"] == leader


@pytest.mark.anyio
async def test_delete_removes_the_data_on_every_server(cluster: DevCluster) -> None:
    async with Client(cluster.addresses) as client:
        await client.create_stream("gone", partitions=2, replication_factor=3)
        async with Producer(client, "gone", ack=AckPolicy.LEADER) as producer:
            for i in range(4):
                await producer.send(b"x", partition=i % 2)
        dirs = [p.data_dir / "streams" for p in cluster.servers]

        def stream_dirs() -> list[str]:
            return sorted(d.name for root in dirs for d in root.iterdir() if "gone" in d.name)

        assert len(stream_dirs()) == 3  # one replica directory per server
        await client.delete_stream("gone")

        async def removed() -> bool | None:
            return True if not stream_dirs() else None

        await eventually(removed, "the stream's data removed on every server")
    for p in cluster.servers:
        assert not assignments(await metadata(p.address), "gone")


@pytest.mark.anyio
async def test_report_leader_on_a_follower_is_not_leader(cluster: DevCluster) -> None:
    leader = await metadata_leader(cluster)
    follower = next(p for p in cluster.servers if p.server_id != leader)
    body = {"stream": "x", "partition": 0, "leader_epoch": 0, "reporter": "s1"}
    with pytest.raises(ServerError) as info:
        await call(follower.address, lambda c: c.request(Api.REPORT_LEADER, encode_json(body)))
    assert info.value.code == ErrorCode.NOT_LEADER
    assert info.value.error.details == {"leader": leader}


@pytest.mark.anyio
async def test_settings_beyond_their_limits_are_refused_by_every_server(
    cluster: DevCluster,
) -> None:
    """Issue 31 item 2 in a cluster: each server (followers check before forwarding, the
    metadata leader again) refuses with the field named; the largest values work on 3
    replicas."""
    bad = [
        ("duplicate_window_s", 1e300),
        ("segment_max_bytes", 2**40),
        ("retention_max_age_s", 2**63),
        ("min_isr", 4),
        ("surprise", 1),
    ]
    for p in cluster.servers:
        for field, value in bad:
            body = {"name": "lim", "subject": "lim", "replication_factor": 3, field: value}
            with pytest.raises(ServerError) as info:
                await call(p.address, lambda c, b=body: c.create_stream(**b))
            assert info.value.code == ErrorCode.INVALID_ARGUMENT, (p.server_id, field)
            assert info.value.error.details == {"field": field}
    top = {
        "name": "lim",
        "subject": "lim",
        "replication_factor": 3,
        "duplicate_window_s": 3_155_760_000.0,
        "segment_max_bytes": 2**31 - 1,
        "retention_max_bytes": 2**63 - 1,
    }
    created = await call(cluster.servers[1].address, lambda c: c.create_stream(**top))
    assert created["created"] is True
    assert created["stream"]["config"]["duplicate_window_s"] == 3_155_760_000.0
    async with (
        Client(cluster.addresses) as client,
        Producer(client, "lim", ack=AckPolicy.ALL) as producer,
    ):
        acks = [await producer.send(b"v%d" % i) for i in range(20)]
    assert [a.offset for a in acks] == list(range(20))
