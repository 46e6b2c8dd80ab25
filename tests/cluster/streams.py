"""Streams made and filled on a test cluster through the SDK, for the tests that need a
replicated stream in place before they look at how it replicates."""

from __future__ import annotations

from cluster.harness import Cluster
from cluster.views import wait_full_isr
from jetsdk import Client, Producer
from jetsdk.codec.error_codes import AckPolicy
from jetsdk.metadata import PartitionInfo

CREATE_TIMEOUT_S = 30.0
"""Request timeout of the client that creates a stream."""
PRODUCE_TIMEOUT_S = 10.0
"""Request timeout of the client of :func:`produce_all`."""


async def create_replicated(
    cluster: Cluster, stream: str, partitions: int, timeout_s: float
) -> list[tuple[PartitionInfo, str]]:
    """Create ``stream`` (subject ``stream``) with ``partitions`` partitions of 3 replicas
    and wait, up to ``timeout_s`` each, until every partition has a leader and all 3
    replicas in sync; each partition's (info, leader), in partition order."""
    async with Client(cluster.addresses, request_timeout=CREATE_TIMEOUT_S) as client:
        await client.create_stream(stream, stream, partitions=partitions, replication_factor=3)
    return [await wait_full_isr(cluster, stream, p, 3, timeout_s) for p in range(partitions)]


async def produce_all(cluster: Cluster, stream: str, count: int) -> None:
    """Send ``count`` messages (values ``v<i>``, keys ``k<i>``) with ack ALL, pipelined,
    and return once all are acknowledged."""
    async with (
        Client(cluster.addresses, request_timeout=PRODUCE_TIMEOUT_S) as client,
        Producer(client, stream, ack=AckPolicy.ALL) as producer,
    ):
        for i in range(count):
            await producer.send_soon(b"v%d" % i, key=b"k%d" % i)
        await producer.flush()
