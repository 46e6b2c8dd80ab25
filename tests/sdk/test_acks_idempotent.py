"""Keyed publishing and idempotent retries (issue 5, item 1).

- keys map to partitions by murmur2 (spec/partitioning.md), the same in every process;
- per-partition order survives batching and retried requests;
- a Produce whose answer is lost (the connection breaks after the server stored the batch) is
  retried by the client with the same producer id and sequences, and stored once.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid

import anyio
import pytest

from jetsdk import Client, Consumer, Producer
from jetsdk.codec.error_codes import AckPolicy, ErrorCode
from jetsdk.codec.frames import Api, FrameDecoder
from jetsdk.codec.messages import ProduceMessage, ProduceRequest
from jetsdk.partitioner import partition_for_key
from jetsdk.transport import READ_CHUNK_BYTES, Address, ByteStream, tcp_dialer
from support.jet_dev import JetDev

from .helpers import cluster_and_client

pytestmark = pytest.mark.anyio

KEYS = [b"alice", b"bob", b"", b"\x00\xff", "ключ".encode(), b"k" * 100]


def test_key_partitions_are_the_same_in_another_process() -> None:
    code = (
        "import json, sys; from jetsdk.partitioner import partition_for_key; "
        "keys = json.loads(sys.argv[1]); "
        "print(json.dumps([partition_for_key(bytes.fromhex(k), 12) for k in keys]))"
    )
    env = dict(os.environ, PYTHONHASHSEED="12345")
    proc = subprocess.run(
        [sys.executable, "-c", code, json.dumps([k.hex() for k in KEYS])],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=True,
    )
    assert json.loads(proc.stdout) == [partition_for_key(k, 12) for k in KEYS]


async def test_order_per_partition_survives_batching_and_retries() -> None:
    async with cluster_and_client() as (cluster, client):
        cluster.add_stream("s", partitions=3)
        cluster.fail_next_produce.extend([ErrorCode.NOT_LEADER, ErrorCode.UNAVAILABLE] * 2)
        sent: dict[int, list[bytes]] = {0: [], 1: [], 2: []}
        async with Producer(client, "s", linger=0.005, max_batch_messages=7) as producer:
            handles = []
            for i in range(90):
                key = KEYS[i % len(KEYS)]
                value = b"%d" % i
                sent[partition_for_key(key, 3)].append(value)
                handles.append(await producer.send_soon(value, key))
            acks = [await h for h in handles]
        assert len(cluster.produce_batches) > 3  # batched
        assert len({(a.partition, a.offset) for a in acks}) == 90
        async with Consumer(client, "s") as consumer:
            got: dict[int, list[bytes]] = {0: [], 1: [], 2: []}
            with anyio.fail_after(10):
                while sum(map(len, got.values())) < 90:
                    for m in await consumer.fetch(timeout=5):
                        got[m.partition].append(m.value)
        assert got == sent


class _LoseFirstProduceAnswer:
    """A dialer whose connections break right after the server answers the first Produce:
    the client never sees that answer and must retry (the batch is stored already)."""

    def __init__(self) -> None:
        self.cut = 0

    async def dial(self, address: Address, timeout: float) -> ByteStream:  # noqa: ASYNC109
        return _Cutting(await tcp_dialer(address, timeout), self)


class _Cutting:
    def __init__(self, inner: ByteStream, owner: _LoseFirstProduceAnswer) -> None:
        self.inner = inner
        self.owner = owner
        self.decoder = FrameDecoder()

    async def read(self, max_bytes: int = READ_CHUNK_BYTES) -> bytes:
        data = await self.inner.read(max_bytes)
        if self.owner.cut == 0 and data:
            self.decoder.feed(data)
            while (frame := self.decoder.next_frame()) is not None:
                if frame.api == Api.PRODUCE and frame.is_response:
                    self.owner.cut += 1
                    await self.inner.aclose()
                    return b""  # looks like the server closed the connection
        return data

    async def write(self, data: bytes | memoryview) -> None:
        await self.inner.write(data)

    async def aclose(self) -> None:
        await self.inner.aclose()


@pytest.mark.parametrize("idempotent", [True, False])
async def test_lost_answer_is_retried_and_stored_once(jet_dev: JetDev, idempotent: bool) -> None:
    name = f"idem-{uuid.uuid4().hex[:8]}"
    async with Client(jet_dev.servers) as admin:
        await admin.create_stream(name, name)
    dialer = _LoseFirstProduceAnswer()
    async with Client(jet_dev.servers, dialer=dialer.dial) as client:
        async with Producer(client, name, linger=0.01, idempotent=idempotent) as producer:
            handles = [await producer.send_soon(b"v%d" % i) for i in range(5)]
            acks = [await h for h in handles]
        assert dialer.cut == 1
        values = []
        async with Consumer(client, name) as consumer:
            with anyio.fail_after(10):
                while True:
                    batch = await consumer.fetch(timeout=1)
                    if not batch:
                        break
                    values += [m.value for m in batch]
    expected = [b"v%d" % i for i in range(5)]
    if idempotent:
        assert values == expected  # the retry was recognised: stored once
        assert [a.offset for a in acks] == [0, 1, 2, 3, 4]
    else:
        assert values == expected + expected  # the control: at-least-once stores it twice


async def test_same_sequence_sent_twice_is_a_duplicate(jet_dev: JetDev) -> None:
    name = f"dup-{uuid.uuid4().hex[:8]}"
    async with Client(jet_dev.servers) as client:
        await client.create_stream(name, name)
        request = ProduceRequest(
            stream=name,
            partition=0,
            # ALL: the ack then implies the high watermark covers both records (a LEADER
            # ack may come before the flush that moves it, seen under load).
            ack_policy=AckPolicy.ALL,
            timeout_ms=5000,
            messages=(ProduceMessage(b"a"), ProduceMessage(b"b")),
            producer_id=4242,
            base_seq=0,
        )
        first = await client.produce(request)
        second = await client.produce(request)
        assert [r.error_code for r in first] == [ErrorCode.NONE] * 2
        assert [r.error_code for r in second] == [ErrorCode.DUPLICATE_SEQUENCE] * 2
        assert [(r.offset, r.timestamp) for r in second] == [(r.offset, r.timestamp) for r in first]
        assert (await client.list_offsets(name, 0, "latest")).hw == 2
