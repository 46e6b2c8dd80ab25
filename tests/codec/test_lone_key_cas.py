"""``lone_key_cas``: the one-message read a leader answers a lost compare-and-set from
(jetsdk/codec/produce_values.py), checked against the full decode of the same body."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from jetsdk.codec.error_codes import AckPolicy
from jetsdk.codec.messages import (
    ProduceMessage,
    ProduceRequest,
    decode_produce_head,
    encode_produce_request,
)
from jetsdk.codec.produce_values import lone_key_cas
from jetsdk.codec.record_controls import record_controls

from .strategies import PROPS, keys, small_bytes

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
