"""FetchStream (api 18) across a leader change, on a real 3-server dev cluster: a stream
parked at a partition's leader ends with NOT_LEADER once that server no longer serves
consumers there (spec/protocol.md, "18 FetchStream")."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from jetsdk.codec.error_codes import ErrorCode
from jetsdk.codec.fetch_stream import FetchStreamRequest, encode_fetch_stream_request
from jetsdk.codec.frames import FLAG_MORE, FLAG_RESPONSE, Api, encode_frame
from jetsdk.codec.messages import ProduceMessage, decode_error
from jetserver.testing.devcluster import DevCluster
from support.raw_client import RawClient

from .control_kit import assignments, call, dev_cluster, eventually, metadata, metadata_leader
from .harness import needs_cluster

pytestmark = [pytest.mark.anyio, needs_cluster]

BOUND_S = 60.0
"""Bound on the leader change, and the stream's long poll."""
ROLE_END_BOUND_S = 20.0
"""Bound on the stream's end once the old leader runs again: its role's end answers the
parked stream (a wait for the long poll to expire would take most of BOUND_S)."""


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevCluster]:
    root: Path = tmp_path_factory.mktemp("fetchstream")
    with dev_cluster(root) as c:
        yield c


async def test_a_stream_at_a_leader_that_lost_the_partition_ends_with_not_leader(
    cluster: DevCluster,
) -> None:
    meta_leader = await metadata_leader(cluster)
    name = f"fs-{uuid.uuid4().hex[:6]}"
    spec = {"name": name, "subject": name, "partitions": 3, "replication_factor": 3}
    await call(cluster.servers[0].address, lambda c: c.create_stream(**spec))
    placed = assignments(await metadata(cluster.addresses[0]), name)
    # A partition not led by the metadata leader (its server is paused below).
    partition, victim = next(
        (p, leader) for p, (leader, _r, _e) in enumerate(placed) if leader != meta_leader
    )
    address = cluster.server(victim).address
    async with await RawClient.connect(address) as c:
        await c.produce(name, partition, [ProduceMessage(b"a")])
        req = FetchStreamRequest(name, partition, 0, 1 << 20, int(BOUND_S * 1000), 100)
        await c.send_raw(encode_frame(Api.FETCH_STREAM, 9, encode_fetch_stream_request(req)))
        first = await c.recv_frame(BOUND_S)
        assert first.flags == FLAG_RESPONSE | FLAG_MORE
        cluster.server(victim).pause()  # SIGSTOP: taken for down, the partition moves
        try:

            async def moved() -> bool | None:
                now = assignments(await metadata(cluster.server(meta_leader).address), name)
                return True if now[partition][0] not in (victim, None) else None

            await eventually(moved, "a new leader", BOUND_S)
        finally:
            cluster.server(victim).resume()
        # The stream's long poll (BOUND_S) has most of its time left: the role's end
        # answers it, not the poll's expiry.
        with anyio.fail_after(ROLE_END_BOUND_S):
            frame = await c.recv_frame(ROLE_END_BOUND_S)
        assert frame.correlation_id == 9
        assert frame.is_error, frame
        assert decode_error(frame.body).code == ErrorCode.NOT_LEADER
