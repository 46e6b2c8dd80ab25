"""ProduceMany bodies (api 17): sections of Produce bodies, byte for byte."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import pytest

from jetsdk.codec import messages as msg
from jetsdk.codec import produce_many as pm
from jetsdk.codec import produce_values as pv
from jetsdk.codec.error_codes import AckPolicy, ErrorCode
from jetsdk.codec.errors import CodecError


def _body(partition: int) -> bytes:
    return msg.encode_produce_request(
        msg.ProduceRequest("s", partition, AckPolicy.LEADER, 100, (msg.ProduceMessage(b"v"),))
    )


def test_sections_are_produce_bodies_byte_for_byte() -> None:
    bodies = [_body(0), _body(7), b""]
    encoded = pm.encode_produce_many_request(bodies)
    assert encoded[:4] == (3).to_bytes(4, "big")
    assert pm.decode_produce_many_request(encoded) == bodies
    assert pm.produce_many_section_count(encoded) == 3
    assert msg.decode_produce_request(pm.decode_produce_many_request(encoded)[1]).partition == 7


def test_response_sections_round_trip() -> None:
    sections = [
        pm.ProduceSection(0, msg.encode_produce_response([msg.ProduceResult(0, 3, 9)])),
        pm.ProduceSection(int(ErrorCode.NOT_LEADER), msg.encode_error(ErrorCode.NOT_LEADER, "x")),
    ]
    assert pm.decode_produce_many_response(pm.encode_produce_many_response(sections)) == sections


def test_the_section_limit_is_enforced_both_ways() -> None:
    with pytest.raises(CodecError) as caught:
        pm.encode_produce_many_request([b""] * (pm.MAX_PRODUCE_SECTIONS + 1))
    assert caught.value.reason == "limit"
    body = (pm.MAX_PRODUCE_SECTIONS + 1).to_bytes(4, "big") + b"\x00" * 4 * 1025
    with pytest.raises(CodecError) as caught:
        pm.decode_produce_many_request(body)
    assert caught.value.reason == "limit"
    full = pm.encode_produce_many_request([b""] * pm.MAX_PRODUCE_SECTIONS)
    assert len(pm.decode_produce_many_request(full)) == pm.MAX_PRODUCE_SECTIONS


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (b"", "truncated"),
        (b"\x00\x00\x00\x01", "truncated"),  # one section, no length
        (b"\x00\x00\x00\x01\x00\x00\x00\x05ab", "truncated"),  # a section past the end
        (b"\x00\x00\x00\x00\x00", "malformed"),  # trailing byte
    ],
)
def test_bad_requests_are_typed(body: bytes, reason: str) -> None:
    with pytest.raises(CodecError) as caught:
        pm.decode_produce_many_request(body)
    assert caught.value.reason == reason


def _count_past_the_body(decode: Callable[[bytes], object], body: bytes) -> CodecError:
    with pytest.raises(CodecError) as caught:
        decode(body)
    return caught.value


def test_a_count_the_body_cannot_hold_is_refused_before_any_item_is_read() -> None:
    """Each decoder bounds its u32 count by the rest of the body (one rule, ``_wire.get_count``)."""
    one = msg.encode_produce_request(msg.ProduceRequest("s", 0, AckPolicy.LEADER, 1, ()))
    request = one[:-4] + (1000).to_bytes(4, "big")  # 1,000 messages in 0 bytes
    cases = [
        (msg.decode_produce_head, request, "message count 1000 exceeds the body"),
        (pm.decode_produce_many_response, (2).to_bytes(4, "big") + b"\x00" * 8, "section count 2"),
        (pv.decode_produce_response_values, (1).to_bytes(4, "big"), "result count 1"),
    ]
    for decode, body, text in cases:
        err = _count_past_the_body(decode, body)
        assert err.reason == "truncated"
        assert text in str(err)
        assert "exceeds the body" in str(err)


@pytest.mark.parametrize("decode", [msg.decode_produce_response, msg.decode_produce_result_tuples])
def test_a_plain_produce_response_must_hold_exactly_its_count_of_results(
    decode: Callable[[bytes], Sequence[object]],
) -> None:
    body = msg.encode_produce_response([msg.ProduceResult(0, 5, 7), msg.ProduceResult(0, 6, 8)])
    assert len(decode(body)) == 2
    for bad, reason in ((body[:-1], "truncated"), (body + b"\x00", "malformed")):
        err = _count_past_the_body(decode, bad)
        assert err.reason == reason
        assert "produce response length does not match 2 results" in str(err)


def _large_request() -> tuple[msg.ProduceRequest, list[bytes]]:
    big = [bytes([i]) * (msg.PART_VALUE_MIN_BYTES + i) for i in range(3)]
    messages = (
        msg.ProduceMessage(b"small"),
        msg.ProduceMessage(big[0]),
        msg.ProduceMessage(big[1]),  # two large values in a row: nothing joined between
        msg.ProduceMessage(big[2], subject="s.x", key=b"k", headers=(("h", b"v"),)),
        msg.ProduceMessage(b"s" * (msg.PART_VALUE_MIN_BYTES - 1)),
    )
    return msg.ProduceRequest("s", 2, AckPolicy.ALL, 100, messages, producer_id=7), big


def test_a_body_in_parts_leaves_large_values_as_they_are() -> None:
    # Issue 39: the producer's encode joined each 1 MiB value into its request body (a
    # fresh buffer and a copy per value); in parts, each large value is the caller's own
    # object, and the parts joined are the body byte for byte.
    req, big = _large_request()
    parts = msg.encode_produce_request_parts(req)
    assert isinstance(parts, tuple)
    assert b"".join(parts) == msg.encode_produce_request(req)
    for value in big:
        assert any(part is value for part in parts)
    assert len(parts) == 3 + 4  # each value, and the bytes before, between and after them
    small = msg.ProduceRequest("s", 0, AckPolicy.LEADER, 100, (msg.ProduceMessage(b"v"),))
    assert msg.encode_produce_request_parts(small) == msg.encode_produce_request(small)
    # a mutable value is copied as before (the caller may change it after the send)
    mutable = msg.ProduceRequest(
        "s",
        0,
        AckPolicy.LEADER,
        100,
        (msg.ProduceMessage(bytearray(big[0])),),  # type: ignore[arg-type]
    )
    assert isinstance(msg.encode_produce_request_parts(mutable), bytes)


def test_sections_in_parts_are_the_joined_sections() -> None:
    req, big = _large_request()
    parts = msg.encode_produce_request_parts(req)
    assert isinstance(parts, tuple)
    joined = msg.encode_produce_request(req)
    many = pm.produce_many_request_parts([_body(0), parts, b""])
    assert b"".join(many) == pm.encode_produce_many_request([_body(0), joined, b""])
    assert any(part is big[0] for part in many)
    assert pm.decode_produce_many_request(b"".join(many))[1] == joined


def test_sections_of_a_body_read_in_place_are_views_of_it() -> None:
    # Issue 39: the server read a large ProduceMany request into a bytearray and then
    # copied every section out of it (a fresh 1 MiB buffer per 1 MiB section); its
    # sections are views of the body now, and a bytes body's are slices as before.
    req, _big = _large_request()
    bodies = [_body(3), msg.encode_produce_request(req)]
    body = bytearray(pm.encode_produce_many_request(bodies))
    views = pm.produce_many_section_views(body)
    assert [bytes(v) for v in views] == bodies
    assert all(isinstance(v, memoryview) and v.obj is body for v in views)
    assert pm.produce_many_section_views(bytes(body)) == bodies
    assert pm.decode_produce_many_request(body) == bodies  # copies, as before
    head = msg.decode_produce_head(views[1])
    assert head[:3] == ("s", 2, AckPolicy.ALL)
