"""Compressed values end to end (issue 39, item 3; spec/envelope.md, "Compressed values"):
``Producer(compression=...)`` stores values compressed with the ``Jet-Compression`` header,
the consumer hands the application what was sent, the stream's ``max_message_bytes``
counts the compressed size, and on a compacted stream the key index still reads the key
(per-key compare-and-set from a plain NATS client sending a value it compressed itself).
Before, ``Producer`` had no ``compression`` argument."""

from __future__ import annotations

import uuid

import anyio
import nats
import orjson
import pytest

pytest.importorskip("zstandard")
pytest.importorskip("lz4")

from jetsdk import Client, Consumer, MessageTooLarge, Producer
from jetsdk.codec.compression import (
    COMPRESSION_HEADER,
    CompressionError,
    compress_value,
    decompress_value,
)
from jetsdk.codec.error_codes import ErrorCode
from jetsdk.codec.record import iter_records
from support.jet_dev import JetDev

pytestmark = pytest.mark.anyio

LIMIT = 3000
"""The stream's max_message_bytes: below the values, above them compressed."""
VALUE = b"".join(
    b'{"order":%d,"item":"widget","qty":1,"note":"same again"}\n' % i for i in range(150)
)


async def test_producer_compresses_consumer_decompresses(jet_dev: JetDev) -> None:
    assert len(VALUE) > 2 * LIMIT
    name = f"cz-{uuid.uuid4().hex[:8]}"
    async with Client(jet_dev.servers) as client:
        await client.create_stream(name, name, compact=True, max_message_bytes=LIMIT)
        async with Producer(client, name, linger=0) as plain:
            with pytest.raises(MessageTooLarge):
                await plain.send(VALUE, key=b"k1")
        sent = []
        for codec in ("zstd", "lz4"):
            async with Producer(client, name, linger=0, compression=codec) as producer:
                headers = [("Content-Type", b"application/json")]
                ack = await producer.send(VALUE, key=codec.encode(), headers=headers)
                sent.append((ack.offset, codec))
                short = await producer.send(b"short", key=b"s")  # below compression_min_bytes
                gone = await producer.send(b"", key=b"s")  # a tombstone stays empty
                sent.extend([(short.offset, None), (gone.offset, None)])
        with pytest.raises(CompressionError):
            Producer(client, name, compression="brotli")

        # Stored compressed, header and key readable.
        stored = {}
        with anyio.fail_after(20):
            while len(stored) < len(sent):  # each answer brings what is committed
                _, raw = await client.fetch(name, 0, len(stored), max_bytes=1 << 20, max_wait=1)
                stored.update((r.offset, r) for r in iter_records(raw))
        for offset, codec in sent:
            record = stored[offset]
            if codec is None:
                assert COMPRESSION_HEADER not in dict(record.headers)
                continue
            assert dict(record.headers)[COMPRESSION_HEADER] == codec.encode()
            assert record.key == codec.encode()
            assert len(record.value) < LIMIT
            assert decompress_value(codec, record.value) == VALUE

        # The consumer gives back what was sent.
        got = {}
        async with Consumer(client, name) as consumer:
            with anyio.fail_after(20):
                async for msg in consumer:
                    got[msg.offset] = msg
                    if len(got) == len(sent):
                        break
        for offset, codec in sent:
            msg = got[offset]
            if codec is not None:
                assert msg.value == VALUE
                assert msg.headers == (("Content-Type", b"application/json"),)
        assert [got[o].value for o, c in sent if c is None] == [b"short", b"", b"short", b""]


@pytest.mark.parametrize("anyio_backend", ["asyncio"])  # nats-py runs on asyncio only
async def test_key_compare_and_set_reads_the_key_of_a_compressed_value(jet_dev: JetDev) -> None:
    name = f"ccas-{uuid.uuid4().hex[:8]}"
    packed = compress_value("zstd", VALUE)
    assert packed is not None
    async with Client(jet_dev.servers) as client:
        await client.create_stream(name, name, compact=True)
    nc = await nats.connect(jet_dev.nats_url, allow_reconnect=False)
    try:

        async def put(expected: int) -> dict[str, object]:
            headers = {
                "Jet-Key": "user-1",
                "Jet-Expected-Key-Offset": str(expected),
                COMPRESSION_HEADER: "zstd",
            }
            reply = await nc.request(name, packed, timeout=10, headers=headers)
            answer: dict[str, object] = orjson.loads(reply.data)
            return answer

        first = await put(-1)  # create if absent
        assert first["offset"] == 0
        second = await put(0)
        assert second["offset"] == 1
        stale = await put(0)
        error = stale["error"]
        assert isinstance(error, dict)
        assert error["code"] == ErrorCode.WRONG_EXPECTED_KEY_OFFSET
        assert error["key_offset"] == 1
    finally:
        await nc.close()
    async with Client(jet_dev.servers) as client, Consumer(client, name) as consumer:
        with anyio.fail_after(20):
            async for msg in consumer:
                assert (msg.key, msg.value) == (b"user-1", VALUE)
                if msg.offset == 1:
                    break
