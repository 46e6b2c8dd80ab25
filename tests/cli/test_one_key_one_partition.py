"""One key, one partition, from every client (spec/partitioning.md): the SDK's Producer,
``jet pub --key`` and a plain nats.js publisher routing as the spec says all put each key
on the partition ``partition_for_key`` names. Before, ``jet pub`` sent every key to the
partition of the subject it was given (partition 0 for the stream's own subject)."""

from __future__ import annotations

import uuid
from collections import defaultdict

import anyio
import orjson

from jetsdk import AckPolicy, Client, Consumer, Producer
from jetsdk.partitioner import partition_for_key
from support.jet_cli import jet, ok
from support.jet_dev import JetDev
from support.node_nats import run_node_script

PARTITIONS = 3
KEYS = [f"customer-{i}" for i in range(10)]


def _node(url: str, subject: str) -> dict[str, dict[str, object]]:
    out: dict[str, dict[str, object]] = run_node_script(
        "node_keyed.js", url, subject, str(PARTITIONS), *KEYS
    )
    return out


def test_each_key_lands_on_one_partition_from_sdk_cli_and_nats_js(jet_dev: JetDev) -> None:
    stream = f"keys-{uuid.uuid4().hex[:6]}"

    async def sdk_side() -> None:
        async with Client(jet_dev.servers) as client:
            await client.create_stream(stream, stream, partitions=PARTITIONS)
            async with Producer(client, stream, ack=AckPolicy.ALL) as producer:
                for key in KEYS:
                    await producer.send(b"sdk", key=key.encode())

    anyio.run(sdk_side)
    for key in KEYS:
        ack = orjson.loads(ok(jet(jet_dev, "pub", stream, "cli", "--key", key, "--json")))
        assert ack["partition"] == partition_for_key(key.encode(), PARTITIONS), (key, ack)
    node = _node(jet_dev.nats_url, stream)
    for key in KEYS:
        assert node[key]["partition"] == partition_for_key(key.encode(), PARTITIONS)

    async def read_back() -> dict[str, set[int]]:
        where: dict[str, set[int]] = defaultdict(set)
        count = 0
        async with (
            Client(jet_dev.servers) as client,
            Consumer(client, stream, start="earliest") as consumer,
        ):
            with anyio.fail_after(30):
                while count < 3 * len(KEYS):
                    for msg in await consumer.fetch(timeout=1):
                        assert msg.key is not None
                        where[msg.key.decode()].add(msg.partition)
                        count += 1
        return where

    where = anyio.run(read_back)
    assert sorted(where) == sorted(KEYS)
    for key, partitions in where.items():
        assert partitions == {partition_for_key(key.encode(), PARTITIONS)}, (key, partitions)
    assert len({p for ps in where.values() for p in ps}) > 1, "the keys all hashed alike"


def test_jet_pub_partition_option(jet_dev: JetDev) -> None:
    stream = f"keyp-{uuid.uuid4().hex[:6]}"
    ok(jet(jet_dev, "stream", "create", stream, "--partitions", str(PARTITIONS)))
    ack = orjson.loads(
        ok(jet(jet_dev, "pub", stream, "v", "--key", "k", "--partition", "2", "--json"))
    )
    assert ack["partition"] == 2
    bad = jet(jet_dev, "pub", stream, "v", "--partition", "7")
    assert bad.returncode != 0
    assert "no partition 7" in bad.stderr
