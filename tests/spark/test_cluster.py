"""jetspark against a 3-server cluster (`jet dev --servers 3`): streams with RF=3, partition
leaders spread over the servers; source → transform → sink end to end, offsets mirrored.

Uses the shared local[2] Spark session; the cluster is this module's own (~5 s to start).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

import jetspark
from jetsdk import Client
from support.jet_dev import JetDev

from .helpers import create, produce, read_all, read_stream, run_foreach_batch, unique

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def jet_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[JetDev]:
    """`jet dev --servers 3` for this module."""
    with JetDev.start(tmp_path_factory.mktemp("spark-cluster") / "data", servers=3) as dev:
        yield dev


async def _leaders(servers: list[str], stream: str) -> set[str | None]:
    async with Client(servers) as client:
        info = await client.stream_info(stream, refresh=True)
        assert all(len(p.replicas) == 3 for p in info.partitions), info
        return {p.leader for p in info.partitions}


@pytest.mark.timeout(400)  # may be the first Spark test: bears the session start (~70 s loaded)
def test_source_to_sink_on_a_three_server_cluster(
    spark: Any, jet_cluster: JetDev, checkpoint: Path
) -> None:
    from pyspark.sql import functions as F

    servers = jet_cluster.servers
    assert len(servers) == 3
    src, out = unique("c-orders"), unique("c-upper")
    create(servers, src, partitions=3, replication_factor=3)
    create(servers, out, partitions=3, replication_factor=3)
    # Leaders on more than one server: Spark's reads and writes go to several servers.
    assert len(anyio.run(_leaders, servers, src)) > 1
    sent = [(f"k{i % 5}".encode(), f"order-{i}".encode()) for i in range(120)]
    produce(servers, src, sent)

    df = read_stream(spark, servers, src, group="spark-cluster")
    upper = df.select("key", F.upper(F.col("value").cast("string")).alias("value"))
    sink = jetspark.foreach_batch_sink(servers, out)
    run_foreach_batch(upper, sink, checkpoint)

    got = read_all(servers, out)
    assert sorted((r.key, r.value) for r in got) == sorted((k, v.upper()) for k, v in sent)
    assert jetspark.group_lag(servers, "spark-cluster") == {(src, p): 0 for p in range(3)}


def test_bytes_per_offset_asks_leaders_for_partitions_the_answering_server_lacks(
    jet_cluster: JetDev,
) -> None:
    """maxBytesPerTrigger's estimate on RF=1 partitions spread over three servers: the
    server answering DescribeStream holds one of them at most; the others come from their
    leaders, so each partition gets its own size, not an average."""
    from jetsdk.partitioner import partition_for_key
    from jetspark._sizes import bytes_per_offset

    servers = jet_cluster.servers
    name = unique("c-sizes")
    create(servers, name, partitions=3, replication_factor=1)
    assert len(anyio.run(_leaders_any, servers, name)) > 1
    keys = {partition_for_key(b"k%d" % i, 3): b"k%d" % i for i in range(30)}
    for part, size in ((0, 50), (1, 500), (2, 5000)):
        produce(servers, name, [(keys[part], b"x" * size) for _ in range(20)])

    async def main() -> dict[tuple[str, int], float]:
        async with Client(servers) as client:
            return await bytes_per_offset(client, [name])

    got = anyio.run(main)
    # Record headers, key and subject add under 150 bytes; an average of two partitions
    # (what a partition without a size would get) falls outside every one of these.
    assert 50 < got[(name, 0)] < 200, got
    assert 500 < got[(name, 1)] < 650, got
    assert 5000 < got[(name, 2)] < 5150, got


async def _leaders_any(servers: list[str], stream: str) -> set[str | None]:
    async with Client(servers) as client:
        info = await client.stream_info(stream, refresh=True)
        return {p.leader for p in info.partitions}
