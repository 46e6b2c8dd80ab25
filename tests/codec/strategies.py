"""Hypothesis strategies for every codec value type (within the encoders' limits)."""

from __future__ import annotations

from hypothesis import settings
from hypothesis import strategies as st

from jetsdk.codec.envelope import EnvelopeAck, EnvelopeMessage
from jetsdk.codec.error_codes import AckPolicy
from jetsdk.codec.fetch_messages import FetchRequest
from jetsdk.codec.messages import ProduceMessage, ProduceRequest, ProduceResult
from jetsdk.codec.record import Record

PROPS = settings(max_examples=200, deadline=None)
"""The property tests' settings: 200 examples each, no deadline (a loaded machine)."""

U16 = st.integers(0, 2**16 - 1)
U32 = st.integers(0, 2**32 - 1)
I32 = st.integers(-(2**31), 2**31 - 1)
I64 = st.integers(-(2**63), 2**63 - 1)
U64 = st.integers(0, 2**64 - 1)

small_bytes = st.binary(max_size=40)
text = st.text(max_size=20)
names = st.text(max_size=12)
keys = st.none() | small_bytes
headers = st.lists(st.tuples(names, small_bytes), max_size=4).map(tuple)
ack_policies = st.sampled_from(list(AckPolicy))
producer_ids = st.none() | U64


@st.composite
def _records(draw: st.DrawFn) -> Record:
    producer_id = draw(producer_ids)
    return Record(
        offset=draw(I64),
        timestamp=draw(I64),
        leader_epoch=draw(U32),
        value=draw(small_bytes),
        key=draw(keys),
        subject=draw(text),
        reply=draw(text),
        headers=draw(headers),
        producer_id=producer_id,
        producer_seq=0 if producer_id is None else draw(U64),
    )


records = _records()

produce_messages = st.builds(
    ProduceMessage, value=small_bytes, key=keys, headers=headers, subject=text
)


@st.composite
def produce_requests(draw: st.DrawFn) -> ProduceRequest:
    producer_id = draw(producer_ids)
    current = draw(st.booleans())
    return ProduceRequest(
        stream=draw(names),
        partition=draw(U32),
        ack_policy=draw(ack_policies),
        timeout_ms=draw(U32),
        messages=tuple(draw(st.lists(produce_messages, max_size=4))),
        producer_id=producer_id,
        base_seq=0 if producer_id is None else draw(U64),
        current_values=current,
        latest_values=current and draw(st.booleans()),  # bit 3 only with bit 2
    )


produce_results = st.builds(ProduceResult, error_code=U16, offset=I64, timestamp=I64)
produce_results_with_values = st.one_of(
    produce_results.filter(lambda r: r.error_code != 23),
    st.builds(
        ProduceResult,
        error_code=st.just(23),  # WRONG_EXPECTED_KEY_OFFSET: its current value follows
        offset=I64,
        timestamp=I64,
        current_value=st.none() | st.binary(max_size=16),
    ),
)
"""Results of a request with the current-values flag (decode back to themselves)."""
produce_results_with_latest = st.one_of(
    produce_results_with_values.filter(lambda r: r.error_code != 0),
    st.builds(
        ProduceResult,
        error_code=st.just(0),
        offset=I64,
        timestamp=I64,
        current_value=st.just(None),
        latest_offset=st.just(-1),
    ),
    st.builds(
        ProduceResult,
        error_code=st.just(0),  # a later record of the key: its offset and value follow
        offset=I64,
        timestamp=I64,
        current_value=st.none() | st.binary(max_size=16),
        latest_offset=st.integers(0, 2**63 - 1),
    ),
)
"""Results of a request with the latest-values flag too (decode back to themselves)."""


@st.composite
def fetch_requests(draw: st.DrawFn) -> FetchRequest:
    replica_id = draw(I32)
    replica = replica_id >= 0
    return FetchRequest(
        stream=draw(names),
        partition=draw(U32),
        offset=draw(I64),
        max_bytes=draw(U32),
        max_wait_ms=draw(U32),
        replica_id=replica_id,
        replica_flushed=draw(I64) if replica else -1,
        leader_epoch=draw(I64) if replica else -1,
    )


@st.composite
def envelope_messages(draw: st.DrawFn) -> EnvelopeMessage:
    producer_id = draw(producer_ids)
    return EnvelopeMessage(
        value=draw(small_bytes),
        key=draw(keys),
        headers=draw(headers),
        ack_inbox=draw(text),
        correlation_id=draw(text),
        ack_policy=draw(ack_policies),
        producer_id=producer_id,
        producer_seq=0 if producer_id is None else draw(U64),
    )


acks = st.builds(
    EnvelopeAck,
    stream=st.text(max_size=20),  # at most 80 UTF-8 bytes: under the 255-byte limit
    partition=U32,
    offset=I64,
    timestamp=I64,
    correlation_id=text,
    ack_policy=ack_policies,
    error_code=U16,
    error_message=text,
)

json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**64 - 1)
    | st.text(max_size=6)
    | st.floats(allow_nan=False, allow_infinity=False)
)
json_values = st.recursive(
    json_scalars,
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=4), children, max_size=3)
    ),
    max_leaves=6,
)
json_objects = st.dictionaries(st.text(max_size=6), json_values, max_size=4)
flat_json_objects = st.dictionaries(st.text(max_size=6), json_scalars, max_size=3)
