"""One Fetch answer spans segment boundaries up to ``max_bytes`` (issue 36: a consumer's
``fetch(1000)`` returned 70 of 301 stored records, one 4 KiB segment's worth)."""

from __future__ import annotations

from pathlib import Path

import pytest

from jetsdk import Client, Consumer
from jetsdk.codec.error_codes import AckPolicy
from jetsdk.codec.messages import ProduceMessage
from jetserver.testing import running_server
from support.nats_server import NatsServer
from support.raw_client import RawClient

pytestmark = pytest.mark.anyio

COUNT = 301
SEGMENT_BYTES = 4096


@pytest.mark.parametrize("io", ["sendfile", "read"])
async def test_one_answer_spans_segments(nats_server: NatsServer, tmp_path: Path, io: str) -> None:
    async with (
        running_server(nats_server.url, tmp_path / "data", fetch__io=io) as server,
        await RawClient.connect(server.address) as c,
    ):
        await c.create_stream(name="seg", subject="seg", segment_max_bytes=SEGMENT_BYTES)
        messages = [ProduceMessage(b"value-%03d" % i, key=b"k%d" % i) for i in range(COUNT)]
        for start in range(0, COUNT, 50):
            await c.produce("seg", 0, messages[start : start + 50], ack_policy=AckPolicy.ALL)
        segments = len(list((tmp_path / "data").rglob("*.log")))
        assert segments >= 4, segments  # the records lie in several segment files

        header, records = await c.fetch("seg", 0, 0, max_bytes=1 << 20)
        assert [r.offset for r in records] == list(range(COUNT))
        assert header.hw == COUNT

        # A budget of 2.5 segments: filled across two boundaries, never exceeded.
        budget = SEGMENT_BYTES * 5 // 2
        header, records = await c.fetch("seg", 0, 7, max_bytes=budget)
        assert records[0].offset == 7
        assert [r.offset for r in records] == list(range(7, 7 + len(records)))
        assert header.records_len <= budget
        assert header.records_len > 2 * SEGMENT_BYTES - 600, header.records_len

        # The user's view: one fetch of up to 1000 records gets all 301.
        async with Client([server.address]) as client, Consumer(client, "seg") as consumer:
            got = await consumer.fetch(1000, timeout=2)
        assert [m.offset for m in got] == list(range(COUNT))
