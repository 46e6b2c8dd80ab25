"""Replies on one connection never interleave (a regression of this session's lock-free
write of replies the socket takes at once, found by `bench table`'s 1,000,000-key table).

Four partitions are fetched at once on one client connection, with answers of megabytes
(sendfile, partial writes while the client reads): every record of every answer must pass
its CRC and every partition read to its end. On the broken write path the byte stream
tore (a frame length of gigabytes, or a record CRC mismatch)."""

from __future__ import annotations

import anyio
import pytest

from jetsdk import AckPolicy, Client, Producer
from jetsdk.codec.record import iter_records
from support.jet_dev import JetDev

pytestmark = pytest.mark.anyio

PARTITIONS = 4
PER_PARTITION = 6_000
VALUE = b"v" * 1000
ROUNDS = 3


async def _read_all(client: Client, stream: str, partition: int, counts: dict[int, int]) -> None:
    offset = 0
    while offset < PER_PARTITION:
        header, raw = await client.fetch(
            stream, partition, offset, max_bytes=4 * 1024 * 1024, max_wait=1.0
        )
        records = list(iter_records(raw, verify=True))  # raises on a torn stream
        assert records, (partition, offset, header.hw)
        counts[partition] += len(records)
        offset = records[-1].offset + 1


async def test_answers_fetched_at_once_on_one_connection_stay_whole(jet_dev: JetDev) -> None:
    stream = "interleave"
    async with Client(jet_dev.servers) as client:
        await client.create_stream(stream, partitions=PARTITIONS, replication_factor=1)
        async with Producer(client, stream, ack=AckPolicy.LEADER) as producer:
            for _ in range(PER_PARTITION):
                for p in range(PARTITIONS):
                    await producer.send_soon(VALUE, partition=p)
            await producer.flush()
    for _ in range(ROUNDS):
        counts = dict.fromkeys(range(PARTITIONS), 0)
        async with Client(jet_dev.servers, request_timeout=60.0) as client:
            with anyio.fail_after(120):
                async with anyio.create_task_group() as tg:
                    for p in range(PARTITIONS):
                        tg.start_soon(_read_all, client, stream, p, counts)
        assert counts == dict.fromkeys(range(PARTITIONS), PER_PARTITION)
