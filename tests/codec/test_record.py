from __future__ import annotations

import pytest

from jetsdk.codec.errors import CodecError
from jetsdk.codec.record import Record, decode_record, encode_record, iter_records


def test_round_trip_all_fields() -> None:
    rec = Record(
        offset=5,
        timestamp=123,
        leader_epoch=2,
        value=b"hi",
        key=b"k",
        subject="a.b",
        reply="r",
        headers=(("x", b"y"), ("x", b"z")),
        producer_id=7,
        producer_seq=9,
    )
    raw = encode_record(rec)
    assert decode_record(raw) == (rec, len(raw))


def test_bit_flip_fails_crc() -> None:
    raw = bytearray(encode_record(Record(offset=0, timestamp=1, leader_epoch=0, value=b"abc")))
    raw[-1] ^= 0x01
    with pytest.raises(CodecError) as info:
        decode_record(bytes(raw))
    assert info.value.reason == "crc"


def test_trailing_partial_record_is_ignored() -> None:
    one = encode_record(Record(offset=0, timestamp=1, leader_epoch=0, value=b"abc"))
    two = encode_record(Record(offset=1, timestamp=2, leader_epoch=0, value=b"def"))
    got = list(iter_records(one + two[:-1]))
    assert [r.offset for r in got] == [0]
