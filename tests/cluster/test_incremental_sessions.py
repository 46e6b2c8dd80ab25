"""Incremental fetch sessions on a real 3-server cluster (spec/cluster.md, "Fetch
sessions"; Kafka's KIP-227).

One cluster for the module, with a short long poll (``fetch_max_wait_s`` 0.4 s) and a
short lag bound (``replica_lag_max_s`` 1.5 s), so that idle rounds come often and a
follower whose parked partitions stopped counting as caught up would leave the ISR within
the test:

- idle, the sessions' requests carry (almost) no partitions: every partition stays parked
  at its leader from one request to the next (``jet_fetch_session_partitions_sent_total``
  over ``jet_fetch_session_requests_total``; every waiting partition went in every request
  before), and records produced after the idle time still replicate;
- idle caught-up followers stay in the ISR over many long polls;
- a session the leader no longer holds at the request's epoch is refused with
  ``FETCH_SESSION_LOST`` and the follower's session sends the round again in full.

A new stream joining parked sessions is served at once: test_fetch_sessions.py.
Every wait is bounded.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import anyio
import pytest

from cluster.harness import Cluster, needs_cluster
from cluster.metered import metered_cluster, metrics_port, per_leader
from cluster.streams import create_replicated, produce_all
from cluster.views import partition_info, wait_caught_up, wait_full_isr
from jetsdk.codec.error_codes import ErrorCode
from jetsdk.codec.replica_fetch import ReplicaFetchAnswer, ReplicaFetchPartition
from jetserver.replication import ReplicationConfig
from jetserver.replication.session import FetchSession

pytestmark = [pytest.mark.anyio, needs_cluster]

FETCH_MAX_WAIT_S = 0.4
"""replication.fetch_max_wait_s of the test servers."""
LAG_MAX_S = 1.5
"""replication.replica_lag_max_s of the test servers."""
IDLE_S = 4.0
"""Idle time observed: ten long polls, more than twice the lag bound."""
BOUND_S = 30.0
"""Bound on any cluster-side change."""
PARTITIONS = 12


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    settings = {
        "replication": {"fetch_max_wait_s": FETCH_MAX_WAIT_S, "replica_lag_max_s": LAG_MAX_S}
    }
    with metered_cluster(tmp_path_factory.mktemp("incremental"), settings) as (c, _ports):
        yield c


def totals(cluster: Cluster, metric: str) -> int:
    """``metric`` summed over every server's sessions."""
    return sum(
        sum(per_leader(metrics_port(cluster, s.server_id), metric).values())
        for s in cluster.servers
    )


async def wide_stream(cluster: Cluster, name: str) -> None:
    await create_replicated(cluster, name, PARTITIONS, BOUND_S)
    await produce_all(cluster, name, PARTITIONS * 2)
    for p in range(PARTITIONS):
        await wait_caught_up(cluster, name, p, BOUND_S)


async def test_idle_requests_carry_only_changed_partitions(cluster: Cluster) -> None:
    await wide_stream(cluster, "idle")
    await anyio.sleep(2 * FETCH_MAX_WAIT_S)  # the HW news of the last records answered
    sent = await anyio.to_thread.run_sync(
        totals, cluster, "jet_fetch_session_partitions_sent_total"
    )
    asked = await anyio.to_thread.run_sync(totals, cluster, "jet_fetch_session_requests_total")
    await anyio.sleep(IDLE_S)  # the window observed: nothing is awaited
    sent = (
        await anyio.to_thread.run_sync(totals, cluster, "jet_fetch_session_partitions_sent_total")
        - sent
    )
    asked = (
        await anyio.to_thread.run_sync(totals, cluster, "jet_fetch_session_requests_total") - asked
    )
    # Six sessions (each server follows from the two others), a long poll each 0.4 s:
    # some 60 idle rounds. Each carried every partition waiting before (4 per session).
    assert asked >= 12, asked
    assert sent <= asked // 4, (sent, asked)
    # Parked that long, every partition still replicates at once.
    await produce_all(cluster, "idle", PARTITIONS * 2)
    hws = [(await wait_caught_up(cluster, "idle", p, BOUND_S))[1] for p in range(PARTITIONS)]
    assert sum(hws) == 4 * PARTITIONS


async def test_idle_caught_up_followers_stay_in_the_isr(cluster: Cluster) -> None:
    await wide_stream(cluster, "steady")
    ends = time.monotonic() + IDLE_S
    looks = 0
    while time.monotonic() < ends:
        with anyio.fail_after(BOUND_S):
            for p in range(PARTITIONS):
                info = await partition_info(cluster, "steady", p)
                assert info is not None
                assert len(info.isr) == 3, (p, info.isr)
        looks += 1
        await anyio.sleep(0.25)  # between looks over the window: nothing is awaited
    assert looks >= 3


async def test_a_session_lost_at_the_leader_is_sent_again_in_full(cluster: Cluster) -> None:
    """Another session with the same id moves the leader's session on: the first one's
    next incremental request is refused with FETCH_SESSION_LOST and sent again in full."""
    [(info, leader)] = await create_replicated(cluster, "lost", 1, BOUND_S)
    await produce_all(cluster, "lost", 3)
    _info, hw = await wait_caught_up(cluster, "lost", 0, BOUND_S)
    follower = next(r for r in info.replicas if r != leader)
    replica_id = info.replicas.index(follower)
    at_end = ReplicaFetchPartition("lost", 0, hw, replica_id, hw, info.leader_epoch, 1 << 20)
    beyond = ReplicaFetchPartition(
        "lost", 0, 1_000_000, replica_id, 1_000_000, info.leader_epoch, 1 << 20
    )
    config = ReplicationConfig(fetch_max_wait_s=FETCH_MAX_WAIT_S)
    address = cluster.server(leader).address
    first = FetchSession(address, config)
    other = FetchSession(address, config, session_id=first.session_id)
    first.users = other.users = 1
    with anyio.fail_after(BOUND_S):
        async with anyio.create_task_group() as tg:
            tg.start_soon(first.run)
            tg.start_soon(other.run)
            # New to the session: answered (without records) when the long poll ends.
            answer: ReplicaFetchAnswer = await first.fetch(at_end, BOUND_S)
            assert (answer.error_code, len(answer.records)) == (ErrorCode.NONE, 0)
            assert (first.full_requests, first.sessions_lost) == (1, 0)
            # The same session id, full then incremental: the leader's epoch moves on.
            await other.fetch(at_end, BOUND_S)
            answer = await other.fetch(beyond, BOUND_S)
            assert answer.error_code == ErrorCode.OFFSET_OUT_OF_RANGE
            # Changed: the incremental request carries it, at an epoch the leader no
            # longer expects: refused, then sent in full and answered.
            answer = await first.fetch(beyond, BOUND_S)
            assert answer.error_code == ErrorCode.OFFSET_OUT_OF_RANGE
            assert answer.leo >= hw
            assert (first.full_requests, first.sessions_lost) == (2, 1)
            tg.cancel_scope.cancel()
    await wait_full_isr(cluster, "lost", 0, 3, BOUND_S)
