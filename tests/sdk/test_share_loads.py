"""A share member loads a won lease's records with Fetches sized by what its records take
(spec/share-groups.md §5, "Records"), not a fixed 512 bytes a record, against a real
`jet dev`."""

from __future__ import annotations

import uuid
from typing import Any

import anyio
import pytest

from jetsdk import Client, Producer, ShareConsumer
from jetsdk.codec.record import iter_records
from support.jet_dev import JetDev

pytestmark = pytest.mark.anyio
COUNT, BATCH = 4000, 500


async def test_loads_ask_for_about_what_the_records_take(jet_dev: JetDev) -> None:
    stream, group = f"loads-{uuid.uuid4().hex[:6]}", f"g-{uuid.uuid4().hex[:6]}"
    asked: list[int] = []
    async with Client(jet_dev.servers) as client:
        await client.create_stream(stream, stream)
        async with Producer(client, stream) as producer:
            for i in range(COUNT):
                await producer.send_soon(b"%06d" % i + b"x" * 94)
        _, raw = await client.fetch(stream, 0, 0, max_bytes=1 << 20, max_wait=0.0)
        per_record = len(raw) / len(list(iter_records(raw)))  # about, with a partial tail
        fetch = client.fetch

        async def watched(name: str, partition: int, offset: int, **kw: Any) -> Any:
            if name == stream and kw["max_bytes"] > 1 and kw["max_wait"] == 0.0:
                asked.append(kw["max_bytes"])
            return await fetch(name, partition, offset, **kw)

        client.fetch = watched  # type: ignore[method-assign]
        got: set[int] = set()
        async with ShareConsumer(client, stream, group=group, batch=BATCH) as consumer:
            with anyio.fail_after(60):
                while len(got) < COUNT:
                    for msg in await consumer.fetch(BATCH, timeout=5):
                        assert int(msg.value[:6]) == msg.offset  # the right record
                        got.add(msg.offset)
                        msg.ack()
            await consumer.flush()
    assert got == set(range(COUNT))
    assert len(asked) >= COUNT // BATCH
    # The first load guesses 512 B a record; the next ones ask for about what the records
    # take, 1.25 times (before: always 512 B a record, more than 3 times).
    assert sum(asked[1:]) <= 2 * COUNT * per_record, (asked, per_record)
