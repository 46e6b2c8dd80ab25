"""Fetch sessions on a real 3-server cluster (spec/cluster.md, "Fetch sessions").

One cluster for the module, with the replica long poll raised to 20 s (so that a partition
held behind a parked request would show):

- every follower server fetches all the partitions it follows from one leader server
  through one session (metrics ``jet_fetch_session_partitions``), and ALL-acked records of
  every partition reach every replica's files;
- a stream created while the sessions are parked joins them at once (a wake), so its first
  ALL ack does not wait for the parked long poll to end;
- :class:`~jetserver.replication.session.FetchSession` used directly against a leader:
  several partitions in one ReplicaFetch, each answered on its own (an offset past the
  leader's end: OFFSET_OUT_OF_RANGE with the leader's offsets; a stale epoch: NotLeader),
  neither changing the leader's view of its followers; a partition alone in its session
  sends its own requests from its fetcher's task, and another partition that asks while
  such a round is parked wakes it.

Every wait is bounded.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator

import anyio
import nats
import pytest
from nats.aio.msg import Msg

from cluster.harness import Cluster, needs_cluster
from cluster.metered import metered_cluster, metrics_port, per_leader, scrape
from cluster.streams import create_replicated, produce_all
from cluster.views import replica_logs, wait_caught_up, wait_full_isr
from jetsdk import Client, Producer
from jetsdk.codec.error_codes import AckPolicy, ErrorCode
from jetsdk.codec.fetch_messages import FetchRequest, decode_fetch_response, encode_fetch_request
from jetsdk.codec.frames import Api
from jetsdk.codec.record import decode_record
from jetsdk.codec.replica_fetch import (
    ReplicaFetchPartition,
    ReplicaFetchRequest,
    decode_replica_fetch_response,
    encode_replica_fetch_request,
)
from jetsdk.envelope import parse_message
from jetsdk.errors import InvalidArgument, JetError, NotLeader
from jetserver.broker.stored_copy import STORED_HEADER
from jetserver.replication import ReplicationConfig
from jetserver.replication.session import FetchSession
from jetserver.testing import nats_flushed
from jetserver.testing.waiting import wait_until_async

pytestmark = [pytest.mark.anyio, needs_cluster]

FETCH_MAX_WAIT_S = 20.0
"""replication.fetch_max_wait_s of the test servers."""
BOUND_S = 30.0
"""Bound on any cluster-side change."""
PARTITIONS = 12
"""Partitions of the wide stream."""


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    settings = {"replication": {"fetch_max_wait_s": FETCH_MAX_WAIT_S}}
    with metered_cluster(tmp_path_factory.mktemp("sessions"), settings) as (c, _ports):
        yield c


def session_partitions(cluster: Cluster, server_id: str) -> dict[str, int]:
    """leader address -> follower replicas using the session (from the server's metrics)."""
    return per_leader(metrics_port(cluster, server_id), "jet_fetch_session_partitions")


PARKED_AFTER_S = 0.3
"""No session answered for this long: every request is parked (a leader answers one with
news at once, a parked one after FETCH_MAX_WAIT_S)."""


def session_requests(cluster: Cluster, server_id: str) -> dict[str, int]:
    """leader address -> ReplicaFetch requests answered (from the server's metrics)."""
    return per_leader(metrics_port(cluster, server_id), "jet_fetch_session_requests_total")


async def wait_sessions_parked(cluster: Cluster) -> None:
    """Wait until every follower session's request is parked at its leader: no session's
    count of answered requests moved for PARKED_AFTER_S."""

    def counts() -> list[dict[str, int]]:
        return [session_requests(cluster, s.server_id) for s in cluster.servers]

    with anyio.fail_after(BOUND_S):
        last = await anyio.to_thread.run_sync(counts)
        since = time.monotonic()
        while time.monotonic() - since < PARKED_AFTER_S:
            await anyio.sleep(0.05)
            now = await anyio.to_thread.run_sync(counts)
            if now != last:
                last, since = now, time.monotonic()


async def test_followers_share_one_session_per_leader_server(cluster: Cluster) -> None:
    infos = [info for info, _ in await create_replicated(cluster, "wide", PARTITIONS, BOUND_S)]
    await produce_all(cluster, "wide", 10 * PARTITIONS)
    for p, info in enumerate(infos):
        _info, hw = await wait_caught_up(cluster, "wide", p, BOUND_S)
        logs = await anyio.to_thread.run_sync(replica_logs, cluster, "wide", p, info.replicas)
        assert all(len(rs) >= hw for rs in logs.values())
    address = {s.server_id: s.address for s in cluster.servers}
    for server in cluster.servers:
        followed: dict[str, int] = {}
        for info in infos:
            if info.leader != server.server_id:
                assert info.leader is not None
                followed[address[info.leader]] = followed.get(address[info.leader], 0) + 1
        # One session per leader server, used by every partition followed from it.
        seen = await anyio.to_thread.run_sync(session_partitions, cluster, server.server_id)
        assert {a: n for a, n in seen.items() if n} == followed


async def test_a_new_stream_joins_parked_sessions_at_once(cluster: Cluster) -> None:
    await create_replicated(cluster, "parked", 1, BOUND_S)
    await wait_sessions_parked(cluster)
    async with Client(cluster.addresses, request_timeout=30.0) as client:
        await client.create_stream("late", "late", partitions=3, replication_factor=3)
    started = time.monotonic()
    await produce_all(cluster, "late", 3)
    # An ALL ack needs each follower's fetch in the new epoch: without the wake it waits
    # for the parked request to end (up to 20 s).
    assert time.monotonic() - started < FETCH_MAX_WAIT_S / 2


async def test_a_session_answers_each_partition_on_its_own(cluster: Cluster) -> None:
    (info, leader), _ = await create_replicated(cluster, "direct", 2, BOUND_S)
    await produce_all(cluster, "direct", 4)
    _info, hw = await wait_caught_up(cluster, "direct", 0, BOUND_S)
    follower = next(r for r in info.replicas if r != leader)
    replica_id = info.replicas.index(follower)
    session = FetchSession(cluster.server(leader).address, ReplicationConfig())
    session.users = 1
    beyond = ReplicaFetchPartition(
        "direct", 0, 1_000_000, replica_id, 1_000_000, info.leader_epoch, 1 << 20
    )
    stale = ReplicaFetchPartition("direct", 0, 0, replica_id, 0, info.leader_epoch + 7, 1 << 20)
    results: dict[str, object] = {}

    async def ask(name: str, part: ReplicaFetchPartition) -> None:
        try:
            results[name] = await session.fetch(part, BOUND_S)
        except NotLeader as exc:
            results[name] = exc

    with anyio.fail_after(BOUND_S):
        async with anyio.create_task_group() as tg:
            tg.start_soon(session.run)
            async with anyio.create_task_group() as asks:
                asks.start_soon(ask, "beyond", beyond)
                asks.start_soon(ask, "stale", stale)
            tg.cancel_scope.cancel()
    answer = results["beyond"]
    assert not isinstance(answer, Exception)
    assert answer.error_code == ErrorCode.OFFSET_OUT_OF_RANGE  # type: ignore[attr-defined]
    assert answer.leo >= hw  # type: ignore[attr-defined]
    assert isinstance(results["stale"], NotLeader)
    assert session.requests == 1  # both partitions in one request
    # Neither changed the leader's view: the real follower stays in the ISR.
    await wait_full_isr(cluster, "direct", 0, 3, BOUND_S)


async def test_a_lone_partition_sends_its_fetches_from_its_own_task(cluster: Cluster) -> None:
    """Once the session's loop has dialed (the first request), a partition fetching alone
    sends each request and takes its answer in its own task, without the loop's round
    trip: every answer arrives, each request is one of its own."""
    [(info, leader)] = await create_replicated(cluster, "lone", 1, BOUND_S)
    follower = next(r for r in info.replicas if r != leader)
    # Past the leader's end: answered at once, and the leader's view does not change.
    beyond = ReplicaFetchPartition(
        "lone", 0, 1_000_000, info.replicas.index(follower), 1_000_000, info.leader_epoch, 1 << 20
    )
    session = FetchSession(cluster.server(leader).address, ReplicationConfig())
    session.users = 1
    codes = []
    with anyio.fail_after(BOUND_S):
        async with anyio.create_task_group() as tg:
            tg.start_soon(session.run)
            for _ in range(4):
                codes.append((await session.fetch(beyond, BOUND_S)).error_code)
            tg.cancel_scope.cancel()
    assert codes == [ErrorCode.OFFSET_OUT_OF_RANGE] * 4
    assert session.requests == 4
    assert session.inline_rounds == 3  # all but the first, which waited for the dial
    await wait_full_isr(cluster, "lone", 0, 3, BOUND_S)


async def test_a_partition_asking_during_another_ones_own_round_wakes_it(
    cluster: Cluster,
) -> None:
    """A partition that asks while another partition's own round (sent from its fetcher's
    task) is parked at the leader wakes that round: it is answered at once, not when the
    long poll ends, and the parked partition goes on waiting in the session's next
    request."""
    infos = [info for info, _ in await create_replicated(cluster, "pair", 4, BOUND_S)]
    # Four partitions on three servers: two of them have the same leader.
    p, q = next(
        (i, j) for i in range(4) for j in range(i + 1, 4) if infos[i].leader == infos[j].leader
    )
    leader = infos[p].leader
    assert leader is not None
    follower = next(r for r in infos[p].replicas if r != leader)
    async with (
        Client(cluster.addresses, request_timeout=10.0) as client,
        Producer(client, "pair", ack=AckPolicy.ALL) as producer,
    ):
        await producer.send(b"one", partition=p)
    await wait_caught_up(cluster, "pair", p, BOUND_S)  # the follower holds offset 0

    def part(n: int, offset: int) -> ReplicaFetchPartition:
        index = infos[n].replicas.index(follower)
        return ReplicaFetchPartition(
            "pair", n, offset, index, offset, infos[n].leader_epoch, 1 << 20
        )

    config = ReplicationConfig()  # its own long poll: fetch_max_wait_s
    session = FetchSession(cluster.server(leader).address, config)
    session.users = 1
    parked_answers = 0

    async def park() -> None:
        nonlocal parked_answers
        offset = 0  # answered at once (the record), then at the log's end: parks
        while True:
            answer = await session.fetch(part(p, offset), 3 * FETCH_MAX_WAIT_S)
            offset = answer.leo  # the follower holds it all (caught up above)
            parked_answers += 1

    with anyio.fail_after(BOUND_S):
        async with anyio.create_task_group() as tg:
            tg.start_soon(session.run)
            await session.fetch(part(p, 1_000_000), BOUND_S)  # the loop dials
            tg.start_soon(park)
            # Answered once (the record), its next own round parks: it is out once more
            # rounds began than it was answered.
            await wait_until_async(
                lambda: session.inline_rounds > parked_answers >= 1, BOUND_S, "a parked round"
            )
            before = parked_answers
            started = time.monotonic()
            answer = await session.fetch(part(q, 1_000_000), BOUND_S)
            took = time.monotonic() - started
            still_parked = parked_answers == before
            tg.cancel_scope.cancel()
    assert answer.error_code == ErrorCode.OFFSET_OUT_OF_RANGE
    assert took < config.fetch_max_wait_s / 2
    assert still_parked
    assert session.wakes == 1
    await wait_full_isr(cluster, "pair", p, 3, BOUND_S)


async def test_an_answer_carries_every_partition_s_records_as_stored(cluster: Cluster) -> None:
    """One ReplicaFetch for two partitions led by one server: the records of both answers
    are the bytes the leader's files hold (as a consumer's Fetch reads them), the last
    answer's sent from its file (sendfile) after the rest of the frame, the first's read
    and joined into it."""
    infos = await create_replicated(cluster, "slices", 4, BOUND_S)
    await produce_all(cluster, "slices", 80)
    by_leader: dict[str, list[int]] = {}
    for p, (_info, leader) in enumerate(infos):
        by_leader.setdefault(leader, []).append(p)
    leader, parts = next((lead, ps) for lead, ps in by_leader.items() if len(ps) >= 2)
    parts = parts[:2]
    for p in parts:
        await wait_caught_up(cluster, "slices", p, BOUND_S)
    asks = []
    for p in parts:
        info = infos[p][0]
        follower = next(r for r in info.replicas if r != leader)
        replica_id = info.replicas.index(follower)
        asks.append(
            ReplicaFetchPartition(
                "slices", p, 0, replica_id, 0, info.leader_epoch, 1 << 20, slot=len(asks)
            )
        )
    req = ReplicaFetchRequest(
        session_id=77, max_wait_ms=0, max_bytes=1 << 22, partitions=tuple(asks)
    )
    async with Client(cluster.server(leader).address, request_timeout=BOUND_S) as at_leader:
        body = await at_leader.request_any(Api.REPLICA_FETCH, encode_replica_fetch_request(req))
        answers = decode_replica_fetch_response(body).answers
        stored = []
        for p in parts:
            fetched = await at_leader.request_any(
                Api.FETCH, encode_fetch_request(FetchRequest("slices", p, 0, 1 << 22, 0))
            )
            stored.append(bytes(decode_fetch_response(fetched)[1]))
    assert [a.index for a in answers] == [0, 1]
    assert [a.error_code for a in answers] == [ErrorCode.NONE, ErrorCode.NONE]
    assert all(stored)  # both partitions hold records
    assert [bytes(a.records) for a in answers] == stored


async def test_a_follower_fetch_is_refused_replica_fetch_is_the_one_follower_path(
    cluster: Cluster,
) -> None:
    """A Fetch with a follower's ``replica_id`` at the leader is refused (INVALID_ARGUMENT,
    field ``replica_id``) instead of being served up to the LEO as a follower's fetch, and
    it does not change the leader's view of that follower."""
    [(info, leader)] = await create_replicated(cluster, "asfollower", 1, BOUND_S)
    await produce_all(cluster, "asfollower", 1)
    follower = next(r for r in info.replicas if r != leader)
    req = FetchRequest(
        "asfollower", 0, 0, 1 << 20, 0, info.replicas.index(follower), 0, info.leader_epoch
    )
    async with Client(cluster.server(leader).address, request_timeout=BOUND_S) as at_leader:
        with pytest.raises(InvalidArgument) as refused:
            await at_leader.request_any(Api.FETCH, encode_fetch_request(req))
        assert refused.value.details.get("field") == "replica_id"
        assert "ReplicaFetch" in str(refused.value)
        consumer = FetchRequest("asfollower", 0, 0, 1 << 20, 0)  # a consumer's is served
        body = await at_leader.request_any(Api.FETCH, encode_fetch_request(consumer))
        header, records = decode_fetch_response(body)
        assert (header.error_code, header.hw, len(records) > 0) == (ErrorCode.NONE, 1, True)
    await wait_full_isr(cluster, "asfollower", 0, 3, BOUND_S)


async def test_a_session_dials_again_when_its_idle_connection_broke(cluster: Cluster) -> None:
    """A session whose connection broke while no partition fetched (its leader restarted)
    dials again for the next request of any kind (here OffsetForLeaderEpoch, which a
    follower sends first after an election)."""
    [(info, leader)] = await create_replicated(cluster, "redial", 1, BOUND_S)
    follower = next(r for r in info.replicas if r != leader)
    ask = {
        "stream": "redial",
        "partition": 0,
        "leader_epoch": 0,
        "current_leader_epoch": -1,
        "replica_id": info.replicas.index(follower),
    }
    session = FetchSession(cluster.server(leader).address, ReplicationConfig())
    session.users = 1
    answered: list[str] = []

    async def ask_until_answered() -> None:
        while True:
            try:
                await session.request_json(Api.OFFSET_FOR_LEADER_EPOCH, ask, 2.0)
                answered.append("answer")
                return
            except NotLeader:
                answered.append("not leader")  # an answer too: the connection works
                return
            except JetError:
                await anyio.sleep(0.2)

    with anyio.fail_after(3 * BOUND_S):
        async with anyio.create_task_group() as tg:
            tg.start_soon(session.run)
            await ask_until_answered()
            await anyio.to_thread.run_sync(cluster.server(leader).stop)
            await anyio.to_thread.run_sync(cluster.server(leader).start)
            answered.clear()
            await ask_until_answered()
            tg.cancel_scope.cancel()
    assert answered


async def test_replicated_all_acked_produce_is_appended_by_the_leader_directly(
    cluster: Cluster,
) -> None:
    """At RF 3 an ALL-acked Produce is appended by the leader itself
    (``jet_partition_produce_direct_total``), a LEADER-acked one still goes through NATS;
    NATS subscribers get every message once, unmarked (so a new leader elected while this
    one is cut off would store them: tests/cluster/test_faults_partition.py,
    leader-isolated); each record is stored once, in every replica.

    Run after the test that restarts a server, it also covers a session whose request
    could not be sent (its connection had died with the old process): that request's
    partitions must get the error at once, not wait for their fetch timeout (21 s here;
    the ALL acks then waited that long, and their sends were retried)."""
    seen: list[tuple[bytes, dict[str, str]]] = []
    all_seen = anyio.Event()

    async def on_msg(msg: Msg) -> None:
        seen.append((msg.data, msg.headers or {}))
        if len(seen) >= 10:
            all_seen.set()

    nc = await nats.connect(cluster.nats_url)
    try:
        await nc.subscribe("viadirect", cb=on_msg)
        await nats_flushed(nc)
        async with Client(cluster.addresses, request_timeout=30.0) as client:
            await client.create_stream("viadirect", "viadirect", replication_factor=3)
            info, leader = await wait_full_isr(cluster, "viadirect", 0, 3, BOUND_S)
            started = time.monotonic()
            for policy, name in ((AckPolicy.ALL, b"all"), (AckPolicy.LEADER, b"leader")):
                async with Producer(client, "viadirect", ack=policy, linger=0) as producer:
                    for i in range(5):
                        await producer.send(b"%s-%d" % (name, i))
            took = time.monotonic() - started
        with anyio.fail_after(BOUND_S):
            await all_seen.wait()
    finally:
        await nc.close()
    assert took < FETCH_MAX_WAIT_S / 2, "a follower's fetch waited for its timeout"
    direct = await anyio.to_thread.run_sync(direct_count, cluster, leader, "viadirect")
    assert direct == 5  # the ALL-acked ones
    assert sorted(_value(data) for data, _h in seen) == sorted(
        [b"all-%d" % i for i in range(5)] + [b"leader-%d" % i for i in range(5)]
    )
    assert not any(STORED_HEADER in headers for _d, headers in seen)
    _info, hw = await wait_caught_up(cluster, "viadirect", 0, BOUND_S)
    assert hw == 10
    logs = await anyio.to_thread.run_sync(replica_logs, cluster, "viadirect", 0, info.replicas)
    expected = [b"all-%d" % i for i in range(5)] + [b"leader-%d" % i for i in range(5)]
    assert {sid: [decode_record(r.raw)[0].value for r in rs] for sid, rs in logs.items()} == {
        sid: expected for sid in info.replicas
    }


def _value(envelope: bytes) -> bytes:
    message = parse_message(envelope)
    assert message is not None
    return message.value


def direct_count(cluster: Cluster, server_id: str, stream: str) -> int:
    """jet_partition_produce_direct_total of ``stream``/0 on ``server_id``."""
    text = scrape(metrics_port(cluster, server_id))
    pattern = rf'^jet_partition_produce_direct_total\{{stream="{stream}",partition="0"\}} (\d+)$'
    found = re.search(pattern, text, re.M)
    assert found is not None
    return int(found.group(1))


CATCH_UP_VALUES = 96
"""64 KiB values a paused follower misses: 6 MiB."""


async def test_a_lagging_follower_catches_up_in_few_large_fetches(cluster: Cluster) -> None:
    """A follower 6 MiB behind takes it in rounds of up to ``replication.fetch_max_bytes``
    (4 MiB by default): the answer its parked request got (the first record), then two
    rounds, then the HW; with 1 MiB fetches it took six rounds for the records alone."""
    [(info, leader)] = await create_replicated(cluster, "catchup", 1, BOUND_S)
    await wait_caught_up(cluster, "catchup", 0, BOUND_S)
    follower = next(r for r in info.replicas if r != leader)
    leader_address = cluster.server(leader).address
    before = (await anyio.to_thread.run_sync(session_requests, cluster, follower)).get(
        leader_address, 0
    )
    cluster.server(follower).pause()
    try:
        async with (
            Client(cluster.addresses, request_timeout=10.0) as client,
            Producer(client, "catchup", ack=AckPolicy.LEADER) as producer,
        ):
            value = bytes(range(256)) * 256  # 64 KiB
            for _ in range(CATCH_UP_VALUES):
                await producer.send_soon(value)
            await producer.flush()
    finally:
        cluster.server(follower).resume()
    _info, hw = await wait_caught_up(cluster, "catchup", 0, BOUND_S)
    assert hw == CATCH_UP_VALUES
    after = (await anyio.to_thread.run_sync(session_requests, cluster, follower))[leader_address]
    assert after - before <= 6
