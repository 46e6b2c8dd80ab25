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
from cluster.hop_marks import marks_of, traced_cluster
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
    settings = {
        "replication": {"fetch_max_wait_s": FETCH_MAX_WAIT_S, "hw_news_delay_s": HW_NEWS_DELAY_S}
    }
    with traced_cluster(tmp_path, settings) as cluster:
        yield cluster, tmp_path


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


LONG_POLL_S = 0.25
"""replication.fetch_max_wait_s of :func:`test_long_poll_ends_and_hw_news_wake_no_task`:
idle followers' long polls end several times a second."""
IDLE_S = 2.0
"""How long that test leaves the partition idle (the long polls' ends are what it counts)."""


@pytest.fixture
def short_polls(tmp_path: Path) -> Iterator[tuple[Cluster, Path]]:
    settings = {"replication": {"fetch_max_wait_s": LONG_POLL_S, "hw_news_delay_s": 0.05}}
    with traced_cluster(tmp_path, settings) as cluster:
        yield cluster, tmp_path


async def test_long_poll_ends_and_hw_news_wake_no_task(
    short_polls: tuple[Cluster, Path],
) -> None:
    """A lone partition's parked fetch whose long poll ends, or whose HW falls due, is
    answered from its timer's callback: no task step (before: one each)."""
    cluster, prefix = short_polls
    [(_info, leader)] = await create_replicated(cluster, "polls", 1, BOUND_S)
    async with (
        Client(cluster.addresses, request_timeout=10.0) as client,
        Producer(client, "polls", ack=AckPolicy.ALL) as producer,
    ):
        await producer.send(b"first")
        await wait_caught_up(cluster, "polls", 0, BOUND_S)  # the HW sent on its own
        await producer.send(b"second")
        await wait_caught_up(cluster, "polls", 0, BOUND_S)
        await anyio.sleep(IDLE_S)  # (idle: the long polls end, what is counted)
    pid = cluster.server(leader).pid
    assert pid is not None
    cluster.stop_server(leader)
    marks = marks_of(prefix, pid)
    start = [ns for name, ns in marks if name == "append"][-1]
    answered = sum(1 for name, ns in marks if name == "resp.replica_fetch" and ns > start)
    wakes = sum(1 for name, ns in marks if name == "rf.wait" and ns > start)
    ended = IDLE_S / LONG_POLL_S  # per follower, about
    assert answered >= ended, (answered, ended)  # the long polls ended, answered
    assert wakes <= 0.1 * answered, (wakes, answered)
