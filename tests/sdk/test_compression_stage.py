"""With ``compression_offload_bytes`` the async producer compresses values of that size and
more off the event loop (jetsdk.producer.compression_stage): in a worker thread, the
messages still stored in send order (short values between long ones included), counted
against ``max_pending``, drained by ``flush``, and failed with ClientClosed if the producer
closes first. By default values of 8 KiB and more go there (DEFAULT_OFFLOAD_BYTES); with
``compression_offload_bytes=None`` every value is compressed on the loop's thread."""

from __future__ import annotations

import os
import threading
from collections.abc import AsyncIterator

import anyio
import pytest

pytest.importorskip("zstandard")

from jetsdk import Client, ClientClosed, Consumer, Producer
from jetsdk.codec.compression import COMPRESSION_HEADER, ValueCompressor, decompress_value
from jetsdk.codec.record import Record, iter_records
from jetsdk.producer.compression_stage import DEFAULT_OFFLOAD_BYTES
from jetsdk.producer.handle import SendHandle
from support.jet_dev import JetDev
from support.names import unique

pytestmark = pytest.mark.anyio

OFFLOAD = 8 * 1024
"""The producers' ``compression_offload_bytes`` here."""


@pytest.fixture
async def stream(jet_dev: JetDev) -> AsyncIterator[tuple[Client, str]]:
    """A client and a new stream of one partition."""
    name = unique("cs")
    async with Client(jet_dev.servers) as client:
        await client.create_stream(name, name)
        yield client, name


def _json_like(size: int, seed: int) -> bytes:
    line = b'{"seed":%d,"item":"widget","qty":1,"note":"same again"}\n' % seed
    return (line * (size // len(line) + 1))[:size]


async def _stored(client: Client, name: str, count: int) -> dict[int, Record]:
    stored: dict[int, Record] = {}
    with anyio.fail_after(20):
        while len(stored) < count:
            _, raw = await client.fetch(name, 0, len(stored), max_bytes=8 << 20, max_wait=1)
            stored.update((r.offset, r) for r in iter_records(raw))
    return stored


async def test_large_values_are_compressed_off_the_loop_in_send_order(
    stream: tuple[Client, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    threads: list[int] = []
    compress, compress_many = ValueCompressor.compress, ValueCompressor.compress_many

    def recording(self: ValueCompressor, value: bytes) -> bytes | None:
        if len(value) >= OFFLOAD:
            threads.append(threading.get_ident())
        return compress(self, value)

    def recording_many(self: ValueCompressor, values: list[bytes]) -> list[bytes | None]:
        threads.extend(threading.get_ident() for v in values if len(v) >= OFFLOAD)
        return compress_many(self, values)

    monkeypatch.setattr(ValueCompressor, "compress", recording)
    monkeypatch.setattr(ValueCompressor, "compress_many", recording_many)
    values = []
    for i in range(60):  # long compressible, short, long incompressible, compressed-short
        values += [_json_like(16384 + i, i), b"short-%d" % i, os.urandom(OFFLOAD)]
        values.append(_json_like(2048, i))
    client, name = stream
    async with Producer(
        client, name, compression="zstd", max_pending=50, compression_offload_bytes=OFFLOAD
    ) as producer:
        handles = []
        for value in values:
            handles.append(await producer.send_soon(value))
            assert producer.pending <= 50
        await producer.flush()
        assert producer.pending == 0
        offsets = [(await h).offset for h in handles]
    assert offsets == list(range(len(values)))
    assert threads
    assert threading.get_ident() not in threads
    stored = await _stored(client, name, len(values))
    compressed = 0
    for offset, value in enumerate(values):
        record = stored[offset]
        if dict(record.headers).get(COMPRESSION_HEADER) == b"zstd":
            assert decompress_value("zstd", record.value) == value
            compressed += offset % 4 == 0
        else:
            assert record.value == value
    assert compressed == 60
    async with Consumer(client, name) as consumer:
        got = []
        with anyio.fail_after(20):
            async for msg in consumer:
                got.append(msg.value)
                if len(got) == len(values):
                    break
    assert got == values


async def test_closing_fails_what_the_stage_still_holds(stream: tuple[Client, str]) -> None:
    client, name = stream
    handles: list[SendHandle] = []

    async def leave_early() -> None:
        async with Producer(
            client, name, compression="zstd", compression_offload_bytes=OFFLOAD
        ) as producer:
            for i in range(10):  # no checkpoint in between: the stage has not run
                handles.append(await producer.send_soon(_json_like(16384, i)))
            assert producer.pending == 10
            raise RuntimeError("leaving")

    with pytest.raises(RuntimeError, match="leaving"):
        await leave_early()
    for handle in handles:
        with pytest.raises(ClientClosed):
            await handle


async def test_a_value_whose_compression_fails_is_sent_as_it_is(
    stream: tuple[Client, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    compress, compress_many = ValueCompressor.compress, ValueCompressor.compress_many

    def failing(self: ValueCompressor, value: bytes) -> bytes | None:
        if value.startswith(b"boom"):
            raise RuntimeError("codec failure")
        return compress(self, value)

    def failing_many(self: ValueCompressor, values: list[bytes]) -> list[bytes | None]:
        if any(value.startswith(b"boom") for value in values):
            raise RuntimeError("codec failure")
        return compress_many(self, values)

    monkeypatch.setattr(ValueCompressor, "compress", failing)
    monkeypatch.setattr(ValueCompressor, "compress_many", failing_many)
    values = [_json_like(16384, 1), b"boom" + _json_like(16384, 2), _json_like(16384, 3)]
    client, name = stream
    async with Producer(
        client, name, compression="zstd", compression_offload_bytes=OFFLOAD
    ) as producer:
        handles = [await producer.send_soon(value) for value in values]
        offsets = [(await h).offset for h in handles]
    assert offsets == [0, 1, 2]
    stored = await _stored(client, name, len(values))
    assert [COMPRESSION_HEADER in dict(stored[i].headers) for i in range(3)] == [
        True,
        False,
        True,
    ]
    assert stored[1].value == values[1]


async def test_an_awaited_send_does_not_overtake_what_the_stage_holds(
    stream: tuple[Client, str],
) -> None:
    """A message sent with ``send`` to an idle partition at linger 0 is written at once
    (jetsdk.producer.direct), but not while the compression stage holds earlier messages:
    they are not yet queued, so the partition looked idle and the short value was stored
    before the long ones sent ahead of it."""
    client, name = stream
    async with Producer(
        client, name, compression="zstd", linger=0, compression_offload_bytes=OFFLOAD
    ) as producer:
        for round_ in range(5):
            longs = [
                await producer.send_soon(_json_like(OFFLOAD * 2, round_ * 10 + i)) for i in range(4)
            ]
            short = await producer.send(b"after the long ones %d" % round_)
            long_offsets = [(await h).offset for h in longs]
            assert max(long_offsets) < short.offset, (long_offsets, short.offset)


async def test_with_offload_none_values_are_compressed_on_the_loop(
    stream: tuple[Client, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """With ``compression_offload_bytes=None`` no value goes to a worker thread."""
    threads: list[int] = []
    compress = ValueCompressor.compress

    def recording(self: ValueCompressor, value: bytes) -> bytes | None:
        threads.append(threading.get_ident())
        return compress(self, value)

    monkeypatch.setattr(ValueCompressor, "compress", recording)
    values = [_json_like(64 * 1024, i) for i in range(8)]
    client, name = stream
    async with Producer(
        client, name, compression="zstd", compression_offload_bytes=None
    ) as producer:
        handles = [await producer.send_soon(value) for value in values]
        offsets = [(await h).offset for h in handles]
    assert offsets == list(range(len(values)))
    stored = await _stored(client, name, len(values))
    assert set(threads) == {threading.get_ident()}
    assert len(threads) == len(values)
    for offset, value in enumerate(values):
        assert dict(stored[offset].headers).get(COMPRESSION_HEADER) == b"zstd"
        assert decompress_value("zstd", stored[offset].value) == value


async def test_by_default_long_values_are_compressed_off_the_loop(
    stream: tuple[Client, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """By default values of DEFAULT_OFFLOAD_BYTES and more are compressed in a worker
    thread (a batch at a time, measured faster than on the loop), shorter ones on the
    loop's thread; all stored compressed, in send order."""
    loop_thread = threading.get_ident()
    threads: dict[int, int] = {}
    compress, compress_many = ValueCompressor.compress, ValueCompressor.compress_many

    def recording(self: ValueCompressor, value: bytes) -> bytes | None:
        threads[len(value)] = threading.get_ident()
        return compress(self, value)

    def recording_many(self: ValueCompressor, values: list[bytes]) -> list[bytes | None]:
        threads.update((len(v), threading.get_ident()) for v in values)
        return compress_many(self, values)

    monkeypatch.setattr(ValueCompressor, "compress", recording)
    monkeypatch.setattr(ValueCompressor, "compress_many", recording_many)
    long_size, short_size = DEFAULT_OFFLOAD_BYTES, DEFAULT_OFFLOAD_BYTES - 1
    values = [_json_like(long_size, 1), _json_like(short_size, 2)]
    client, name = stream
    async with Producer(client, name, compression="zstd") as producer:
        assert producer.compression_offload_bytes == DEFAULT_OFFLOAD_BYTES == 8 * 1024
        offsets = [(await producer.send(value)).offset for value in values]
    assert offsets == [0, 1]
    assert threads[long_size] != loop_thread
    assert threads[short_size] == loop_thread
    stored = await _stored(client, name, len(values))
    for offset, value in enumerate(values):
        assert dict(stored[offset].headers).get(COMPRESSION_HEADER) == b"zstd"
        assert decompress_value("zstd", stored[offset].value) == value
