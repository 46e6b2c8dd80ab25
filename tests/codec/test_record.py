from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jetsdk.codec.errors import CodecError
from jetsdk.codec.limits import (
    MAX_HEADER_NAME_BYTES,
    MAX_KEY_BYTES,
    MAX_SUBJECT_BYTES,
)
from jetsdk.codec.record import Record, decode_record, encode_record, frame_body, iter_records

from .strategies import records


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


@settings(max_examples=200, deadline=None)
@given(st.lists(records, max_size=3))
def test_record_round_trip_property(recs: list[Record]) -> None:
    raw = b"".join(encode_record(r) for r in recs)
    assert list(iter_records(raw)) == recs
    pos = 0
    for r in recs:
        got, pos = decode_record(memoryview(raw), pos)
        assert got == r
    assert pos == len(raw)


@pytest.mark.parametrize(
    "kw",
    [
        {"offset": 2**63},
        {"timestamp": -(2**63) - 1},
        {"leader_epoch": -1},
        {"producer_id": 2**64},
        {"producer_id": 1, "producer_seq": -1},
        {"key": b"k" * (MAX_KEY_BYTES + 1)},
        {"subject": "s" * (MAX_SUBJECT_BYTES + 1)},
        {"reply": "\udc80"},
        {"headers": (("h" * (MAX_HEADER_NAME_BYTES + 1), b""),)},
    ],
)
def test_record_encoder_limits(kw: dict[str, Any]) -> None:
    base: dict[str, Any] = {"offset": 0, "timestamp": 0, "leader_epoch": 0, "value": b""}
    with pytest.raises(CodecError) as info:
        encode_record(Record(**{**base, **kw}))
    assert info.value.reason == "limit"


def test_decoder_refuses_oversized_subject_with_valid_crc() -> None:
    body = b"\x00\xff\xff\xff\xff" + (MAX_SUBJECT_BYTES + 1).to_bytes(2, "big")
    body += b"s" * (MAX_SUBJECT_BYTES + 1) + b"\x00\x00\x00\x00\x00\x00\x00\x00"
    with pytest.raises(CodecError) as info:
        decode_record(frame_body(0, 0, 0, body))
    assert info.value.reason == "limit"
