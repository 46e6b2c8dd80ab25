"""Request/response bodies: round trips, limits, error bodies."""

from __future__ import annotations

from typing import Any

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jetsdk.codec.epoch_messages import OffsetForLeaderEpochRequest, OffsetForLeaderEpochResponse
from jetsdk.codec.error_codes import (
    RETRIABLE,
    AckPolicy,
    ErrorCode,
    error_name,
    is_retriable,
)
from jetsdk.codec.errors import CodecError
from jetsdk.codec.fetch_messages import (
    FETCH_RESPONSE_HEADER_SIZE,
    FetchRequest,
    FetchResponseHeader,
    decode_fetch_request,
    decode_fetch_response,
    encode_fetch_records_frame,
    encode_fetch_request,
    encode_fetch_response_header,
)
from jetsdk.codec.frames import FLAG_MORE, FLAG_RESPONSE, encode_frame
from jetsdk.codec.limits import (
    MAX_HEADER_COUNT,
    MAX_HEADER_NAME_BYTES,
    MAX_KEY_BYTES,
    MAX_SUBJECT_BYTES,
)
from jetsdk.codec.messages import (
    ErrorBody,
    ProduceMessage,
    ProduceRequest,
    ProduceResult,
    decode_error,
    decode_json,
    decode_produce_request,
    decode_produce_response,
    encode_error,
    encode_json,
    encode_produce_request,
    encode_produce_response,
    new_produce_message,
)
from jetsdk.codec.produce_one import encode_produce_one
from jetsdk.codec.produce_values import (
    decode_produce_response_values,
    encode_produce_response_values,
)
from jetsdk.codec.record import Record, encode_record, iter_records

from .strategies import (
    I64,
    PROPS,
    U16,
    U32,
    fetch_requests,
    flat_json_objects,
    json_objects,
    produce_requests,
    produce_results,
    produce_results_with_latest,
    produce_results_with_values,
    records,
)


@PROPS
@given(produce_requests())
def test_produce_request_round_trip(req: ProduceRequest) -> None:
    raw = encode_produce_request(req)
    assert decode_produce_request(raw) == req
    assert decode_produce_request(memoryview(raw)) == req
    assert decode_produce_request(bytearray(raw)) == req


@PROPS
@given(st.lists(produce_results, max_size=8))
def test_produce_response_round_trip(results: list[ProduceResult]) -> None:
    assert decode_produce_response(encode_produce_response(results)) == results


@PROPS
@given(st.lists(produce_results_with_values, max_size=8))
def test_produce_response_with_current_values_round_trip(results: list[ProduceResult]) -> None:
    raw = encode_produce_response_values(results)
    assert decode_produce_response_values(raw) == results
    refusals = [r for r in results if r.error_code == ErrorCode.WRONG_EXPECTED_KEY_OFFSET]
    values = sum(len(r.current_value or b"") for r in refusals)
    assert len(raw) == 4 + 18 * len(results) + 4 * len(refusals) + values


@PROPS
@given(st.lists(produce_results_with_latest, max_size=8))
def test_produce_response_with_latest_values_round_trip(results: list[ProduceResult]) -> None:
    """Bit 3: a success result carries its key's later offset (-1: none) and, with one,
    that record's value; other results as with bit 2 alone."""
    raw = encode_produce_response_values(results, latest=True)
    assert decode_produce_response_values(raw, latest=True) == results
    refusals = [r for r in results if r.error_code == ErrorCode.WRONG_EXPECTED_KEY_OFFSET]
    stored = [r for r in results if r.error_code == 0]
    moved = [r for r in stored if r.latest_offset >= 0]
    values = sum(len(r.current_value or b"") for r in refusals + moved)
    size = 4 + 18 * len(results) + 4 * len(refusals) + 8 * len(stored) + 4 * len(moved)
    assert len(raw) == size + values


def test_latest_values_flag_needs_current_values() -> None:
    """Bit 3 without bit 2 is malformed (a request says what its answer carries)."""
    req = ProduceRequest("s", 0, AckPolicy.ALL, 10, (), current_values=True, latest_values=True)
    body = bytearray(encode_produce_request(req))
    assert decode_produce_request(bytes(body)).latest_values
    body[2 + 1 + 9] &= ~0x04  # stream "s": the flags byte
    with pytest.raises(CodecError):
        decode_produce_request(bytes(body))


def test_sequence_start_flag_round_trips_and_needs_a_producer() -> None:
    """Bit 1 (sequence start) is set only with a producer id; without bit 0 malformed."""
    msg = (ProduceMessage(b"v"),)
    req = ProduceRequest("s", 0, AckPolicy.ALL, 10, msg, 7, 5, sequence_start=True)
    body = bytearray(encode_produce_request(req))
    assert body[2 + 1 + 9] == 0x03  # stream "s": the flags byte
    assert decode_produce_request(bytes(body)) == req
    assert encode_produce_one("s", 0, AckPolicy.ALL, 10, msg[0], 7, 5, True) == bytes(body)
    plain = ProduceRequest("s", 0, AckPolicy.ALL, 10, msg, sequence_start=True)
    assert encode_produce_request(plain)[2 + 1 + 9] == 0  # no producer: no flag
    bad = encode_produce_request(attrs.evolve(plain, sequence_start=False))
    bad = bad[: 2 + 1 + 9] + b"\x02" + bad[2 + 1 + 10 :]
    with pytest.raises(CodecError):
        decode_produce_request(bad)


def test_produce_response_without_the_flag_is_unchanged_for_refusals() -> None:
    """A request without the flag gets 18-byte results, a refusal's value never encoded."""
    refused = ProduceResult(ErrorCode.WRONG_EXPECTED_KEY_OFFSET, 17, -1, b"ignored")
    raw = encode_produce_response([refused])
    assert len(raw) == 4 + 18
    assert decode_produce_response(raw) == [ProduceResult(refused.error_code, 17, -1)]


@PROPS
@given(fetch_requests())
def test_fetch_request_round_trip(req: FetchRequest) -> None:
    assert decode_fetch_request(encode_fetch_request(req)) == req


@PROPS
@given(U16, I64, I64, I64, st.lists(records, max_size=3))
def test_fetch_response_round_trip(
    code: int, hw: int, log_start: int, leo: int, recs: list[Record]
) -> None:
    data = b"".join(encode_record(r) for r in recs)
    body = encode_fetch_response_header(code, hw, log_start, leo, len(data)) + data
    header, view = decode_fetch_response(body)
    assert header == FetchResponseHeader(code, hw, log_start, leo, len(data))
    assert bytes(view) == data
    assert list(iter_records(view)) == recs
    assert FETCH_RESPONSE_HEADER_SIZE == 30


@PROPS
@given(
    st.integers(0, 255),
    st.integers(0, 2**32 - 1),
    st.booleans(),
    I64,
    I64,
    I64,
    st.lists(records, max_size=3),
)
def test_a_fetch_records_frame_is_its_header_parts_and_records(
    api: int, cid: int, more: bool, hw: int, log_start: int, leo: int, recs: list[Record]
) -> None:
    data = b"".join(encode_record(r) for r in recs)
    flags = FLAG_RESPONSE | FLAG_MORE if more else FLAG_RESPONSE
    body = encode_fetch_response_header(ErrorCode.NONE, hw, log_start, leo, len(data)) + data
    assert encode_fetch_records_frame(api, cid, flags, hw, log_start, leo, data) == (
        encode_frame(api, cid, body, flags=flags)
    )


@PROPS
@given(json_objects)
def test_json_round_trip(obj: dict[str, Any]) -> None:
    assert decode_json(encode_json(obj)) == obj


@PROPS
@given(st.sampled_from(list(ErrorCode)), st.text(max_size=30), flat_json_objects)
def test_error_round_trip(code: ErrorCode, message: str, details: dict[str, Any]) -> None:
    got = decode_error(encode_error(code, message, details))
    assert got == ErrorBody(code=int(code), name=code.name, message=message, details=details)
    assert got.error_code is code


def test_error_body_defaults_and_unknown_codes() -> None:
    assert decode_error(b'{"code": 99}') == ErrorBody(99, "CODE_99", "", {})
    assert decode_error(b'{"code": 99}').error_code is None
    assert decode_error(b'{"code": 5, "details": null}').name == "STREAM_NOT_FOUND"
    for bad in (
        b'{"code": "5"}',
        b'{"code": true}',
        b'{"code": 5, "details": []}',
        b'{"code": 5, "message": 3}',
        b"[]",
        b"nope",
        b"\xff",
    ):
        with pytest.raises(CodecError):
            decode_error(bad)


def test_json_encoding_failures_are_codec_errors() -> None:
    with pytest.raises(CodecError) as info:
        encode_json({"x": object()})
    assert info.value.reason == "limit"
    with pytest.raises(CodecError):
        encode_json({1: 2})  # type: ignore[dict-item]
    with pytest.raises(CodecError):
        encode_error(ErrorCode.UNKNOWN, "x", {"a": {1, 2}})


def test_error_codes_table() -> None:
    assert [c.value for c in ErrorCode] == list(range(26))
    assert {c.name for c in RETRIABLE} == {
        "NOT_LEADER",
        "TIMEOUT",
        "NOT_ENOUGH_REPLICAS",
        "STORAGE_ERROR",
        "UNAVAILABLE",
        "SHUTTING_DOWN",
        "TOO_MANY_REQUESTS",
        "OUT_OF_ORDER_SEQUENCE",
    }
    assert is_retriable(12)
    assert not is_retriable(5)
    assert not is_retriable(1000)
    assert error_name(3) == "FRAME_TOO_LARGE"
    assert error_name(1000) == "CODE_1000"
    assert [p.value for p in AckPolicy] == [0, 1, 2]


def _req(**kw: Any) -> ProduceRequest:
    base: dict[str, Any] = {
        "stream": "s",
        "partition": 0,
        "ack_policy": AckPolicy.LEADER,
        "timeout_ms": 1,
        "messages": (ProduceMessage(value=b"v"),),
    }
    base.update(kw)
    return ProduceRequest(**base)


@pytest.mark.parametrize(
    "req",
    [
        _req(partition=2**32),
        _req(partition=-1),
        _req(timeout_ms=-1),
        _req(ack_policy=3),
        _req(producer_id=2**64),
        _req(producer_id=1, base_seq=-1),
        _req(stream="x" * 65536),
        _req(stream="\udcff"),
        _req(messages=(ProduceMessage(value=b"", key=b"k" * (MAX_KEY_BYTES + 1)),)),
        _req(messages=(ProduceMessage(value=b"", subject="s" * (MAX_SUBJECT_BYTES + 1)),)),
        _req(messages=(ProduceMessage(value=b"", headers=(("h", b""),) * (MAX_HEADER_COUNT + 1)),)),
        _req(
            messages=(
                ProduceMessage(value=b"", headers=(("h" * (MAX_HEADER_NAME_BYTES + 1), b""),)),
            )
        ),
    ],
)
def test_produce_request_limits(req: ProduceRequest) -> None:
    with pytest.raises(CodecError) as info:
        encode_produce_request(req)
    assert info.value.reason == "limit"


def test_limit_values_are_accepted_at_the_edge() -> None:
    req = _req(
        messages=(
            ProduceMessage(
                value=b"",
                key=b"k" * MAX_KEY_BYTES,
                subject="s" * MAX_SUBJECT_BYTES,
                headers=(("h" * MAX_HEADER_NAME_BYTES, b""),) * MAX_HEADER_COUNT,
            ),
        )
    )
    assert decode_produce_request(encode_produce_request(req)) == req


@pytest.mark.parametrize(
    "call",
    [
        lambda: encode_produce_response([ProduceResult(2**16, 0, 0)]),
        lambda: encode_produce_response([ProduceResult(0, 2**63, 0)]),
        lambda: encode_fetch_request(FetchRequest("s", 0, 0, 2**32, 0)),
        lambda: encode_fetch_request(FetchRequest("s", 0, 0, 0, 0, replica_id=2**31)),
        lambda: encode_fetch_request(FetchRequest("s", 0, 0, 0, 0, replica_flushed=5)),
        lambda: encode_fetch_request(FetchRequest("s", 0, 0, 0, 0, 1, leader_epoch=2**63)),
        lambda: encode_fetch_response_header(0, 0, 0, 0, -1),
        lambda: encode_fetch_response_header(-1, 0, 0, 0, 0),
    ],
)
def test_other_encoders_refuse_out_of_range(call: Any) -> None:
    with pytest.raises(CodecError) as info:
        call()
    assert info.value.reason == "limit"


def test_fetch_response_header_layout() -> None:
    raw = encode_fetch_response_header(9, 1, 2, 3, 0)
    assert (
        raw.hex()
        == "0009" + "0000000000000001" + "0000000000000002" + "0000000000000003" + "00000000"
    )


@given(U32)
@settings(max_examples=50, deadline=None)
def test_huge_message_count_is_refused_without_allocating(count: int) -> None:
    raw = bytearray(encode_produce_request(_req(messages=())))
    raw[-4:] = count.to_bytes(4, "big")
    if count == 0:
        assert decode_produce_request(bytes(raw)).messages == ()
    else:
        with pytest.raises(CodecError):
            decode_produce_request(bytes(raw))


def test_offset_for_leader_epoch_bodies_round_trip() -> None:
    req = OffsetForLeaderEpochRequest("s", 2, leader_epoch=3, current_leader_epoch=4, replica_id=1)
    assert OffsetForLeaderEpochRequest.from_json(decode_json(encode_json(req.to_json()))) == req
    resp = OffsetForLeaderEpochResponse(leader_epoch=3, end_offset=17)
    assert OffsetForLeaderEpochResponse.from_json(resp.to_json()) == resp
    minimal = OffsetForLeaderEpochRequest.from_json(
        {"stream": "s", "partition": 0, "leader_epoch": 0}
    )
    assert (minimal.current_leader_epoch, minimal.replica_id) == (-1, -1)


@pytest.mark.parametrize(
    "obj",
    [
        {"partition": 0, "leader_epoch": 0},
        {"stream": "s", "partition": "0", "leader_epoch": 0},
        {"stream": "s", "partition": 0, "leader_epoch": True},
    ],
)
def test_offset_for_leader_epoch_request_refuses_bad_fields(obj: dict[str, Any]) -> None:
    with pytest.raises(CodecError):
        OffsetForLeaderEpochRequest.from_json(obj)


@given(produce_requests())
def test_fast_builders_make_the_same_values(req: ProduceRequest) -> None:
    """The hot-path builders (no attrs __init__) give values equal to, hashing like and
    as frozen as the ones the constructors make."""
    for m in req.messages:
        fast = new_produce_message(m.value, m.key, m.headers, m.subject)
        assert type(fast) is ProduceMessage
        assert fast == m
        assert hash(fast) == hash(m)
    results = [ProduceResult(i, 2**40 + i, -1) for i in range(len(req.messages))]
    decoded = decode_produce_response(encode_produce_response(results))
    assert decoded == results
    assert all(type(r) is ProduceResult for r in decoded)
    if decoded:
        with pytest.raises(attrs.exceptions.FrozenInstanceError):
            decoded[0].offset = 1  # type: ignore[misc]
