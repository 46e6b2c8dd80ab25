"""HW news on a real 3-server cluster (spec/cluster.md, "Replica fetch": a HW alone answers a
parked replica fetch only after ``[replication] hw_news_delay_s``).

The replica long poll is raised to 20 s, so any answer sooner than that came from records,
a HW that was due, or a flush:

- one ack ALL message at a time, each sent once the last was acknowledged: each follower
  gets about one answer per message (its records, carrying the HW of the message before),
  not two (the records, then the HW on its own, as before);
- with no further records, a follower's HW still reaches the leader's within the delay
  plus a fetch round (the leader's parked-fetch timer), not at the long poll's end;
- a partition busy with records does not hold back the HW of a quiet one in the same
  fetch session;
- a session wake that came before its request still ends that request at once.

Every wait is bounded.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import anyio
import pytest

from cluster.harness import Cluster, needs_cluster
from cluster.metered import metered_cluster, metrics_port, per_leader
from cluster.streams import create_replicated
from cluster.views import partition_view, wait_caught_up
from jetsdk import Client, Producer
from jetsdk.codec.error_codes import AckPolicy
from jetsdk.codec.frames import Api
from jetsdk.codec.replica_fetch import (
    FLAG_WAKE,
    ReplicaFetchPartition,
    ReplicaFetchRequest,
    decode_replica_fetch_response,
    encode_replica_fetch_request,
)

pytestmark = [pytest.mark.anyio, needs_cluster]

FETCH_MAX_WAIT_S = 20.0
"""replication.fetch_max_wait_s of the test servers."""
HW_NEWS_DELAY_S = 0.5
"""replication.hw_news_delay_s of the test servers (the default is 25 ms): far above a
record's round, so a HW that comes sooner than this rode with records (and on a loaded
test machine a gap in the busy records below does not let a HW through on its own)."""
BOUND_S = 30.0
"""Bound on any cluster-side change."""
MESSAGES = 30
"""ack ALL messages sent one at a time."""
HW_CATCH_UP_BOUND_S = 2.5
"""A follower's HW reaches the leader's within this with no further records: the delay
plus a fetch round, with room for a loaded test machine; far below the 20 s long poll that
would otherwise carry it."""
PAIR_PARTITIONS = 6
"""Partitions of the stream whose two partitions share a leader (6 on 3 servers: some
server leads two)."""
BUSY_BOUND_S = 0.8 * HW_NEWS_DELAY_S
"""The quiet partition's HW reaches its followers within this while the busy one's records
flow: with the busy one's next answer, not after its own delay (nor, held back behind
them, until a gap in the busy records as long as the delay)."""
BUSY_S = 2 * HW_CATCH_UP_BOUND_S
"""How long the busy partition gets records while the quiet one's HW is awaited."""
BUSY_INTERVAL_S = 0.002
"""The busy partition gets a record this often (far more often than the HW delay)."""
POLL_S = 0.005
"""Poll interval of the follower HW."""
EARLY_SESSION = 991
"""Session id of the raw requests (no follower server uses it: theirs are random)."""
EARLY_WAIT_MS = 10_000
"""Long poll of the raw request that a remembered wake must end at once."""


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    settings = {
        "replication": {"fetch_max_wait_s": FETCH_MAX_WAIT_S, "hw_news_delay_s": HW_NEWS_DELAY_S}
    }
    with metered_cluster(tmp_path_factory.mktemp("hwnews"), settings) as (c, _ports):
        yield c


def answered_from(cluster: Cluster, server_id: str, leader_address: str) -> int:
    """ReplicaFetch requests of ``server_id``'s session to the leader that were answered
    (the follower's metric ``jet_fetch_session_requests_total``)."""
    return per_leader(metrics_port(cluster, server_id), "jet_fetch_session_requests_total").get(
        leader_address, 0
    )


async def follower_hws(cluster: Cluster, stream: str, followers: list[str]) -> dict[str, object]:
    """Each follower's own HW of partition 0 (its DescribeStream)."""
    hws: dict[str, object] = {}
    for sid in followers:
        view = await partition_view(cluster.server(sid).address, stream)
        hws[sid] = view[0].get("hw") if view is not None and 0 in view else None
    return hws


async def test_one_message_at_a_time_costs_each_follower_one_answer(cluster: Cluster) -> None:
    [(info, leader)] = await create_replicated(cluster, "steady", 1, BOUND_S)
    followers = [r for r in info.replicas if r != leader]
    address = cluster.server(leader).address
    async with (
        Client(cluster.addresses, request_timeout=10.0) as client,
        Producer(client, "steady", ack=AckPolicy.ALL) as producer,
    ):
        await producer.send(b"first")  # sessions dialed, the partition in them
        await wait_caught_up(cluster, "steady", 0, BOUND_S)
        before = {
            f: await anyio.to_thread.run_sync(answered_from, cluster, f, address) for f in followers
        }
        with anyio.fail_after(BOUND_S):
            for i in range(MESSAGES):
                await producer.send(b"m%d" % i)
        after = {
            f: await anyio.to_thread.run_sync(answered_from, cluster, f, address) for f in followers
        }
    answers = {f: after[f] - before[f] for f in followers}
    # One answer per message (its records) plus the last message's HW on its own; a
    # message that waits past the delay on a loaded machine costs one more. Before, every
    # message cost two (records, then the HW): 2 * MESSAGES.
    for follower, n in answers.items():
        assert MESSAGES <= n <= MESSAGES * 3 // 2, (follower, answers)


async def test_a_follower_s_hw_catches_up_without_further_records(cluster: Cluster) -> None:
    [(info, leader)] = await create_replicated(cluster, "quiet", 1, BOUND_S)
    followers = [r for r in info.replicas if r != leader]
    async with (
        Client(cluster.addresses, request_timeout=10.0) as client,
        Producer(client, "quiet", ack=AckPolicy.ALL) as producer,
    ):
        await producer.send(b"first")
        await wait_caught_up(cluster, "quiet", 0, BOUND_S)
        await producer.send(b"last")  # committed: the leader's HW is 2, nothing follows
        acked = time.monotonic()
    hws: dict[str, object] = {}
    with anyio.fail_after(HW_CATCH_UP_BOUND_S):
        while True:
            hws = await follower_hws(cluster, "quiet", followers)
            if all(hw == 2 for hw in hws.values()):
                break
            await anyio.sleep(POLL_S)
    assert time.monotonic() - acked < HW_CATCH_UP_BOUND_S, hws


async def test_a_busy_partition_does_not_hold_back_a_quiet_one_s_hw(cluster: Cluster) -> None:
    """Two partitions with one leader share each follower's fetch session: while one's
    records keep answering the session's requests, the other's HW rides along with them
    (it would otherwise wait for a request parked its full delay: never, while the busy one
    answers every few milliseconds)."""
    by_leader: dict[str, list[int]] = {}
    for p, (_info, leader) in enumerate(
        await create_replicated(cluster, "pair", PAIR_PARTITIONS, BOUND_S)
    ):
        by_leader.setdefault(leader, []).append(p)
    leader, (quiet, busy, *_) = next((s, ps) for s, ps in by_leader.items() if len(ps) >= 2)
    followers = [s.server_id for s in cluster.servers if s.server_id != leader]
    caught_up_after: float | None = None
    hws: dict[str, object] = {}
    async with (
        Client(cluster.addresses, request_timeout=10.0) as client,
        Producer(client, "pair", ack=AckPolicy.ALL) as producer,
    ):

        async def keep_busy() -> None:
            for _ in range(int(BUSY_S / BUSY_INTERVAL_S)):
                await producer.send_soon(b"b", partition=busy)
                await anyio.sleep(BUSY_INTERVAL_S)

        await producer.send(b"b", partition=busy)
        with anyio.fail_after(BOUND_S):
            async with anyio.create_task_group() as tg:
                tg.start_soon(keep_busy)
                await anyio.sleep(BUSY_INTERVAL_S * 10)  # the busy partition's records flow
                await producer.send(b"q", partition=quiet)  # the quiet one's HW is 1 now
                sent = time.monotonic()
                while time.monotonic() - sent < BUSY_S:
                    for sid in followers:
                        view = await partition_view(cluster.server(sid).address, "pair")
                        hws[sid] = view[quiet].get("hw") if view is not None else None
                    if all(hw == 1 for hw in hws.values()):
                        caught_up_after = time.monotonic() - sent
                        break
                    await anyio.sleep(POLL_S)
                tg.cancel_scope.cancel()
            await producer.flush()
    assert caught_up_after is not None, hws
    assert caught_up_after < BUSY_BOUND_S, (caught_up_after, hws)


async def test_a_wake_that_came_first_still_ends_the_next_request_at_once(
    cluster: Cluster,
) -> None:
    """A session's wake that finds no parked request is remembered: its next request, with
    nothing new for its partition, is answered at once (empty), not after its long poll
    (the wait's loop must not trade the woken event for a fresh one)."""
    [(info, leader)] = await create_replicated(cluster, "early", 1, BOUND_S)
    async with (
        Client(cluster.addresses, request_timeout=10.0) as client,
        Producer(client, "early", ack=AckPolicy.ALL) as producer,
    ):
        await producer.send(b"x")
    _info, hw = await wait_caught_up(cluster, "early", 0, BOUND_S)
    followers = [r for r in info.replicas if r != leader]
    with anyio.fail_after(BOUND_S):  # every follower was sent the HW: no news is left
        while True:
            hws = await follower_hws(cluster, "early", followers)
            if all(h == hw for h in hws.values()):
                break
            await anyio.sleep(POLL_S)
    follower = followers[0]
    ask = ReplicaFetchPartition(
        "early", 0, hw, info.replicas.index(follower), hw, info.leader_epoch, 1 << 20
    )
    wake = ReplicaFetchRequest(
        session_id=EARLY_SESSION, max_wait_ms=0, max_bytes=0, flags=FLAG_WAKE
    )
    req = ReplicaFetchRequest(
        session_id=EARLY_SESSION, max_wait_ms=EARLY_WAIT_MS, max_bytes=1 << 20, partitions=(ask,)
    )
    async with Client(cluster.server(leader).address, request_timeout=BOUND_S) as at_leader:
        await at_leader.request_any(Api.REPLICA_FETCH, encode_replica_fetch_request(wake))
        asked = time.monotonic()
        body = await at_leader.request_any(Api.REPLICA_FETCH, encode_replica_fetch_request(req))
        took = time.monotonic() - asked
    assert decode_replica_fetch_response(body).answers == []
    assert took < EARLY_WAIT_MS / 2000, took
