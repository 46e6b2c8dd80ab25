"""ISR replication on a real 3-server cluster (issue 4 items 3, 5, 7b).

One cluster for the module (nats-server + 3 ``jet server`` processes on 127.0.0.1, the
follower lag bound lowered to 2 s so that the ISR tests are quick):

- RF=3 with ack ALL: every ack is committed, every replica's files hold the same bytes up
  to the HW, and every replica's HW reaches it (piggybacked on replica fetches);
- consumers only see committed records; a consumer may read from an ISR follower (read
  replicas), and a server without a replica sends it to the leader (NOT_LEADER);
- SIGSTOP a follower: records stay uncommitted until the leader drops it from the ISR
  (through the metadata), then ALL writes continue; with ``min_isr`` 3 they are refused
  (NOT_ENOUGH_REPLICAS) while LEADER writes still work; SIGCONT: it catches up and rejoins;
- durability ``replicated`` commits too.

Every wait is bounded; processes are paused, resumed and stopped by PID.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from cluster.harness import Cluster, needs_cluster
from cluster.views import (
    partition_view,
    replica_logs,
    wait_caught_up,
    wait_full_isr,
    wait_info,
)
from jetsdk import Client, Consumer, Producer
from jetsdk.codec.error_codes import AckPolicy, ErrorCode
from jetsdk.codec.messages import ProduceMessage
from jetsdk.errors import NotEnoughReplicas
from support.raw_client import RawClient, ServerError

pytestmark = [pytest.mark.anyio, needs_cluster]

LAG_MAX_S = 2.0
"""replication.replica_lag_max_s of the test servers."""
BOUND_S = 30.0
"""Bound on any cluster-side change (ISR, catching up, leader)."""
COUNT = 300
"""Messages of the first test."""


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    root: Path = tmp_path_factory.mktemp("replication")
    settings = {"replication": {"replica_lag_max_s": LAG_MAX_S}}
    with Cluster(root=root, size=3, settings=settings) as c:
        yield c


def client(cluster: Cluster) -> Client:
    return Client(cluster.addresses, request_timeout=10.0)


async def hw_of(address: str, stream: str) -> int | None:
    view = await partition_view(address, stream)
    return None if view is None else view[0].get("hw")


async def wait_all_hw(cluster: Cluster, stream: str, hw: int) -> None:
    """Every server's own view of the HW reaches ``hw`` (followers learn it by fetching)."""
    with anyio.fail_after(BOUND_S):
        while True:
            seen = [await hw_of(s.address, stream) for s in cluster.live()]
            if all(h == hw for h in seen):
                return
            await anyio.sleep(0.05)


async def test_rf3_ack_all_commits_on_every_replica_and_logs_match(cluster: Cluster) -> None:
    async with client(cluster) as c:
        await c.create_stream("rep", replication_factor=3)
        await wait_full_isr(cluster, "rep", 0, 3, BOUND_S)
        async with Producer(c, "rep", ack=AckPolicy.ALL, idempotent=True) as p:
            handles = [await p.send_soon(b"m%04d" % i) for i in range(COUNT)]
            acks = [await h for h in handles]
    assert sorted(a.offset for a in acks) == list(range(COUNT))
    info, hw = await wait_caught_up(cluster, "rep", 0, BOUND_S)
    assert hw == COUNT
    logs = await anyio.to_thread.run_sync(replica_logs, cluster, "rep", 0, info.replicas)
    reference = [r.raw for r in logs[info.replicas[0]][:hw]]
    assert len(reference) == COUNT
    for sid, records in logs.items():
        assert [r.raw for r in records[:hw]] == reference, f"{sid} differs below the HW"
    await wait_all_hw(cluster, "rep", COUNT)


async def test_consumers_read_committed_records_from_a_follower(cluster: Cluster) -> None:
    info, leader = await wait_full_isr(cluster, "rep", 0, 3, BOUND_S)
    follower = cluster.server(next(r for r in info.isr if r != leader))
    async with await RawClient.connect(follower.address) as raw:
        header, records = await raw.fetch("rep", 0, offset=0, max_bytes=1 << 20, max_wait_ms=0)
        assert header.error_code == 0
        assert records
        assert records[0].value == b"m0000"
        assert all(r.offset < header.hw for r in records)
        # at the follower's HW: nothing more (only committed records are served)
        tail, more = await raw.fetch("rep", 0, offset=header.hw, max_wait_ms=0)
        assert tail.error_code == 0
        assert more == []
    async with client(cluster) as c:
        async with Consumer(c, "rep", start="earliest", read_replicas=True) as consumer:
            values = []
            with anyio.fail_after(BOUND_S):
                async for msg in consumer:
                    values.append(msg.value)
                    if len(values) == COUNT:
                        break
        assert values == [b"m%04d" % i for i in range(COUNT)]
        assert c._read_replica[("rep", 0)] != leader  # the reads went to a follower


async def test_a_server_without_a_replica_sends_consumers_to_the_leader(cluster: Cluster) -> None:
    async with client(cluster) as c:
        await c.create_stream("two", replication_factor=2)
    info = await wait_info(
        cluster, "two", 0, lambda i: i.leader is not None and len(i.isr) == 2, BOUND_S, "ISR 2"
    )
    outsider = next(s for s in cluster.servers if s.server_id not in info.replicas)
    async with await RawClient.connect(outsider.address) as raw:
        with pytest.raises(ServerError) as caught:
            await raw.fetch("two", 0, offset=0, max_wait_ms=0)
    assert caught.value.code == ErrorCode.NOT_LEADER
    assert caught.value.error.details["leader"] == info.leader


async def test_paused_follower_leaves_the_isr_min_isr_refuses_and_it_rejoins(
    cluster: Cluster,
) -> None:
    async with client(cluster) as c:
        await c.create_stream("strict", replication_factor=3, min_isr=3)
        _rep, rep_leader = await wait_full_isr(cluster, "rep", 0, 3, BOUND_S)
        _strict, strict_leader = await wait_full_isr(cluster, "strict", 0, 3, BOUND_S)
        paused = next(s for s in cluster.servers if s.server_id not in (rep_leader, strict_leader))
        leader_address = cluster.server(rep_leader).address
        paused.pause()
        try:
            # LEADER acks come at once, but nothing commits while the paused follower is
            # still in the ISR: consumers see none of it.
            async with await RawClient.connect(leader_address) as raw:
                before = await hw_of(leader_address, "rep")
                results = await raw.produce(
                    "rep", 0, [ProduceMessage(b"late%d" % i) for i in range(5)]
                )
                assert all(r.error_code == 0 for r in results)
                view = (await partition_view(leader_address, "rep") or {})[0]
                assert view["leo"] >= results[-1].offset + 1
                assert view["hw"] == before
                header, records = await raw.fetch("rep", 0, offset=before, max_wait_ms=0)
                assert records == []
                assert header.hw == before
            # ALL acks wait for the ISR to shrink (the lag bound), then go through.
            async with Producer(c, "rep", ack=AckPolicy.ALL, ack_timeout=BOUND_S) as p:
                ack = await p.send(b"after-pause")
            assert ack.offset > results[-1].offset
            await wait_info(
                cluster,
                "rep",
                0,
                lambda i: paused.server_id not in i.isr,
                BOUND_S,
                "paused follower out of the ISR",
            )
            # min_isr 3: once the ISR is 2, ALL is refused, LEADER still works
            await wait_info(
                cluster, "strict", 0, lambda i: len(i.isr) == 2, BOUND_S, "strict ISR of 2"
            )
            # NOT_ENOUGH_REPLICAS is retried until the delivery timeout, then raised.
            async with Producer(c, "strict", ack=AckPolicy.ALL, delivery_timeout=2.0) as p:
                with pytest.raises(NotEnoughReplicas):
                    await p.send(b"refused")
                leader_ack = await p.send(b"leader-only", ack=AckPolicy.LEADER)
                assert leader_ack.offset >= 0
        finally:
            paused.resume()
        # SIGCONT: it catches up and rejoins; ALL works again on the strict stream
        await wait_full_isr(cluster, "rep", 0, 3, BOUND_S)
        await wait_full_isr(cluster, "strict", 0, 3, BOUND_S)
        async with Producer(c, "strict", ack=AckPolicy.ALL, ack_timeout=BOUND_S) as p:
            assert (await p.send(b"accepted-again")).offset > leader_ack.offset
    for stream in ("rep", "strict"):
        info, hw = await wait_caught_up(cluster, stream, 0, BOUND_S)
        logs = await anyio.to_thread.run_sync(replica_logs, cluster, stream, 0, info.replicas)
        reference = [r.raw for r in logs[info.replicas[0]][:hw]]
        for sid, records in logs.items():
            assert [r.raw for r in records[:hw]] == reference, f"{stream}: {sid} differs"


async def test_replicated_durability_commits(cluster: Cluster) -> None:
    async with client(cluster) as c:
        await c.create_stream("fast", replication_factor=3, durability="replicated")
        await wait_full_isr(cluster, "fast", 0, 3, BOUND_S)
        async with Producer(c, "fast", ack=AckPolicy.ALL) as p:
            handles = [await p.send_soon(b"f%03d" % i) for i in range(100)]
            offsets = sorted([(await h).offset for h in handles])
        assert offsets == list(range(100))
        info = await c.stream_info("fast", refresh=True)
        assert info.config["durability"] == "replicated"
    await wait_all_hw(cluster, "fast", 100)
