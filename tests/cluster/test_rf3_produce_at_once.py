"""An RF 3 ack ALL Produce is answered with no task of its own (broker/produce_replicated.py),
on a real 3-server cluster with the hop trace on (``JET_HOP_TRACE``).

One message at a time: each request is read and appended in its connection's reader
callback and answered from the turn that moves the HW past its record. Before, each ran
in a task of its own, which woke once more after the HW's advance to end the request
(its ``produce.resumed`` mark at the leader). Its NATS copy still reaches a plain NATS
subscriber, not marked stored (a new leader elected meanwhile would store it), and every
replica holds every record.

Every wait is bounded.
"""

from __future__ import annotations

from pathlib import Path

import anyio
import nats
import pytest
from nats.aio.msg import Msg

from cluster.harness import Cluster, needs_cluster
from cluster.hop_marks import marks_of, traced_cluster
from cluster.streams import create_replicated
from cluster.views import wait_caught_up
from jetsdk import Client, Producer
from jetsdk.codec.error_codes import AckPolicy
from jetserver.testing import nats_flushed

pytestmark = [pytest.mark.anyio, needs_cluster]

BOUND_S = 30.0
"""Bound on any cluster-side change."""
MESSAGES = 30
"""ack ALL messages sent one at a time."""
TASKS_PER_MESSAGE_MAX = 0.2
"""Produce requests at the leader that resumed a task of their own, per message, at most:
none is needed (room for a request that found the sequencer busy on a loaded machine).
Before: 1.0 (every one)."""
STORED_HEADER = "Jet-Stored"


async def test_an_rf3_all_produce_is_answered_with_no_task(tmp_path: Path) -> None:
    with traced_cluster(tmp_path) as cluster:
        await _answered_with_no_task(cluster, tmp_path)


async def _answered_with_no_task(cluster: Cluster, prefix: Path) -> None:
    [(_info, leader)] = await create_replicated(cluster, "atonce", 1, BOUND_S)
    seen: list[tuple[bytes, dict[str, str]]] = []
    all_seen = anyio.Event()

    async def on_msg(msg: Msg) -> None:
        seen.append((msg.data, msg.headers or {}))
        if len(seen) >= MESSAGES + 1:
            all_seen.set()

    nc = await nats.connect(cluster.nats_url)
    offsets: list[int] = []
    try:
        await nc.subscribe("atonce", cb=on_msg)
        await nats_flushed(nc)
        async with (
            Client(cluster.addresses, request_timeout=10.0) as client,
            Producer(client, "atonce", ack=AckPolicy.ALL, linger=0) as producer,
        ):
            await producer.send(b"first")  # sessions dialed, the partition in them
            await wait_caught_up(cluster, "atonce", 0, BOUND_S)
            with anyio.fail_after(BOUND_S):
                for i in range(MESSAGES):
                    offsets.append((await producer.send(b"m%d" % i)).offset)
        with anyio.fail_after(BOUND_S):
            await all_seen.wait()
    finally:
        await nc.close()
    assert offsets == list(range(1, MESSAGES + 1))
    assert len(seen) == MESSAGES + 1
    assert not any(STORED_HEADER in headers for _d, headers in seen)
    _info, hw = await wait_caught_up(cluster, "atonce", 0, BOUND_S)
    assert hw == MESSAGES + 1
    pid = cluster.server(leader).pid
    assert pid is not None
    cluster.stop_server(leader)  # it writes its marks as it exits
    marks = marks_of(prefix, pid)
    appends = [ns for name, ns in marks if name == "append"]
    assert len(appends) >= MESSAGES + 1, len(appends)
    first, last = appends[-MESSAGES], appends[-1]
    resumed = sum(1 for name, ns in marks if name == "produce.resumed" and first <= ns <= last)
    assert resumed <= TASKS_PER_MESSAGE_MAX * MESSAGES, (resumed, MESSAGES)
