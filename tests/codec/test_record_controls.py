"""Header controls of Produce messages (jetsdk.codec.record_controls) and how the
transcoders apply them: the stored record keeps every header but Jet-Expected-Offset."""

from __future__ import annotations

import pytest

from jetsdk.codec.error_codes import AckPolicy
from jetsdk.codec.messages import ProduceRequest, encode_produce_request, new_produce_message
from jetsdk.codec.record import decode_record, frame_body
from jetsdk.codec.record_controls import RecordControls, parse_expected_offset, record_controls
from jetsdk.codec.transcode import (
    DirectRecord,
    direct_record,
    envelope_record,
    produce_envelopes,
    record_subjects,
)


def test_no_controls_is_none() -> None:
    assert record_controls(()) is None
    assert record_controls((("x-a", b"1"), ("Jet-Key", b"k"))) is None


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        (
            (("Nats-Msg-Id", b"abc"), ("a", b"1")),
            RecordControls((("Nats-Msg-Id", b"abc"), ("a", b"1")), None, b"abc", ""),
        ),
        (
            (("jet-expected-offset", b" 42 "), ("a", b"1")),
            RecordControls((("a", b"1"),), 42, None, ""),
        ),
        (
            (("JET-EXPECTED-OFFSET", b"-1"),),
            RecordControls(
                (), None, None, "Jet-Expected-Offset must be a non-negative integer, not b'-1'"
            ),
        ),
    ],
)
def test_controls_are_read_case_insensitively(
    headers: tuple[tuple[str, bytes], ...], expected: RecordControls
) -> None:
    assert record_controls(headers) == expected


def test_expected_offset_values() -> None:
    assert parse_expected_offset(b"0") == 0
    assert parse_expected_offset(b"9" * 19) == int("9" * 19)
    assert parse_expected_offset(b"9" * 20) is None
    assert parse_expected_offset(b"1.5") is None
    assert parse_expected_offset(b"") is None


@pytest.mark.parametrize("producer_id", [None, 7])
def test_both_produce_paths_store_the_kept_headers(producer_id: int | None) -> None:
    headers = (("Jet-Expected-Offset", b"3"), ("Nats-Msg-Id", b"m1"), ("x", b"y"))
    req = ProduceRequest(
        stream="s",
        partition=0,
        ack_policy=AckPolicy.LEADER,
        timeout_ms=1000,
        messages=(
            new_produce_message(b"v0", b"k", headers, ""),
            new_produce_message(b"v1", None, (("x", b"z"),), ""),
        ),
        producer_id=producer_id,
        base_seq=5 if producer_id is not None else 0,
    )
    records: list[DirectRecord | None] = []
    _head, envelopes = produce_envelopes(encode_produce_request(req), "_INBOX.t", records)
    subjects = record_subjects("orders", "")
    for i, ((_s, _size, envelope), record) in enumerate(zip(envelopes, records)):
        assert envelope is not None
        assert record is not None
        direct = direct_record(record, subjects)
        via_nats = envelope_record(envelope, subjects)
        assert direct == via_nats
        body, controls = direct[0], direct[-1]
        stored, _end = decode_record(frame_body(0, 1, 0, body))
        if i == 0:
            assert controls == RecordControls(headers[1:], 3, b"m1", "")
            assert stored.headers == headers[1:]
            assert stored.key == b"k"
        else:
            assert controls is None
            assert stored.headers == (("x", b"z"),)
        assert stored.value == b"v%d" % i
        assert stored.producer_id == producer_id
