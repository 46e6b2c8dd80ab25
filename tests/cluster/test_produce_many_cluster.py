"""ProduceMany in a cluster (issue 34, item 4): a server answers the sections of the
partitions it leads and NOT_LEADER (naming the leader) for the others, without failing
them; a keyed producer sends to every leader with one request per server per loop turn.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from cluster.harness import Cluster, needs_cluster
from cluster.views import wait_leader
from jetsdk import AckPolicy, Client, Producer
from jetsdk.codec.error_codes import ErrorCode
from jetsdk.codec.frames import Api
from jetsdk.codec.messages import (
    ProduceMessage,
    ProduceRequest,
    decode_error,
    decode_produce_response,
    encode_produce_request,
)
from jetsdk.codec.produce_many import decode_produce_many_response, encode_produce_many_request
from support.raw_client import RawClient

pytestmark = [pytest.mark.anyio, needs_cluster]

PARTITIONS = 6


def _section(partition: int, policy: AckPolicy) -> bytes:
    return encode_produce_request(
        ProduceRequest("m", partition, policy, 10_000, (ProduceMessage(b"p%d" % partition),))
    )


@pytest.mark.parametrize("policy", [AckPolicy.LEADER, AckPolicy.ALL])
async def test_mixed_leaders(tmp_path: Path, policy: AckPolicy) -> None:
    with Cluster(root=tmp_path, size=2) as cluster:
        async with Client(cluster.addresses) as client:
            await client.create_stream("m", "m", partitions=PARTITIONS)
            leaders = {
                p: (await wait_leader(cluster, "m", p, 30.0)).leader for p in range(PARTITIONS)
            }
            assert len(set(leaders.values())) == 2, leaders  # spread over both servers
            here = leaders[0]
            assert here is not None
            async with await RawClient.connect(cluster.server(here).address) as raw:
                frame = await raw.request(
                    Api.PRODUCE_MANY,
                    encode_produce_many_request([_section(p, policy) for p in range(PARTITIONS)]),
                )
            answer = decode_produce_many_response(frame.body)
            assert len(answer) == PARTITIONS
            for partition, section in enumerate(answer):
                if leaders[partition] == here:
                    assert section.error_code == 0
                    (result,) = decode_produce_response(section.body)
                    assert (result.error_code, result.offset) == (0, 0)
                else:
                    assert section.error_code == ErrorCode.NOT_LEADER
                    error = decode_error(section.body)
                    assert error.details["leader"] == leaders[partition]
                    assert error.details["partition"] == partition

            # The SDK sends to both leaders, one request per server per loop turn.
            async with Producer(client, "m", ack=policy, linger=0) as producer:
                handles = [
                    await producer.send_soon(b"k%d" % i, key=b"key-%d" % i) for i in range(600)
                ]
                await producer.flush()
                fan_in = producer._sender.fan_in
            acks = [h.result() for h in handles]
            assert {a.partition for a in acks} == set(range(PARTITIONS))
            assert fan_in.sections > fan_in.requests
            for p in range(PARTITIONS):
                offsets = [a.offset for a in acks if a.partition == p]
                first = 1 if leaders[p] == here else 0  # the raw request stored one there
                assert offsets == list(range(first, first + len(offsets)))
