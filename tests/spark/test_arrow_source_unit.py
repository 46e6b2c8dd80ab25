"""The source's Arrow conversion straight from record bytes (jetspark._records), against
the decoded records: every column, null and empty keys, headers, offsets, the range end,
partial and corrupt records. No server, no JVM."""

from __future__ import annotations

import random
import struct

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jetsdk.codec.errors import CodecError
from jetsdk.codec.record import Record, encode_record, frame_body, iter_records
from jetspark._records import records_batch, scan
from jetspark.schema import records_to_batch

_HEADERS = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
SCHEMA = pa.schema(
    [
        ("key", pa.binary()),
        ("value", pa.binary()),
        ("stream", pa.string()),
        ("subject", pa.string()),
        ("partition", pa.int32()),
        ("offset", pa.int64()),
        ("timestamp", pa.timestamp("us", tz="UTC")),
        ("headers", _HEADERS),
    ]
)
NO_HEADERS = pa.schema([f for f in SCHEMA if f.name != "headers"])


def _record(rng: random.Random, offset: int) -> Record:
    return Record(
        offset=offset,
        timestamp=1_700_000_000_000_000_000 + rng.randrange(10**12),
        leader_epoch=rng.randrange(5),
        value=rng.randbytes(rng.choice([0, 1, 13, 100, 1000])),
        key=rng.choice([None, b"", b"k", rng.randbytes(20)]),
        subject=rng.choice(["", "orders.eu", "zürich.ü"]),
        reply=rng.choice(["", "_INBOX.x"]),
        headers=tuple(
            (rng.choice(["a", "trace-id", "ß"]), rng.randbytes(rng.randrange(6)))
            for _ in range(rng.choice([0, 0, 0, 1, 3]))
        ),
        producer_id=rng.choice([None, 42]),
        producer_seq=offset,
    )


def _raw(records: list[Record]) -> bytes:
    return b"".join(encode_record(r) for r in records)


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**32), count=st.integers(0, 40), cut=st.integers(0, 45))
def test_batch_equals_the_decoded_records(seed: int, count: int, cut: int) -> None:
    rng = random.Random(seed)
    records = [_record(rng, 500 + i) for i in range(count)]
    end = 500 + cut
    starts, nxt = scan(_raw(records), end)
    inside = [r for r in records if r.offset < end]
    assert len(starts) == len(inside)
    assert nxt == (None if not records else min(end, 500 + count - 1) + 1)
    for schema in (SCHEMA, NO_HEADERS):
        got = records_batch(_raw(records), starts, "orders", 7, schema)
        assert got.schema == schema
        assert got.equals(records_to_batch(inside, "orders", 7, schema))


def test_columns_hold_the_record_fields() -> None:
    records = [
        Record(offset=10, timestamp=1_999_999, leader_epoch=1, value=b"v0", key=None),
        Record(offset=11, timestamp=3_000, leader_epoch=1, value=b"", key=b"", subject="s.1"),
        Record(
            offset=13,
            timestamp=-1_500,
            leader_epoch=2,
            value=b"v2",
            key=b"k2",
            headers=(("h", b"1"), ("h", b"")),
            producer_id=9,
        ),
    ]
    raw = _raw(records)
    starts, nxt = scan(raw, 1 << 62)
    batch = records_batch(raw, starts, "s", 3, SCHEMA).to_pydict()
    assert batch["key"] == [None, b"", b"k2"]
    assert batch["value"] == [b"v0", b"", b"v2"]
    assert batch["offset"] == [10, 11, 13]
    assert nxt == 14
    assert batch["partition"] == [3, 3, 3]
    assert batch["stream"] == ["s", "s", "s"]
    assert batch["subject"] == ["", "s.1", ""]
    micros = [t.timestamp() * 1_000_000 for t in batch["timestamp"]]
    assert micros == [1999, 3, -2]  # ns // 1000, floored as the row path does
    assert batch["headers"] == [
        [],
        [],
        [{"key": "h", "value": b"1"}, {"key": "h", "value": b""}],
    ]


def test_scan_stops_at_the_end_and_ignores_a_partial_record() -> None:
    rng = random.Random(3)
    records = [_record(rng, i) for i in range(5)]
    raw = _raw(records)
    starts, nxt = scan(raw + encode_record(_record(rng, 5))[:-1], 1 << 62)
    assert (len(starts), nxt) == (5, 5)
    assert scan(raw, 2) == (starts[:2], 3)
    assert scan(raw[:20], 10) == ([], None)
    assert list(iter_records(raw))[-1].offset == 4


def test_a_corrupt_record_fails_its_crc() -> None:
    raw = bytearray(_raw([_record(random.Random(1), i) for i in range(3)]))
    raw[-1] ^= 0xFF
    with pytest.raises(CodecError, match="CRC"):
        scan(raw, 1 << 62)


@pytest.mark.parametrize(
    "body",
    [
        b"\x00" + struct.pack(">i", -5) + b"\x00" * 12,  # bad key length
        b"\x00" + struct.pack(">i", 100) + b"\x00" * 12,  # key runs past the record
        b"\x00\xff\xff\xff\xff\x00\x00\x00\x00\x00\x00" + struct.pack(">I", 5) + b"ab",
        b"\x04\xff\xff\xff\xff\x00\x00\x00\x00\x00\x00" + struct.pack(">I", 0),  # attrs
        b"\x00\xff\xff\xff\xff\x00\x02\xc3\x28\x00\x00\x00\x00" + struct.pack(">I", 0),
    ],
)
def test_a_malformed_body_is_refused(body: bytes) -> None:
    raw = frame_body(0, 0, 0, body)
    starts, _ = scan(raw, 1 << 62)
    with pytest.raises(CodecError):
        records_batch(raw, starts, "s", 0, SCHEMA)
