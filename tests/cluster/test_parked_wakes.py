"""A parked replica fetch wakes no task for news it does not answer (broker/replica_wait.py,
``ParkedFetch.poke``), nor for the records it answers from a callback, on a real 3-server
cluster with the hop trace on (``JET_HOP_TRACE``).

One ack ALL message at a time: each message's records end each follower's parked fetch,
answered from a plain callback with no task step (before: two task wake-ups at the leader
per message, each only to end its request). The leader's own flush and the HW move that
the later follower's report makes are no news a parked fetch answers now (a HW alone waits
``hw_news_delay_s``, here far longer than a message's round): they used to wake the other
follower's parked fetch, which found nothing due and parked again (three to four wake-ups
per message); now they wake no task (the HW only re-times the wait). The leader's
``rf.wait`` marks (one per task wake-up of a parked replica fetch) count them.

Every wait is bounded.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from cluster.harness import Cluster, needs_cluster
from cluster.streams import create_replicated
from cluster.views import wait_caught_up
from jetsdk import Client, Producer
from jetsdk.codec.error_codes import AckPolicy

pytestmark = [pytest.mark.anyio, needs_cluster]

HW_NEWS_DELAY_S = 2.0
"""replication.hw_news_delay_s of the test servers: far above a message's round, so no
parked fetch is answered (or woken) for a HW alone while the messages flow."""
FETCH_MAX_WAIT_S = 20.0
"""replication.fetch_max_wait_s: no long poll ends while the messages flow."""
BOUND_S = 30.0
"""Bound on any cluster-side change."""
MESSAGES = 40
"""ack ALL messages sent one at a time."""
WAKES_PER_MESSAGE_MAX = 0.5
"""Task steps of parked replica fetches at the leader per message, at most: none for the
records a lone partition's parked fetch is answered with (its task ended where it parked,
the answer written from a callback: broker/replica_wait.py), with room for the fetches a
loaded machine answers in a task (records too late for a parked request, a long poll's
end). Before: 2.0 (each follower's task woke once more only to end the request), and 3-4
before that (the flush and the HW move too)."""


@pytest.fixture
def traced(tmp_path: Path) -> Iterator[tuple[Cluster, Path]]:
    prefix = tmp_path / "hops"
    settings = {
        "replication": {"fetch_max_wait_s": FETCH_MAX_WAIT_S, "hw_news_delay_s": HW_NEWS_DELAY_S}
    }
    env = {f"s{i}": {"JET_HOP_TRACE": str(prefix)} for i in (1, 2, 3)}
    with Cluster(root=tmp_path / "c", size=3, settings=settings, server_env=env) as cluster:
        yield cluster, prefix


def marks_of(prefix: Path, pid: int) -> list[tuple[str, int]]:
    """The hop marks a stopped server wrote (``name ns`` lines)."""
    lines = Path(f"{prefix}.{pid}").read_text(encoding="ascii").splitlines()
    return [(name, int(ns)) for name, ns in (line.split() for line in lines)]


async def test_a_parked_replica_fetch_wakes_only_for_news_it_answers(
    traced: tuple[Cluster, Path],
) -> None:
    cluster, prefix = traced
    [(_info, leader)] = await create_replicated(cluster, "wakes", 1, BOUND_S)
    async with (
        Client(cluster.addresses, request_timeout=10.0) as client,
        Producer(client, "wakes", ack=AckPolicy.ALL) as producer,
    ):
        await producer.send(b"first")  # sessions dialed, the partition in them
        await wait_caught_up(cluster, "wakes", 0, BOUND_S)
        with anyio.fail_after(BOUND_S):
            for i in range(MESSAGES):
                await producer.send(b"m%d" % i)
    pid = cluster.server(leader).pid
    assert pid is not None
    cluster.stop_server(leader)  # it writes its marks as it exits
    marks = marks_of(prefix, pid)
    appends = [ns for name, ns in marks if name == "append"]
    first, last = appends[-MESSAGES], appends[-1]
    wakes = sum(1 for name, ns in marks if name == "rf.wait" and first <= ns <= last)
    held = sum(1 for name, ns in marks if name == "rf.held" and first <= ns <= last)
    # Between the first and the last append: MESSAGES - 1 messages' rounds.
    assert len(appends) >= MESSAGES + 1, len(appends)
    assert wakes <= WAKES_PER_MESSAGE_MAX * (MESSAGES - 1), (wakes, MESSAGES - 1)
    assert held >= MESSAGES - 1, held  # the followers' fetches parked with no task
