"""HW news on a real 3-server cluster (spec/cluster.md, "Replica fetch": a HW alone answers a
parked replica fetch only after ``[replication] hw_news_delay_s``).

The replica long poll is raised to 20 s, so any answer sooner than that came from records,
a HW that was due, or a flush:

- one ack ALL message at a time, each sent once the last was acknowledged: each follower
  gets about one answer per message (its records, carrying the HW of the message before),
  not two (the records, then the HW on its own, as before);
- with no further records, a follower's HW still reaches the leader's within the delay
  plus a fetch round (the leader's parked-fetch timer), not at the long poll's end.

Every wait is bounded.
"""

from __future__ import annotations

import re
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from cluster.harness import Cluster, needs_cluster
from cluster.views import partition_view, wait_caught_up, wait_full_isr
from jetsdk import Client, Producer
from jetsdk.codec.error_codes import AckPolicy
from jetserver.testing import free_ports

pytestmark = [pytest.mark.anyio, needs_cluster]

FETCH_MAX_WAIT_S = 20.0
"""replication.fetch_max_wait_s of the test servers."""
BOUND_S = 30.0
"""Bound on any cluster-side change."""
MESSAGES = 30
"""ack ALL messages sent one at a time."""
HW_CATCH_UP_BOUND_S = 2.0
"""A follower's HW reaches the leader's within this with no further records: the delay
(25 ms by default) plus a fetch round, with room for a loaded test machine; far below the
20 s long poll that would otherwise carry it."""
POLL_S = 0.005
"""Poll interval of the follower HW."""
METRICS_PORTS: dict[str, int] = {}
"""Server id -> its metrics port (set by the cluster fixture)."""


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    root: Path = tmp_path_factory.mktemp("hwnews")
    ports = free_ports(3)
    env = {f"s{i + 1}": {"JET_METRICS_PORT": str(port)} for i, port in enumerate(ports)}
    settings = {"replication": {"fetch_max_wait_s": FETCH_MAX_WAIT_S}}
    METRICS_PORTS.update({f"s{i + 1}": port for i, port in enumerate(ports)})
    with Cluster(root=root, size=3, settings=settings, server_env=env) as c:
        yield c


def answered_from(server_id: str, leader_address: str) -> int:
    """ReplicaFetch requests of ``server_id``'s session to the leader that were answered
    (the follower's metric ``jet_fetch_session_requests_total``)."""
    port = METRICS_PORTS[server_id]
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as answer:
        text = answer.read().decode()
    found = re.findall(r'^jet_fetch_session_requests_total\{leader="([^"]+)"\} (\d+)$', text, re.M)
    return sum(int(n) for leader, n in found if leader == leader_address)


async def follower_hws(cluster: Cluster, stream: str, followers: list[str]) -> dict[str, object]:
    """Each follower's own HW of partition 0 (its DescribeStream)."""
    hws: dict[str, object] = {}
    for sid in followers:
        view = await partition_view(cluster.server(sid).address, stream)
        hws[sid] = view[0].get("hw") if view is not None and 0 in view else None
    return hws


async def test_one_message_at_a_time_costs_each_follower_one_answer(cluster: Cluster) -> None:
    async with Client(cluster.addresses, request_timeout=30.0) as client:
        await client.create_stream("steady", "steady", partitions=1, replication_factor=3)
    info, leader = await wait_full_isr(cluster, "steady", 0, 3, BOUND_S)
    followers = [r for r in info.replicas if r != leader]
    address = cluster.server(leader).address
    async with (
        Client(cluster.addresses, request_timeout=10.0) as client,
        Producer(client, "steady", ack=AckPolicy.ALL) as producer,
    ):
        await producer.send(b"first")  # sessions dialed, the partition in them
        await wait_caught_up(cluster, "steady", 0, BOUND_S)
        before = {f: await anyio.to_thread.run_sync(answered_from, f, address) for f in followers}
        with anyio.fail_after(BOUND_S):
            for i in range(MESSAGES):
                await producer.send(b"m%d" % i)
        after = {f: await anyio.to_thread.run_sync(answered_from, f, address) for f in followers}
    answers = {f: after[f] - before[f] for f in followers}
    # One answer per message (its records) plus the last message's HW on its own; a
    # message that waits past the delay on a loaded machine costs one more. Before, every
    # message cost two (records, then the HW): 2 * MESSAGES.
    for follower, n in answers.items():
        assert MESSAGES <= n <= MESSAGES * 3 // 2, (follower, answers)


async def test_a_follower_s_hw_catches_up_without_further_records(cluster: Cluster) -> None:
    async with Client(cluster.addresses, request_timeout=30.0) as client:
        await client.create_stream("quiet", "quiet", partitions=1, replication_factor=3)
    info, leader = await wait_full_isr(cluster, "quiet", 0, 3, BOUND_S)
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
