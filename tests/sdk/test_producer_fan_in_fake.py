"""The producer's ProduceMany requests against the fake cluster: a section that fails is
sent again alone (its partition's batch, same sequences), the others are not; every
message is stored once, in order."""

from __future__ import annotations

import pytest

from jetsdk import Producer
from jetsdk.codec.error_codes import ErrorCode
from jetsdk.codec.frames import Api
from jetsdk.codec.record import iter_records

from .helpers import cluster_and_client

pytestmark = pytest.mark.anyio

PARTITIONS = 8


def _values(cluster: object, partition: int) -> list[bytes]:
    part = cluster.streams["s"].partitions[partition]  # type: ignore[attr-defined]
    return [r.value for r in iter_records(b"".join(part.records))]


@pytest.mark.parametrize("code", [ErrorCode.NOT_LEADER, ErrorCode.UNAVAILABLE])
async def test_a_failed_section_alone_is_sent_again(anyio_backend: str, code: ErrorCode) -> None:
    if anyio_backend != "asyncio":
        pytest.skip("ProduceMany is sent on asyncio only")
    async with cluster_and_client(produce_many=True) as (cluster, client):
        cluster.add_stream("s", partitions=PARTITIONS)
        # Only a flush cuts batches (linger 60 s): it wakes every partition's sender in
        # one loop turn, so their batches go in one request whatever the machine's load.
        async with Producer(client, "s", idempotent=True, linger=60) as producer:
            await producer.send_soon(b"warm", partition=0)
            await producer.flush()
            cluster.fail_next_produce.append(code)  # the next section served fails
            sent = [(i % PARTITIONS, b"m%02d" % i) for i in range(4 * PARTITIONS)]
            handles = [await producer.send_soon(v, partition=p) for p, v in sent]
            await producer.flush()
            acks = [h.result() for h in handles]
        assert [a.partition for a in acks] == [p for p, _v in sent]
        assert producer.retries == 1  # the failed section, not the request
        assert max(cluster.produce_many_sections) == PARTITIONS  # one request for all
        many = [api for _sid, api in cluster.requests if api == Api.PRODUCE_MANY]
        assert len(many) == len(cluster.produce_many_sections)
        # Stored once each, in order; every section but one went once.
        assert sum(cluster.produce_batches) == 1 + len(sent)
        for p in range(PARTITIONS):
            want = [v for q, v in sent if q == p]
            assert _values(cluster, p) == ([b"warm"] if p == 0 else []) + want
