"""Ack payload encoding: batching per stream partition, splitting, byte-exact output; acks
to the server's own Produce inboxes handed over in process."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jetsdk.codec.envelope import EnvelopeAck, decode_acks, encode_ack, encode_acks
from jetsdk.codec.error_codes import AckPolicy
from jetserver.broker.acks import (
    AckRouter,
    PartitionAck,
    ack_payloads,
    ack_size,
    encode_ack_payloads,
    group_by_inbox,
)
from jetserver.config.server import NatsConfig
from jetserver.natslink.link import NatsLink

partition_acks = st.builds(
    PartitionAck,
    offset=st.integers(-1, 2**40),
    timestamp=st.integers(-1, 2**62),
    correlation_id=st.text(max_size=6),
    ack_policy=st.sampled_from([AckPolicy.LEADER, AckPolicy.ALL]),
    error_code=st.sampled_from([0, 0, 0, 7]),
    error_message=st.text(max_size=8),
)


def _as_ack(stream: str, partition: int, a: PartitionAck) -> EnvelopeAck:
    return EnvelopeAck(stream, partition, a[0], a[1], a[2], AckPolicy(a[3]), a[4], a[5])


acks = st.builds(
    _as_ack, st.sampled_from(["orders", "pay", "é"]), st.integers(0, 2), partition_acks
)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(partition_acks, min_size=1, max_size=30),
    st.sampled_from(["s", "é" * 3]),
    st.integers(60, 400),
)
def test_payloads_decode_to_the_acks_in_order(
    batch: list[PartitionAck], stream: str, max_bytes: int
) -> None:
    payloads = ack_payloads(stream, 3, batch, max_bytes)
    expected = [_as_ack(stream, 3, a) for a in batch]
    assert [a for p in payloads for a in decode_acks(p)] == expected
    for p in payloads:
        got = decode_acks(p)
        fields = [
            (a.offset, a.timestamp, a.correlation_id, a.ack_policy, a.error_code, a.error_message)
            for a in got
        ]
        assert len(got) == 1 or sum(ack_size(stream, f) for f in fields) <= max_bytes
        assert p == (encode_ack(got[0]) if len(got) == 1 else encode_acks(got))


@settings(max_examples=100, deadline=None)
@given(st.lists(acks, min_size=1, max_size=20))
def test_ack_objects_mixing_partitions(batch: list[EnvelopeAck]) -> None:
    payloads = encode_ack_payloads(batch, 200)
    assert [a for p in payloads for a in decode_acks(p)] == batch
    for p in payloads:
        assert len({(a.stream, a.partition) for a in decode_acks(p)}) == 1


def test_one_partition_one_payload() -> None:
    batch = [PartitionAck(i, 5, str(i), AckPolicy.LEADER) for i in range(100)]
    objects = [_as_ack("s", 0, a) for a in batch]
    assert ack_payloads("s", 0, batch) == [encode_acks(objects)]
    assert ack_payloads("s", 0, batch[:1]) == [encode_ack(objects[0])]


def test_group_by_inbox_keeps_order() -> None:
    a, b, c = (PartitionAck(i, 0, "", AckPolicy.LEADER) for i in range(3))
    assert group_by_inbox([("x", a), ("y", b), ("x", c)]) == {"x": [a, c], "y": [b]}


@pytest.mark.anyio
async def test_acks_to_a_local_inbox_are_handed_over_in_process() -> None:
    # The link is not connected: acks to the registered prefix arrive anyway, in order and
    # grouped per inbox; the others would go to NATS (here: refused, nothing raised).
    router = AckRouter(NatsLink(NatsConfig()))
    got: list[tuple[str, str, int, list[PartitionAck]]] = []
    router.local_inboxes["_INBOX.me"] = lambda token, s, p, a: got.append((token, s, p, list(a)))
    a1, a2, a3 = (PartitionAck(i, 5, str(i), AckPolicy.LEADER) for i in range(3))
    items = [("_INBOX.me.1f", a1), ("_INBOX.other.1f", a2), ("_INBOX.me.20", a3)]
    items.append(("_INBOX.me.1f", a3))
    await router.publish("orders", 2, items)
    assert got == [("1f", "orders", 2, [a1, a3]), ("20", "orders", 2, [a3])]


def test_route_hands_local_acks_over_at_once_and_leaves_the_rest_for_nats() -> None:
    # route() runs without an event loop or await: a commit answers this server's Produce
    # requests before it wakes anything else, and publishes the NATS-bound acks after.
    router = AckRouter(NatsLink(NatsConfig()))
    got: list[tuple[str, list[PartitionAck]]] = []
    router.local_inboxes["_INBOX.me"] = lambda token, s, p, a: got.append((token, list(a)))
    a1, a2 = (PartitionAck(i, 5, str(i), AckPolicy.ALL) for i in range(2))
    messages = router.route("orders", 0, [("_INBOX.me.7", a1), ("_INBOX.other.7", a2)])
    assert got == [("7", [a1])]
    assert [subject for subject, _ in messages] == ["_INBOX.other.7"]
    [(_, payload)] = messages
    assert [(a.offset, a.correlation_id) for a in decode_acks(payload)] == [(1, "1")]
