"""A stream's updated ``max_message_bytes`` holds on every replica (issue 39, item 4).

Three servers, a stream with RF 3 whose followers fetch at most 1 KiB per partition and
fetch (``replication.fetch_max_bytes``): messages of 3,000 bytes are still replicated
and acknowledged with ack ALL (a replica fetch carries one whole record above its bound).
UpdateStream lowers the limit to 2,000 bytes: the leader refuses 3,000 bytes on the jet
port and by NATS. Then the leader is killed: the new leader, a follower when the update
was made, refuses them too. Before, UpdateStream refused ``max_message_bytes``.
"""

from __future__ import annotations

from pathlib import Path

import nats
import orjson
import pytest

from cluster.harness import Cluster, needs_cluster
from cluster.views import wait_full_isr, wait_leader
from jetsdk import AckPolicy, Client, Producer
from jetsdk.codec.error_codes import ErrorCode
from jetsdk.codec.messages import ProduceMessage, ProduceRequest
from jetsdk.errors import JetError

pytestmark = [pytest.mark.anyio, needs_cluster]

BIG = 3000
FITS = 1500
LIMIT = 2000
TRIES = 50
"""Bound on produce attempts while the client finds a new leader."""


async def _produce_codes(client: Client, sizes: list[int]) -> list[int]:
    """Error codes of one Produce request (ack ALL) of values of ``sizes``; retried while
    the partition's leadership moves (bounded)."""
    request = ProduceRequest(
        stream="lim",
        partition=0,
        ack_policy=AckPolicy.ALL,
        timeout_ms=10_000,
        messages=tuple(ProduceMessage(b"v" * n) for n in sizes),
    )
    last: Exception | None = None
    for _ in range(TRIES):
        try:
            return [r.error_code for r in await client.produce(request)]
        except JetError as exc:  # NOT_LEADER, UNAVAILABLE during the failover
            if not exc.retriable:
                raise
            last = exc
            await client.refresh_metadata()
    raise AssertionError(f"no answer in {TRIES} tries: {last}")


async def _nats_code(url: str, size: int) -> int:
    nc = await nats.connect(url, allow_reconnect=False)
    try:
        reply = await nc.request("lim", b"n" * size, timeout=15)
    finally:
        await nc.close()
    error = orjson.loads(reply.data).get("error")
    return 0 if error is None else int(error["code"])


async def test_updated_limit_holds_on_the_new_leader(tmp_path: Path) -> None:
    settings = {"replication": {"fetch_max_bytes": 1024}}
    with Cluster(root=tmp_path, size=3, settings=settings) as cluster:
        async with Client(cluster.addresses) as client:
            await client.create_stream("lim", "lim", replication_factor=3, max_message_bytes=4000)
            async with Producer(client, "lim", ack=AckPolicy.ALL, linger=0) as producer:
                for _ in range(10):
                    await producer.send(b"r" * BIG)
            before, leader = await wait_full_isr(cluster, "lim", 0, 3, 30.0)
            assert before.hw == 10

            await client.update_stream("lim", max_message_bytes=LIMIT)
            assert await _produce_codes(client, [BIG, FITS]) == [ErrorCode.MESSAGE_TOO_LARGE, 0]
            assert await _nats_code(cluster.nats_url, BIG) == ErrorCode.MESSAGE_TOO_LARGE

            cluster.server(leader).kill9()
            after = await wait_leader(
                cluster, "lim", 0, 30.0, not_on=leader, min_epoch=before.leader_epoch + 1
            )
            assert after.leader != leader
            assert await _produce_codes(client, [BIG, FITS]) == [ErrorCode.MESSAGE_TOO_LARGE, 0]
            assert await _nats_code(cluster.nats_url, BIG) == ErrorCode.MESSAGE_TOO_LARGE
            assert await _nats_code(cluster.nats_url, FITS) == 0
