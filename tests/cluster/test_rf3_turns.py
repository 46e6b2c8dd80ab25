"""Which loop turn does what on an RF 3 leader's way of an ack ALL message, on a real
3-server cluster with the hop trace on (``JET_HOP_TRACE``): marks in one process's file
are in the order they were made.

The Produce answer is written from the turn that moved the HW past it (``AnswerNow``,
``AcceptedConnection.write_now``), not from its request task's later wake-up: the
leader marks ``acked`` when the HW move settles a request, ``resp.produce`` when its
answer is written and ``produce.resumed`` when the request's task runs again. Before,
the task wrote the answer once it resumed.

A follower's replica fetch parked on the partition alone (one follower's session, one
partition) is answered from a plain callback first in the turn after the append
(``ParkedFetch.poke``): both followers' answers are written (``resp.replica_fetch``) before
any parked request's task step (``rf.wait``). Before, each request's task woke to build
and write its answer, one after the other.

Every wait is bounded.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest

from cluster.harness import Cluster, needs_cluster
from cluster.streams import create_replicated
from cluster.views import wait_caught_up
from jetsdk import Client, Producer
from jetsdk.codec.error_codes import AckPolicy

pytestmark = [pytest.mark.anyio, needs_cluster]

BOUND_S = 30.0
"""Bound on any cluster-side change."""
MESSAGES = 30
"""ack ALL messages sent one at a time."""
PIPELINED = 200
"""ack ALL messages sent at once (several Produce requests in flight on one connection)."""


@contextmanager
def traced(
    tmp_path: Path, settings: Mapping[str, Mapping[str, Any]] | None = None
) -> Iterator[tuple[Cluster, Path]]:
    prefix = tmp_path / "hops"
    env = {f"s{i}": {"JET_HOP_TRACE": str(prefix)} for i in (1, 2, 3)}
    with Cluster(root=tmp_path / "c", size=3, settings=settings or {}, server_env=env) as cluster:
        yield cluster, prefix


def marks_of(prefix: Path, pid: int) -> list[str]:
    """The names of the hop marks a stopped server wrote (``name ns`` lines), in order."""
    lines = Path(f"{prefix}.{pid}").read_text(encoding="ascii").splitlines()
    return [line.split()[0] for line in lines]


async def _leader_marks(
    cluster: Cluster, prefix: Path, stream: str, *, pipelined: int = 0
) -> list[str]:
    """Send ``MESSAGES`` ack ALL messages one at a time, then ``pipelined`` at once, to a
    new RF 3 stream; check their offsets; stop its leader: its marks."""
    [(_info, leader)] = await create_replicated(cluster, stream, 1, BOUND_S)
    async with (
        Client(cluster.addresses, request_timeout=10.0) as client,
        Producer(client, stream, ack=AckPolicy.ALL, max_in_flight=4) as producer,
    ):
        await producer.send(b"first")  # sessions dialed, the partition in them
        await wait_caught_up(cluster, stream, 0, BOUND_S)
        with anyio.fail_after(BOUND_S):
            offsets = [(await producer.send(b"m%d" % i)).offset for i in range(MESSAGES)]
            handles = [await producer.send_soon(b"p%d" % i) for i in range(pipelined)]
            await producer.flush()
        assert offsets == list(range(1, MESSAGES + 1))
        assert [h.result().offset for h in handles] == [MESSAGES + 1 + i for i in range(pipelined)]
    pid = cluster.server(leader).pid
    assert pid is not None
    cluster.stop_server(leader)  # it writes its marks as it exits
    return marks_of(prefix, pid)


async def test_an_ack_all_answer_is_written_before_its_task_resumes(tmp_path: Path) -> None:
    with traced(tmp_path) as (cluster, prefix):
        names = await _leader_marks(cluster, prefix, "early", pipelined=PIPELINED)
    # Per settled request (an "acked"), which comes first: its answer or its task's wake-up.
    early = late = 0
    for i, name in enumerate(names):
        if name != "acked":
            continue
        following = [n for n in names[i + 1 :] if n in ("resp.produce", "produce.resumed")]
        if following[:2] == ["resp.produce", "produce.resumed"]:
            early += 1
        else:
            late += 1
    # The one-at-a-time messages at least (pipelined ones may find the writer busy).
    assert early >= MESSAGES, (early, late)


async def test_parked_replica_fetches_are_answered_before_their_tasks_wake(tmp_path: Path) -> None:
    # A HW alone never goes between two messages here, nor a poll's end: at each append
    # both followers' fetches are parked (on a loaded machine a message could take longer
    # than the 25 ms default, and the answer with the HW alone let the next append find a
    # follower's next fetch not parked yet: 14 of 30 in one run of the suite).
    settings = {"replication": {"fetch_max_wait_s": 20.0, "hw_news_delay_s": 2.0}}
    with traced(tmp_path, settings) as (cluster, prefix):
        names = await _leader_marks(cluster, prefix, "inturn")
    # Per append, the replica fetch answers written before the next parked task's wake-up
    # (a task step of a parked request: none at all at light load now, broker/replica_wait.py)
    # and before the next append.
    in_turn = 0
    for i, name in enumerate(names):
        if name != "append":
            continue
        after = names[i + 1 :]
        ends = [after.index(n) for n in ("rf.wait", "append") if n in after]
        until_wake = after[: min(ends)] if ends else after
        if until_wake.count("resp.replica_fetch") >= 2:
            in_turn += 1
    assert in_turn >= MESSAGES, in_turn
