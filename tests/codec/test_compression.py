"""Compressed values (spec/envelope.md, "Compressed values"; issue 39, item 3): the
vectors of spec/vectors/compression.json decode, a producer's compression step keeps keys
and short values as they are, and a consumer's step gives back what was sent."""

from __future__ import annotations

import random
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

pytest.importorskip("zstandard")
pytest.importorskip("lz4")

from jetsdk.codec import compression
from jetsdk.codec.compression import (
    COMPRESSION_HEADER,
    MAX_SKIP_AFTER_MISS,
    ZSTD_LEVEL,
    CompressionError,
    ValueCompressor,
    compress_value,
    decompress_value,
    plain_records,
)
from jetsdk.codec.record import Record, decode_record
from jetsdk.producer.checks import compressed
from support.vectors import load_vectors

VECTORS = load_vectors("compression.json")
JSON_LIKE = b"".join(b'{"id":%d,"name":"user-%d","tags":["a","b"]}\n' % (i, i) for i in range(200))


def _ids(cases: list[dict[str, Any]]) -> list[str]:
    return [c["name"] for c in cases]


@pytest.mark.parametrize("case", VECTORS["cases"], ids=_ids(VECTORS["cases"]))
def test_compression_vector(case: dict[str, Any]) -> None:
    raw = bytes.fromhex(case["hex"])
    record, used = decode_record(raw)
    assert used == len(raw)
    assert record.key == bytes.fromhex(case["fields"]["key_hex"])  # stored as it is
    assert (COMPRESSION_HEADER, case["codec"].encode()) in record.headers
    plain = bytes.fromhex(case["plain_value_hex"])
    assert decompress_value(case["codec"], record.value) == plain
    [seen] = plain_records([record])
    assert seen.value == plain
    assert [[n, v.hex()] for n, v in seen.headers] == case["plain_headers"]
    assert (seen.key, seen.offset, seen.subject) == (record.key, record.offset, record.subject)


@pytest.mark.parametrize("case", VECTORS["invalid"], ids=_ids(VECTORS["invalid"]))
def test_compression_invalid_vector(case: dict[str, Any]) -> None:
    with pytest.raises(CompressionError) as info:
        decompress_value(case["codec"], bytes.fromhex(case["hex"]))
    assert info.value.reason == case["error_reason"]


@pytest.mark.parametrize("codec", ["zstd", "lz4"])
def test_round_trip_and_what_stays_plain(codec: str) -> None:
    packed = compress_value(codec, JSON_LIKE)
    assert packed is not None
    assert len(packed) < len(JSON_LIKE) // 4
    assert decompress_value(codec.upper().encode(), packed) == JSON_LIKE  # any case
    assert compress_value(codec, b"") is None  # a tombstone stays a tombstone
    assert compress_value(codec, JSON_LIKE[:100]) is None  # below min_bytes
    assert compress_value(codec, JSON_LIKE[:100], min_bytes=1) is not None
    noise = random.Random(39).randbytes(4096)
    assert compress_value(codec, noise) is None  # would grow: stored as it is
    with pytest.raises(CompressionError) as info:
        decompress_value(codec, packed, limit=len(JSON_LIKE) - 1)
    assert info.value.reason == "limit"


def test_reused_zstd_contexts_write_the_same_bytes_in_every_thread_and_survive_errors() -> None:
    """Each thread reuses its zstd contexts: the bytes are the same as a fresh
    compressor's (the vectors' writer), a corrupt or oversized value does not spoil the
    next call, and threads compressing at once do not mix their values."""
    import zstandard

    fresh = zstandard.ZstdCompressor(level=ZSTD_LEVEL, write_content_size=True).compress(JSON_LIKE)
    assert compress_value("zstd", JSON_LIKE) == fresh
    with pytest.raises(CompressionError):
        decompress_value("zstd", fresh[:-7])
    with pytest.raises(CompressionError):
        decompress_value("zstd", fresh, limit=10)
    assert decompress_value("zstd", fresh) == JSON_LIKE
    values = [JSON_LIKE + b"%d" % i * 300 for i in range(8)]

    def work(value: bytes) -> bool:
        return all(
            decompress_value("zstd", compress_value("zstd", value) or b"") == value
            for _ in range(50)
        )

    with ThreadPoolExecutor(max_workers=4) as pool:
        assert all(pool.map(work, values))


def test_producer_step_keeps_key_and_headers_and_an_application_codec() -> None:
    headers = (("Content-Type", b"application/json"),)
    value, out = compressed(ValueCompressor("zstd", 1024), JSON_LIKE, headers)
    assert out == (*headers, (COMPRESSION_HEADER, b"zstd"))
    assert decompress_value("zstd", value) == JSON_LIKE
    short, same = compressed(ValueCompressor("zstd", 1024), b"tiny", headers)
    assert (short, same) == (b"tiny", headers)
    # Already compressed by the application (its own header): left alone.
    mine = ((COMPRESSION_HEADER.lower(), b"lz4"),)
    assert compressed(ValueCompressor("zstd"), JSON_LIKE, mine) == (JSON_LIKE, mine)
    with pytest.raises(CompressionError) as info:
        ValueCompressor("brotli")
    assert info.value.reason == "codec"


@pytest.mark.parametrize("codec", ["zstd", "lz4"])
def test_incompressible_values_are_skipped_after_misses(
    codec: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After values that do not get smaller, the next 1, 2, 4, ... (at most
    MAX_SKIP_AFTER_MISS) are sent as they are without trying; a value that gets smaller
    starts over, and short values do not count."""
    tried: list[bytes] = []
    real = compression._COMPRESSORS[codec]

    def counting(value: bytes) -> bytes:
        tried.append(value)
        return real(value)

    monkeypatch.setitem(compression._COMPRESSORS, codec, counting)
    rng = random.Random(39)
    noise = [rng.randbytes(4096) for _ in range(200)]
    step = ValueCompressor(codec)
    assert all(step.compress(v) is None for v in noise)
    # Tried at 0, 2, 5, 10, 19, then every MAX_SKIP_AFTER_MISS + 1 values from 36 on.
    assert len(tried) == 5 + (199 - 36) // (MAX_SKIP_AFTER_MISS + 1) + 1
    assert len(tried) < 200 // 8
    # A compressible value inside a skip is sent as it is; the first one tried after the
    # skip is compressed and starts over: the next noise value is tried again.
    tried.clear()
    step = ValueCompressor(codec)
    assert step.compress(noise[0]) is None  # a miss: skip 1
    assert step.compress(JSON_LIKE) is None  # skipped
    packed = step.compress(JSON_LIKE)
    assert packed is not None
    assert decompress_value(codec, packed) == JSON_LIKE
    assert step.compress(noise[1]) is None
    assert len(tried) == 3  # noise[0], JSON_LIKE, noise[1]
    assert step.compress(b"short") is None  # below min_bytes: not tried, not skipped
    assert step.compress(JSON_LIKE) is None  # the skip of 1 after noise[1]
    assert len(tried) == 3


@pytest.mark.parametrize("seed", range(6))
def test_compress_many_gives_what_compress_gives_one_by_one(seed: int) -> None:
    """ValueCompressor.compress_many (zstd's values in one library call while nothing was
    missed) returns what compress returns value by value, the same bytes, and leaves the
    same skip counters: mixes of compressible, incompressible, short and empty values."""
    rng = random.Random(seed)
    kinds = [JSON_LIKE, b"", b"short", rng.randbytes(2048), JSON_LIKE[: 1024 + seed]]
    values = [rng.choice(kinds) if rng.random() < 0.6 else JSON_LIKE for _ in range(120)]
    one, many = ValueCompressor("zstd"), ValueCompressor("zstd")
    got: list[bytes | None] = []
    for start in range(0, len(values), 17):
        got += many.compress_many(values[start : start + 17])
    assert got == [one.compress(v) for v in values]
    assert (many._skip, many._misses) == (one._skip, one._misses)
    assert any(g is not None for g in got)
    assert any(g is None for g in got)


def test_compress_many_without_the_batch_call_compresses_one_by_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """zstandard's CFFI backend raises NotImplementedError for multi_compress_to_buffer:
    compress_many then compresses value by value, the same bytes, without an error."""
    import zstandard

    class CffiLike:
        def __init__(self) -> None:
            self._real = zstandard.ZstdCompressor(level=ZSTD_LEVEL, write_content_size=True)

        def compress(self, value: bytes) -> bytes:
            out: bytes = self._real.compress(value)
            return out

        def multi_compress_to_buffer(self, values: object, threads: int = 0) -> object:
            raise NotImplementedError

    monkeypatch.setattr(compression._contexts, "compressor", CffiLike(), raising=False)
    values = [JSON_LIKE, JSON_LIKE[:3000], JSON_LIKE[5:]]
    got = ValueCompressor("zstd").compress_many(values)
    assert got == [compress_value("zstd", v) for v in values]
    assert all(g is not None and decompress_value("zstd", g) == v for g, v in zip(got, values))


def test_consumer_step_leaves_what_it_cannot_read() -> None:
    packed = compress_value("zstd", JSON_LIKE)
    assert packed is not None
    good = Record(1, 2, 0, packed, key=b"k", headers=((COMPRESSION_HEADER, b"zstd"),))
    corrupt = Record(2, 2, 0, packed[:-3], key=b"k", headers=((COMPRESSION_HEADER, b"zstd"),))
    unknown = Record(3, 2, 0, packed, headers=((COMPRESSION_HEADER, b"brotli"),))
    plain = Record(4, 2, 0, b"as is", headers=(("X", b"1"),))
    out = plain_records([good, corrupt, unknown, plain])
    assert out[0].value == JSON_LIKE
    assert out[0].headers == ()
    assert out[0].key == b"k"
    assert out[1:] == [corrupt, unknown, plain]  # as stored, header included
