"""ProduceMany bodies (api 17): sections of Produce bodies, byte for byte."""

from __future__ import annotations

import pytest

from jetsdk.codec import messages as msg
from jetsdk.codec import produce_many as pm
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
