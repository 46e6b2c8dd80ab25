"""A table's lone write in jetsdk/codec/produce_values.py, each checked against the full
codec: ``encode_key_write`` (its request), ``lone_key_cas`` (the one-message read a leader
answers a lost compare-and-set from), ``decode_one_result_values`` (its answer)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from jetsdk.codec.error_codes import AckPolicy
from jetsdk.codec.errors import CodecError
from jetsdk.codec.key_cas_envelope import key_cas_envelope
from jetsdk.codec.messages import (
    ProduceMessage,
    ProduceRequest,
    ProduceResult,
    decode_produce_head,
    encode_produce_request,
)
from jetsdk.codec.produce_values import (
    decode_one_result_values,
    decode_produce_response_values,
    encode_key_write,
    encode_produce_response_values,
    lone_key_cas,
)
from jetsdk.codec.record_controls import record_controls
from jetsdk.codec.transcode import DirectRecord, produce_envelopes

from .strategies import (
    PROPS,
    U64,
    keys,
    produce_results_with_latest,
    produce_results_with_values,
    small_bytes,
)

CAS = "Jet-Expected-Key-Offset"

offsets = st.sampled_from([b"0", b"-1", b"17", b" 5 ", b"x", b"", b"-2", b"9" * 19, b"9" * 25])
cas_headers = st.lists(
    st.tuples(st.sampled_from([CAS, CAS.lower(), "Jet-TTL", "Nats-Msg-Id", "a"]), offsets),
    max_size=2,
).map(tuple)
messages = st.builds(
    ProduceMessage,
    value=small_bytes,
    key=keys,
    headers=cas_headers,
    subject=st.sampled_from(["", "a.b"]),
)


def _body(*messages: ProduceMessage) -> tuple[bytes, int]:
    request = ProduceRequest("tbl", 0, AckPolicy.ALL, 1000, messages, 7, 3, current_values=True)
    body = encode_produce_request(request)
    return body, decode_produce_head(body)[7]


@PROPS
@given(messages)
def test_it_reads_exactly_the_plain_compare_and_sets(message: ProduceMessage) -> None:
    """A message is read iff it has no subject, a key and one header, a valid
    ``Jet-Expected-Key-Offset``; then the key, the offset and the size are the full
    decode's (the size as the general path counts it)."""
    body, p = _body(message)
    controls = record_controls(message.headers)
    plain = (
        not message.subject
        and message.key is not None
        and len(message.headers) == 1
        and controls is not None
        and controls.expected_key_offset is not None
        and not controls.error
        and len(message.headers[0][1]) <= 24
    )
    found = lone_key_cas(body, p)
    if not plain:
        assert found is None
        return
    assert controls is not None
    assert message.key is not None
    size = len(message.key) + len(CAS) + len(message.headers[0][1]) + len(message.value)
    assert found == (message.key, controls.expected_key_offset, size)


def test_it_takes_one_whole_message_only() -> None:
    """Anything but one message ending the body exactly is left to the full decode."""
    plain = ProduceMessage(value=b"v", key=b"k", headers=((CAS, b"4"),))
    body, p = _body(plain)
    assert lone_key_cas(body, p) == (b"k", 4, 1 + len(CAS) + 1 + 1)
    assert lone_key_cas(body + b"\x00", p) is None
    for cut in range(p, len(body)):
        assert lone_key_cas(body[:cut], p) is None
    two, p2 = _body(plain, plain)
    assert lone_key_cas(two, p2) is None
    assert lone_key_cas(memoryview(body), p) == (b"k", 4, 1 + len(CAS) + 1 + 1)


@PROPS
@given(st.data())
def test_a_key_write_is_the_request_it_stands_for(data: st.DataObject) -> None:
    stream = data.draw(st.text(max_size=12))
    partition, timeout_ms = data.draw(st.integers(0, 2**32 - 1)), data.draw(st.integers(0, 99))
    producer_id, seq = data.draw(U64), data.draw(U64)
    key, value = data.draw(small_bytes), data.draw(small_bytes)
    expected = data.draw(st.none() | st.integers(-1, 2**63 - 1))
    headers = () if expected is None else ((CAS, str(expected).encode()),)
    cas = expected is not None
    request = ProduceRequest(
        stream,
        partition,
        AckPolicy.ALL,
        timeout_ms,
        (ProduceMessage(value=value, key=key, headers=headers),),
        producer_id,
        seq,
        current_values=cas,
        latest_values=cas,
        sequence_start=True,  # a table's write starts its own sequence (spec/protocol.md)
    )
    body = encode_key_write(stream, partition, timeout_ms, producer_id, seq, key, value, expected)
    assert body == encode_produce_request(request)
    if cas:
        assert body is not None
        assert lone_key_cas(body, decode_produce_head(body)[7])[:2] == (key, expected)


@PROPS
@given(st.booleans(), st.data())
def test_one_result_decodes_as_the_full_decode(latest: bool, data: st.DataObject) -> None:
    results = produce_results_with_latest if latest else produce_results_with_values
    result: ProduceResult = data.draw(results)
    body = encode_produce_response_values([result], latest)
    assert decode_one_result_values(body, latest) == decode_produce_response_values(body, latest)[0]
    assert decode_one_result_values(body + b"\x00", latest) is None
    assert decode_one_result_values(body[:-1], latest) is None
    two = encode_produce_response_values([result, result], latest)
    assert decode_one_result_values(two, latest) is None


@PROPS
@given(
    messages,
    st.sampled_from([AckPolicy.ALL, AckPolicy.LEADER, AckPolicy.NONE]),
    st.one_of(st.none(), U64),
    U64,
)
def test_a_plain_compare_and_sets_envelope_and_record_are_the_codecs(
    message: ProduceMessage, policy: AckPolicy, producer_id: int | None, seq: int
) -> None:
    """``key_cas_envelope`` gives exactly what ``produce_envelopes`` gives for a plain
    compare-and-set (and nothing for any other message)."""
    request = ProduceRequest("tbl", 3, policy, 1000, (message,), producer_id, seq)
    body = encode_produce_request(request)
    head = decode_produce_head(body)
    got = key_cas_envelope(body, head, "_INBOX.x.1")
    plain = lone_key_cas(body, head[7])
    if plain is None:
        assert got is None
        return
    records: list[DirectRecord | None] = []
    try:
        _head, ((subject, size, envelope),) = produce_envelopes(
            body, "_INBOX.x.1", records, head, split=True
        )
    except CodecError:  # (a sequence past the range: the codec refuses it)
        assert got is None
        return
    if records[0] is None:
        assert got is None
        return
    assert got is not None
    key, expected, got_size, record, got_envelope = got
    assert (key, expected, got_size) == plain
    assert (subject, size, envelope) == ("", got_size, got_envelope)
    assert tuple(bytes(f) if isinstance(f, memoryview) else f for f in record) == tuple(
        bytes(f) if isinstance(f, memoryview) else f for f in records[0]
    )
