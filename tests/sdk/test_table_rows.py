"""``jetsdk.table.rows.table_rows``: a table's entries straight from record bytes equal
what the full decoder gives (key, value, offset, TTL expiry), and bad bytes raise
CodecError."""

from __future__ import annotations

import pytest

from jetsdk.codec.errors import CodecError
from jetsdk.codec.record import Record, encode_record, iter_records
from jetsdk.codec.ttl import expiry_ns
from jetsdk.table.rows import table_rows
from jetsdk.table.view import Entry

T = 1_700_000_000_000_000_000

RECORDS = [
    Record(0, T, 1, b"v0", b"k0", "prices.a"),
    Record(1, T + 1, 1, b"", b"k0", "prices.a"),  # tombstone
    Record(2, T + 2, 1, b"keyless", None, "prices.b", reply="_INBOX.x"),
    Record(3, T + 3, 2, b"v3", b"", "p", producer_id=7, producer_seq=9),  # empty key
    Record(4, T + 4, 2, b"ttl", b"k4", "p", headers=(("Jet-TTL", b"1500"),)),
    Record(5, T + 5, 2, b"bad-ttl", b"k5", "p", headers=(("jet-ttl", b"x"), ("a", b"b"))),
    Record(6, T + 6, 2, b"x" * 70_000, b"k6" * 300, "p", producer_id=1, producer_seq=0),
]


def _raw() -> bytes:
    return b"".join(encode_record(r) for r in RECORDS)


def _expected(raw: bytes, partition: int) -> tuple[list[Entry], dict[int, int]]:
    entries: list[Entry] = []
    expiries: dict[int, int] = {}
    for r in iter_records(raw):
        if r.key is None:
            continue
        expires = expiry_ns(r.key, r.value, r.timestamp, r.headers)
        if expires is not None:
            expiries[len(entries)] = expires
        entries.append(Entry(r.key, r.value, r.offset, partition))
    return entries, expiries


def test_entries_equal_the_full_decoders() -> None:
    raw = _raw()
    entries, expiries = _expected(raw, 3)
    assert expiries == {3: T + 4 + 1_500_000_000}  # k4; k5's TTL is malformed: none
    for given in (raw, memoryview(raw), bytearray(raw)):
        got = table_rows(given, 3)
        assert (got.entries, got.expiries) == (entries, expiries)
        assert (got.records, got.deletes, got.next_offset) == (7, 1, 7)
        assert all(type(e.key) is bytes and type(e.value) is bytes for e in got.entries)
        assert all(type(e) is Entry for e in got.entries)


def test_a_trailing_partial_record_is_left_for_the_next_fetch() -> None:
    raw = _raw()
    got = table_rows(raw[:-10], 0)
    assert [e.revision for e in got.entries] == [0, 1, 3, 4, 5]  # 2 is keyless
    assert (got.records, got.next_offset) == (6, 6)
    empty = table_rows(raw[:20], 0)
    assert (empty.entries, empty.records, empty.next_offset) == ([], 0, None)


def test_corrupt_records_raise() -> None:
    raw = bytearray(_raw())
    raw[40] ^= 0xFF  # a body byte of record 0
    with pytest.raises(CodecError, match="CRC"):
        table_rows(raw, 0)
    # A body whose lengths disagree (CRC recomputed so only the layout is wrong).
    good = RECORDS[0]
    body = bytearray(encode_record(good)[28:])
    body[1:5] = (200).to_bytes(4, "big")  # key length past the body
    from jetsdk.codec.record import frame_body

    with pytest.raises(CodecError):
        table_rows(frame_body(0, T, 1, bytes(body)), 0)


def test_initial_change_is_the_same_value_as_changes_init() -> None:
    from jetsdk.table.view import Change, initial_change

    built = initial_change(Entry(b"k", b"v", 3, 1))
    assert built == Change(b"k", b"v", 3, 1, initial=True)
    assert (built.deleted, built.expired, hash(built)) == (
        False,
        False,
        hash(Change(b"k", b"v", 3, 1, True)),
    )
