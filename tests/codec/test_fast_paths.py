"""The codec fast paths agree byte for byte with the reference encoders and decoders."""

from __future__ import annotations

import zlib
from collections.abc import Callable

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from jetsdk.codec.envelope import (
    COOKIE,
    AckEncoder,
    EnvelopeAck,
    EnvelopeMessage,
    MessageEncoder,
    decode_ack_tuples,
    decode_acks,
    encode_ack,
    encode_acks,
    encode_message,
    encode_message_fields,
    parse_nats_payload,
)
from jetsdk.codec.error_codes import AckPolicy
from jetsdk.codec.errors import CodecError
from jetsdk.codec.messages import (
    ProduceMessage,
    ProduceRequest,
    ProduceResult,
    decode_produce_request,
    encode_produce_request,
    encode_produce_response,
    encode_produce_result_tuples,
)
from jetsdk.codec.record import encode_body
from jetsdk.codec.record_controls import record_controls
from jetsdk.codec.transcode import (
    SPLIT_ENVELOPE_MIN,
    SPLIT_VALUE_MIN,
    DirectRecord,
    SplitEnvelope,
    direct_record,
    envelope_record,
    produce_envelopes,
    record_subjects,
)

from .strategies import PROPS, acks, envelope_messages, produce_requests, produce_results, text


@PROPS
@given(envelope_messages())
def test_message_encoder_matches_encode_message(m: EnvelopeMessage) -> None:
    expected = encode_message(m)
    encoder = MessageEncoder(m.ack_inbox, m.ack_policy)
    got = encoder.encode(m.value, m.key, m.headers, m.correlation_id, m.producer_id, m.producer_seq)
    assert got == expected
    assert (
        encode_message_fields(
            m.value,
            m.key,
            m.headers,
            m.ack_inbox,
            m.correlation_id,
            m.ack_policy,
            m.producer_id,
            m.producer_seq,
        )
        == expected
    )


@PROPS
@given(st.lists(acks, min_size=1, max_size=5), st.text(max_size=10), st.integers(0, 2**32 - 1))
def test_ack_encoder_matches_encode_acks(
    batch: list[EnvelopeAck], stream: str, partition: int
) -> None:
    same = [
        EnvelopeAck(stream, partition, a.offset, a.timestamp, a.correlation_id, a.ack_policy)
        if i % 2
        else attrs.evolve(a, stream=stream, partition=partition)
        for i, a in enumerate(batch)
    ]
    fields = [
        (a.offset, a.timestamp, a.correlation_id, a.ack_policy, a.error_code, a.error_message)
        for a in same
    ]
    expected = encode_ack(same[0]) if len(same) == 1 else encode_acks(same)
    assert AckEncoder(stream, partition).encode(fields) == expected
    assert decode_acks(expected) == same
    assert decode_ack_tuples(expected) == [attrs.astuple(a) for a in same]


def test_ack_encoder_limits() -> None:
    enc = AckEncoder("s", 0)
    with pytest.raises(CodecError):
        enc.encode([])
    with pytest.raises(CodecError):
        enc.encode([(2**63, 0, "", AckPolicy.LEADER, 0, "")])
    with pytest.raises(CodecError):
        enc.encode([(0, 0, "", 9, 0, "")])
    with pytest.raises(CodecError):
        enc.encode([(0, 0, "x" * 2000, AckPolicy.LEADER, 0, "")])
    with pytest.raises(CodecError):
        AckEncoder("s" * 300, 0)


@PROPS
@given(envelope_messages(), text, text)
def test_envelope_record_matches_decode_then_encode_body(
    m: EnvelopeMessage, subject: str, reply: str
) -> None:
    raw = encode_message(m)
    got = envelope_record(raw, record_subjects(subject, reply))
    assert got is not None
    body, size, inbox, corr, policy, producer_id, producer_seq, controls = got
    assert controls == record_controls(m.headers)
    assert body == encode_body(
        m.value,
        key=m.key,
        subject=subject,
        reply=reply,
        headers=m.headers if controls is None else controls.headers,
        producer_id=m.producer_id,
        producer_seq=m.producer_seq,
    )
    key_len = len(m.key) if m.key else 0
    assert size == len(m.value) + key_len + sum(len(n) + len(v) for n, v in m.headers)
    assert (inbox, corr, policy, producer_id) == (
        m.ack_inbox,
        m.correlation_id,
        m.ack_policy,
        m.producer_id,
    )
    assert producer_seq == (m.producer_seq if m.producer_id is not None else 0)


def _damaged(raw: bytes, data: st.DataObject) -> tuple[bytes, bytes]:
    """``raw`` with one byte (drawn) set to a drawn value, and a drawn prefix of that."""
    out = bytearray(raw)
    i = data.draw(st.integers(0, len(out) - 1))
    out[i] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(0, len(out)))
    return bytes(out), bytes(out[:cut])


def _reseal(raw: bytes) -> bytes:
    crc = zlib.crc32(raw[12:], zlib.crc32(raw[:8]))
    return raw[:8] + crc.to_bytes(4, "big") + raw[12:]


@PROPS
@given(envelope_messages(), st.data())
def test_envelope_record_is_plain_exactly_when_parse_is(
    m: EnvelopeMessage, data: st.DataObject
) -> None:
    raw, prefix = _damaged(encode_message(m), data)
    for candidate in (raw, _reseal(raw), prefix):
        parsed = parse_nats_payload(candidate)
        got = envelope_record(candidate, record_subjects("a", ""))
        assert (got is None) == (parsed is None)
        if parsed is not None:
            assert got is not None
            assert got[0] == encode_body(
                parsed.value,
                key=parsed.key,
                subject="a",
                headers=parsed.headers,
                producer_id=parsed.producer_id,
                producer_seq=parsed.producer_seq,
            )


@PROPS
@given(st.binary(max_size=80))
def test_envelope_record_on_random_tails(tail: bytes) -> None:
    for candidate in (tail, COOKIE + tail, _reseal(COOKIE + b"\x01\x00\x00\x00" + tail)):
        got = envelope_record(candidate, b"\x00\x00\x00\x00")
        assert (got is None) == (parse_nats_payload(candidate) is None)


def test_record_subjects_limits() -> None:
    assert record_subjects("ab", "") == b"\x00\x02ab\x00\x00"
    with pytest.raises(CodecError):
        record_subjects("x" * 5000, "")
    with pytest.raises(CodecError):
        record_subjects("a", "\ud800")


@PROPS
@given(produce_requests(), st.sampled_from(["_INBOX.x.1", "", "é.i"]))
def test_produce_envelopes_match_decode_then_encode(req: ProduceRequest, inbox: str) -> None:
    body = encode_produce_request(req)
    head, envelopes = produce_envelopes(body, inbox)
    decoded = decode_produce_request(body)
    assert head[:7] == (
        decoded.stream,
        decoded.partition,
        decoded.ack_policy,
        decoded.timeout_ms,
        decoded.producer_id,
        decoded.base_seq,
        len(decoded.messages),
    )
    encoder = MessageEncoder(inbox if req.ack_policy != AckPolicy.NONE else "", req.ack_policy)
    assert len(envelopes) == len(decoded.messages)
    for i, (m, (subject, size, envelope)) in enumerate(zip(decoded.messages, envelopes)):
        assert subject == m.subject
        key_len = len(m.key) if m.key else 0
        assert size == len(m.value) + key_len + sum(len(n) + len(v) for n, v in m.headers)
        seq = decoded.base_seq + i if decoded.producer_id is not None else 0
        try:
            expected: bytes | None = encoder.encode(
                m.value, m.key, m.headers, str(i), decoded.producer_id, seq
            )
        except CodecError:
            expected = None
        assert envelope == expected


@given(produce_requests(), st.sampled_from(["_INBOX.x.1", ""]), text)
def test_direct_records_match_the_records_of_their_envelopes(
    req: ProduceRequest, inbox: str, subject: str
) -> None:
    """A leader appending a Produce message directly builds from the request the very
    record (and ack fields) it would build from the message's envelope."""
    body = encode_produce_request(req)
    records: list[DirectRecord | None] = []
    _head, envelopes = produce_envelopes(body, inbox, records)
    assert len(records) == len(envelopes)
    subjects = record_subjects(subject, "")
    for (_subject, _size, envelope), record in zip(envelopes, records):
        if envelope is None:
            assert record is None
            continue
        assert record is not None
        assert direct_record(record, subjects) == envelope_record(envelope, subjects)


def _decodes(fn: Callable[[bytes], object], raw: bytes) -> bool:
    try:
        fn(raw)
    except CodecError:
        return False
    return True


@PROPS
@given(produce_requests(), st.data())
def test_produce_envelopes_refuse_what_the_decoder_refuses(
    req: ProduceRequest, data: st.DataObject
) -> None:
    raw, prefix = _damaged(encode_produce_request(req), data)
    for candidate in (raw, prefix, raw + b"\x00"):
        assert _decodes(lambda b: produce_envelopes(b, "_INBOX.a"), candidate) == _decodes(
            decode_produce_request, candidate
        )


@PROPS
@given(st.lists(produce_results, max_size=10))
def test_produce_result_tuples(results: list[ProduceResult]) -> None:
    assert encode_produce_result_tuples(
        [(r.error_code, r.offset, r.timestamp) for r in results]
    ) == encode_produce_response(results)


@pytest.mark.parametrize("producer_id", [None, 7])
def test_split_envelopes_are_the_joined_ones_with_large_values_left_in_the_request(
    producer_id: int | None,
) -> None:
    """With ``split``, a value of SPLIT_ENVELOPE_MIN bytes or more (16 KiB) is not copied:
    its envelope is its head and a view of the request body, which written one after the
    other are the joined envelope byte for byte (CRC included); smaller values are joined
    as before."""
    assert SPLIT_ENVELOPE_MIN == 16 * 1024
    sizes = [100, SPLIT_ENVELOPE_MIN - 1, SPLIT_ENVELOPE_MIN, SPLIT_VALUE_MIN, 1 << 20]
    messages = tuple(
        ProduceMessage(bytes([i + 1]) * size, key=b"k", headers=(("h", b"v"),))
        for i, size in enumerate(sizes)
    )
    req = ProduceRequest("s", 0, AckPolicy.ALL, 5000, messages, producer_id, 3)
    body = bytearray(encode_produce_request(req))
    _head, joined = produce_envelopes(body, "_INBOX.a")
    _head, split = produce_envelopes(body, "_INBOX.a", split=True)
    assert [type(e) for _s, _n, e in joined] == [bytes] * len(sizes)
    assert [type(e) for _s, _n, e in split] == [bytes, bytes, *[SplitEnvelope] * 3]
    for m, (_s, size, whole), (_t, split_size, part) in zip(messages, joined, split, strict=True):
        assert whole is not None
        assert part is not None
        assert split_size == size
        assert len(part) == len(whole)
        assert bytes(part) == whole
        if isinstance(part, SplitEnvelope):
            assert part.value.obj is body  # a view: the value was not copied
            assert part.head + bytes(part.value) == whole
        envelope = parse_nats_payload(whole)
        assert envelope is not None  # its CRC checks
        assert envelope.value == m.value
