"""The ISR of a partition whose followers' long polls outlast the lag bound, on a real
3-server cluster (spec/cluster.md, "ISR changes": a fetch parked at the leader's end keeps
its follower caught up until it is answered or its long poll ends).

The servers' replica long poll (``fetch_max_wait_s``) is 12 s against a lag bound
(``replica_lag_max_s``) of 1.5 s:

- idle, with every follower parked at the leader's end, the ISR stays whole for several
  lag bounds: no ISR change is proposed. Before, the leader judged a follower by its
  fetch's arrival alone: each left the ISR 1.5 s after its fetch came and rejoined at the
  next one, and two followers out of phase were never in it together (a CI failure of
  test_replication_cluster: "a full ISR of 3" not within 30 s, the lag bound 2 s, the
  long poll 5 s);
- a follower killed with SIGKILL while parked, when a record comes, leaves the ISR about a
  lag bound after its parked fetch was answered, not after its long poll would have ended
  (12 s): ALL acks wait no longer than before for a dead follower. (Idle, with no record,
  a follower gone while parked counts as caught up until its long poll ends, as a delayed
  fetch does in Kafka: nothing waits for it meanwhile.)

Every wait is bounded.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from cluster.harness import Cluster, needs_cluster
from cluster.views import wait_caught_up, wait_full_isr, wait_info
from jetsdk import Client, Producer
from jetsdk.codec.error_codes import AckPolicy

pytestmark = [pytest.mark.anyio, needs_cluster]

FETCH_MAX_WAIT_S = 12.0
"""replication.fetch_max_wait_s of the test servers."""
LAG_S = 1.5
"""replication.replica_lag_max_s of the test servers."""
IDLE_S = 4 * LAG_S
"""How long the idle partition is watched for ISR changes."""
KILLED_OUT_BOUND_S = FETCH_MAX_WAIT_S - 2.0
"""The ALL ack sent after a follower's kill comes within this of the kill: the follower's
lag bound, the ISR check's period (at most the lag bound) and the metadata's round, with
room for a loaded machine; below the 12 s its parked fetch's long poll would have kept it
in."""
BOUND_S = 30.0
"""Bound on any other cluster-side change."""


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    root: Path = tmp_path_factory.mktemp("isrpoll")
    settings = {"replication": {"fetch_max_wait_s": FETCH_MAX_WAIT_S, "replica_lag_max_s": LAG_S}}
    with Cluster(root=root, size=3, settings=settings) as c:
        yield c


def isr_changes(cluster: Cluster, stream: str) -> list[str]:
    """The ISR changes of ``stream`` logged by every server so far."""
    pattern = re.compile(rf"ISR changed stream={re.escape(stream)} .*")
    return [m.group(0) for text in cluster.all_logs().values() for m in pattern.finditer(text)]


async def test_an_idle_partition_keeps_its_whole_isr(cluster: Cluster) -> None:
    async with Client(cluster.addresses, request_timeout=10.0) as client:
        await client.create_stream("idle", "idle", partitions=1, replication_factor=3)
        async with Producer(client, "idle", ack=AckPolicy.ALL, ack_timeout=BOUND_S) as p:
            await p.send(b"one")  # the followers fetch it, then park at the end
    await wait_full_isr(cluster, "idle", 0, 3, BOUND_S)
    await wait_caught_up(cluster, "idle", 0, BOUND_S)
    before = isr_changes(cluster, "idle")
    await anyio.sleep(IDLE_S)  # the window watched: nothing may happen in it
    info = await wait_info(cluster, "idle", 0, lambda i: True, BOUND_S, "partition info")
    assert len(info.isr) == 3, info
    assert isr_changes(cluster, "idle") == before


async def test_a_follower_killed_while_parked_leaves_the_isr_after_the_lag_bound(
    cluster: Cluster,
) -> None:
    async with Client(cluster.addresses, request_timeout=10.0) as client:
        await client.create_stream("gone", "gone", partitions=1, replication_factor=3)
        info, leader = await wait_full_isr(cluster, "gone", 0, 3, BOUND_S)
        async with Producer(client, "gone", ack=AckPolicy.ALL, ack_timeout=BOUND_S) as p:
            # Acked ALL: every follower fetched it, and parks again at once for 12 s.
            await p.send(b"one")
    victim = next(r for r in info.replicas if r != leader)
    await wait_caught_up(cluster, "gone", 0, BOUND_S)
    cluster.server(victim).kill9()
    killed_at = time.monotonic()
    async with (
        Client(cluster.addresses, request_timeout=10.0) as client,
        Producer(client, "gone", ack=AckPolicy.ALL, ack_timeout=BOUND_S) as p,
    ):
        # Answers the killed follower's parked fetch; acked once it left the ISR.
        await p.send(b"two")
    assert time.monotonic() - killed_at < KILLED_OUT_BOUND_S
    out = await wait_info(cluster, "gone", 0, lambda i: True, BOUND_S, "partition info")
    assert victim not in out.isr, out
