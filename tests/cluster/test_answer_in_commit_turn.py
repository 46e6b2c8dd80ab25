"""An ack ALL Produce at RF 3 is answered from the turn that moved the HW past it
(``AnswerNow``, ``AcceptedConnection.write_now``), not from its request task's later
wake-up, on a real 3-server cluster with the hop trace on (``JET_HOP_TRACE``).

The leader marks ``acked`` when the HW move settles a request, ``resp.produce`` when its
answer is written and ``produce.resumed`` when the request's task runs again after its
commit. Before, the task wrote the answer once it resumed (``resp.produce`` after
``produce.resumed``, one loop turn after ``acked``); now the answer precedes the task's
wake-up. The answers are checked too: one message at a time and pipelined.

Every wait is bounded.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from cluster.harness import Cluster, needs_cluster
from cluster.views import wait_caught_up, wait_full_isr
from jetsdk import Client, Producer
from jetsdk.codec.error_codes import AckPolicy

pytestmark = [pytest.mark.anyio, needs_cluster]

BOUND_S = 30.0
"""Bound on any cluster-side change."""
MESSAGES = 30
"""ack ALL messages sent one at a time."""
PIPELINED = 200
"""ack ALL messages sent at once (several Produce requests in flight on one connection)."""


@pytest.fixture
def traced(tmp_path: Path) -> Iterator[tuple[Cluster, Path]]:
    prefix = tmp_path / "hops"
    env = {f"s{i}": {"JET_HOP_TRACE": str(prefix)} for i in (1, 2, 3)}
    with Cluster(root=tmp_path / "c", size=3, server_env=env) as cluster:
        yield cluster, prefix


def marks_of(prefix: Path, pid: int) -> list[tuple[str, int]]:
    """The hop marks a stopped server wrote (``name ns`` lines), in order."""
    lines = Path(f"{prefix}.{pid}").read_text(encoding="ascii").splitlines()
    return [(name, int(ns)) for name, ns in (line.split() for line in lines)]


async def test_an_ack_all_answer_is_written_before_its_task_resumes(
    traced: tuple[Cluster, Path],
) -> None:
    cluster, prefix = traced
    async with Client(cluster.addresses, request_timeout=30.0) as client:
        await client.create_stream("early", "early", partitions=1, replication_factor=3)
    _info, leader = await wait_full_isr(cluster, "early", 0, 3, BOUND_S)
    async with (
        Client(cluster.addresses, request_timeout=10.0) as client,
        Producer(client, "early", ack=AckPolicy.ALL, max_in_flight=4) as producer,
    ):
        await producer.send(b"first")  # sessions dialed, the partition in them
        await wait_caught_up(cluster, "early", 0, BOUND_S)
        with anyio.fail_after(BOUND_S):
            offsets = [(await producer.send(b"m%d" % i)).offset for i in range(MESSAGES)]
            handles = [await producer.send_soon(b"p%d" % i) for i in range(PIPELINED)]
            await producer.flush()
        assert offsets == list(range(1, MESSAGES + 1))
        pipelined = [h.result().offset for h in handles]
        assert pipelined == list(range(MESSAGES + 1, MESSAGES + 1 + PIPELINED))
    pid = cluster.server(leader).pid
    assert pid is not None
    cluster.stop_server(leader)  # it writes its marks as it exits
    names = [name for name, _ns in marks_of(prefix, pid)]
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
