"""The short ways of an acked send (bench send_cost's lines): the answer of a batch whose
messages were all stored read as result tuples, a message alone drained without the scan,
and the sync API's hand-off drained in the loop callback (asyncio) or by its task (trio)."""

from __future__ import annotations

import uuid

import pytest

from jetsdk import sync
from jetsdk.codec.error_codes import AckPolicy, ErrorCode
from jetsdk.codec.errors import CodecError
from jetsdk.codec.messages import (
    decode_produce_response,
    decode_produce_result_tuples,
    encode_produce_result_tuples,
)
from jetsdk.producer.accumulator import Accumulator
from jetsdk.producer.retry_rules import stored_results
from support.jet_dev import JetDev

RESULTS = [(0, 5, 1_700_000_000_000_000_000), (int(ErrorCode.DUPLICATE_SEQUENCE), 6, 7)]


def test_result_tuples_are_the_decoded_results() -> None:
    body = encode_produce_result_tuples(RESULTS)
    assert decode_produce_result_tuples(body) == RESULTS
    assert decode_produce_result_tuples(bytearray(body)) == RESULTS
    decoded = decode_produce_response(body)
    assert [(r.error_code, r.offset, r.timestamp) for r in decoded] == RESULTS
    assert decode_produce_result_tuples(encode_produce_result_tuples([])) == []


@pytest.mark.parametrize(
    ("cut", "reason"), [(slice(0, 2), "truncated"), (slice(0, -1), "truncated")]
)
def test_result_tuples_of_a_short_body_fail(cut: slice, reason: str) -> None:
    with pytest.raises(CodecError) as info:
        decode_produce_result_tuples(encode_produce_result_tuples(RESULTS)[cut])
    assert info.value.reason == reason


def test_result_tuples_with_trailing_bytes_fail() -> None:
    with pytest.raises(CodecError) as info:
        decode_produce_result_tuples(encode_produce_result_tuples(RESULTS) + b"\0")
    assert info.value.reason == "malformed"


def test_stored_results_only_when_every_message_was_stored() -> None:
    body = encode_produce_result_tuples(RESULTS)
    assert stored_results(body, 2) == RESULTS
    assert stored_results(body, 3) is None  # another count than sent
    assert stored_results(None, 2) is None
    assert stored_results(body[:-1], 2) is None  # undecodable
    failed = encode_produce_result_tuples([RESULTS[0], (int(ErrorCode.NOT_LEADER), -1, 0)])
    assert stored_results(failed, 2) is None


def test_a_message_alone_drains_as_the_scan_would() -> None:
    acc: Accumulator[str] = Accumulator(linger=0.0, max_batch_messages=10, max_batch_bytes=100)
    assert not acc.append(0, "a", size=7, ack_policy=AckPolicy.LEADER, now=1.0)
    assert acc.ready(0, 1.0)
    batch = acc.drain(0)
    assert batch is not None
    assert (batch.partition, batch.ack_policy, batch.items, batch.size) == (
        0,
        AckPolicy.LEADER,
        ("a",),
        7,
    )
    assert (acc.total_queued, acc.queued(0), acc.drain(0)) == (0, 0, None)
    # The queue's size went back to 0: the next batch holds as many bytes again.
    for item in "bcd":
        acc.append(0, item, size=40, ack_policy=AckPolicy.ALL, now=2.0)
    batch = acc.drain(0)
    assert batch is not None
    assert batch.items == ("b", "c")
    assert acc.queued(0) == 1


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_a_sync_producer_starts_each_partition_from_its_hand_off(
    jet_dev: JetDev, backend: str
) -> None:
    """The first message of each partition starts its sender task where the hand-off is
    drained (asyncio: the loop callback, which anyio code must be able to run in)."""
    name = f"handoff-{uuid.uuid4().hex[:8]}"
    with sync.Client(jet_dev.servers, backend=backend) as client:
        client.create_stream(name, name, partitions=3)
        with sync.Producer(client, name, linger=0) as producer:
            acks = [producer.send(b"%d" % p, partition=p) for p in range(3)]
            handles = [producer.send_soon(b"k%d" % i, key=b"k%d" % i) for i in range(60)]
            producer.flush()
            assert [(a.partition, a.offset) for a in acks] == [(0, 0), (1, 0), (2, 0)]
            assert all(h.result(0).offset >= 1 for h in handles)
            queued = producer._queued()
            # Where the hand-off was drained: the callback on asyncio, the task on trio.
            assert queued._drains_in_callback == (backend == "asyncio")
