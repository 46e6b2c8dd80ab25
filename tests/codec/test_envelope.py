"""Envelope codec and the public jetsdk.envelope helpers."""

from __future__ import annotations

import re
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from jetsdk import envelope as public
from jetsdk.codec.envelope import (
    COOKIE,
    ENVELOPE_HEADER_SIZE,
    MAX_ACKS_PER_BATCH,
    MAX_CORRELATION_ID_BYTES,
    EnvelopeAck,
    EnvelopeMessage,
    decode_acks,
    decode_message,
    encode_ack,
    encode_acks,
    encode_message,
    parse_nats_payload,
)
from jetsdk.codec.error_codes import AckPolicy, ErrorCode
from jetsdk.codec.errors import CodecError
from jetsdk.codec.limits import MAX_SUBJECT_BYTES

from .strategies import PROPS, acks, envelope_messages


@PROPS
@given(envelope_messages())
def test_message_round_trip(m: EnvelopeMessage) -> None:
    raw = encode_message(m)
    assert raw[:4] == COOKIE
    assert decode_message(raw) == m
    assert parse_nats_payload(raw) == m
    assert parse_nats_payload(memoryview(raw)) == m


@PROPS
@given(acks)
def test_ack_round_trip(ack: EnvelopeAck) -> None:
    raw = encode_ack(ack)
    assert raw[5] == 1
    assert decode_acks(raw) == [ack]
    assert parse_nats_payload(raw) is None


@PROPS
@given(st.lists(acks, min_size=1, max_size=5))
def test_ack_batch_round_trip(batch: list[EnvelopeAck]) -> None:
    raw = encode_acks(batch)
    assert raw[5] == 2
    assert decode_acks(raw) == batch


@PROPS
@given(st.binary(max_size=64))
def test_plain_payloads_are_plain(payload: bytes) -> None:
    if not payload.startswith(COOKIE):
        assert parse_nats_payload(payload) is None


def test_header_layout() -> None:
    raw = encode_message(EnvelopeMessage(value=b"hi"))
    assert len(raw) == ENVELOPE_HEADER_SIZE + 1 + 4 + 2 + 2 + 2 + 4 + 2
    assert raw[:8] == bytes.fromhex("ff4a4554 01 00 0000")


def test_ack_batch_bounds() -> None:
    ack = EnvelopeAck("s", 0, 0, 0, "", AckPolicy.LEADER)
    with pytest.raises(CodecError):
        encode_acks([])
    with pytest.raises(CodecError):
        encode_acks([ack] * (MAX_ACKS_PER_BATCH + 1))
    assert len(decode_acks(encode_acks([ack] * MAX_ACKS_PER_BATCH))) == MAX_ACKS_PER_BATCH


@pytest.mark.parametrize(
    "m",
    [
        EnvelopeMessage(value=b"", ack_policy=3),  # type: ignore[arg-type]
        EnvelopeMessage(value=b"", ack_inbox="x" * (MAX_SUBJECT_BYTES + 1)),
        EnvelopeMessage(value=b"", correlation_id="x" * (MAX_CORRELATION_ID_BYTES + 1)),
        EnvelopeMessage(value=b"", producer_id=-1),
        EnvelopeMessage(value=b"", producer_id=1, producer_seq=2**64),
        EnvelopeMessage(value=b"", key=b"k" * 65537),
        EnvelopeMessage(value=b"", headers=(("\ud800", b""),)),
    ],
)
def test_message_encoder_limits(m: EnvelopeMessage) -> None:
    with pytest.raises(CodecError) as info:
        encode_message(m)
    assert info.value.reason == "limit"


@pytest.mark.parametrize(
    "kw",
    [
        {"partition": 2**32},
        {"offset": 2**63},
        {"error_code": 70000},
        {"ack_policy": 7},
        {"stream": "s" * 256},
        {"error_message": "e" * 5000},
    ],
)
def test_ack_encoder_limits(kw: dict[str, Any]) -> None:
    base: dict[str, Any] = {
        "stream": "s",
        "partition": 0,
        "offset": 0,
        "timestamp": 0,
        "correlation_id": "",
        "ack_policy": AckPolicy.ALL,
    }
    with pytest.raises(CodecError) as info:
        encode_ack(EnvelopeAck(**{**base, **kw}))
    assert info.value.reason == "limit"


# ------------------------------------------------------------------ public helpers


def test_build_message_and_parse() -> None:
    inbox = public.new_ack_inbox()
    hdrs: dict[str, bytes | str] = {"source": "shop", "bin": b"\x00"}
    payload = public.build_message(
        b"42",
        key="order-17",
        headers=hdrs,
        ack_inbox=inbox,
        correlation_id="req-1",
    )
    assert public.parse_message(payload) == EnvelopeMessage(
        value=b"42",
        key=b"order-17",
        headers=(("source", b"shop"), ("bin", b"\x00")),
        ack_inbox=inbox,
        correlation_id="req-1",
        ack_policy=AckPolicy.LEADER,
    )
    pairs = public.build_message(b"", headers=[("t", "a"), ("t", "b")], ack_policy=AckPolicy.NONE)
    parsed = public.parse_message(pairs)
    assert parsed is not None
    assert parsed.headers == (("t", b"a"), ("t", b"b"))
    assert parsed.key is None
    assert public.parse_message(b"plain") is None


def test_new_ack_inbox_is_a_valid_unique_subject() -> None:
    inboxes = {public.new_ack_inbox() for _ in range(100)}
    assert len(inboxes) == 100
    for inbox in inboxes:
        assert re.fullmatch(r"_INBOX\.[A-Za-z0-9_-]{22}", inbox)
    assert len(public.new_correlation_id()) == 16


def test_parse_ack() -> None:
    ok = EnvelopeAck("orders", 0, 5, 1, "c1", AckPolicy.LEADER)
    bad = EnvelopeAck(
        "orders", 1, -1, -1, "c2", AckPolicy.ALL, ErrorCode.NOT_ENOUGH_REPLICAS, "isr"
    )
    assert public.parse_ack(encode_ack(ok)) == [ok]
    assert public.parse_ack(encode_acks([ok, bad])) == [ok, bad]
    with pytest.raises(public.CodecError):
        public.parse_ack(public.build_message(b"x"))


def test_old_ack_name_still_works_with_a_deprecation_warning() -> None:
    with pytest.warns(DeprecationWarning, match="EnvelopeAck"):
        old = public.Ack  # type: ignore[attr-defined]
    assert old is public.EnvelopeAck
