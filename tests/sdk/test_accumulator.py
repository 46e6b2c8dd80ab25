"""Accumulator batching rules, with time passed in (no sleeps)."""

from __future__ import annotations

import pytest

from jetsdk.codec.error_codes import AckPolicy
from jetsdk.producer.accumulator import Accumulator

LEADER, ALL = AckPolicy.LEADER, AckPolicy.ALL


def test_ready_by_linger() -> None:
    acc: Accumulator[str] = Accumulator(linger=0.01)
    assert not acc.append(0, "a", size=10, ack_policy=LEADER, now=1.0)
    assert not acc.ready(0, 1.005)
    assert acc.deadline(0) == pytest.approx(1.01)
    assert acc.ready(0, 1.01)
    batch = acc.drain(0)
    assert batch is not None
    assert batch.items == ("a",)
    assert acc.drain(0) is None
    assert acc.deadline(0) is None


def test_full_by_count_and_bytes() -> None:
    acc: Accumulator[int] = Accumulator(linger=10, max_batch_messages=3, max_batch_bytes=100)
    assert not acc.append(0, 1, size=10, ack_policy=LEADER, now=0)
    assert not acc.append(0, 2, size=10, ack_policy=LEADER, now=0)
    assert acc.append(0, 3, size=10, ack_policy=LEADER, now=0)
    acc.append(0, 4, size=10, ack_policy=LEADER, now=0)
    first = acc.drain(0)
    assert first is not None
    assert first.items == (1, 2, 3)
    assert acc.queued(0) == 1
    acc2: Accumulator[int] = Accumulator(linger=10, max_batch_bytes=100)
    acc2.append(0, 1, size=60, ack_policy=LEADER, now=0)
    assert acc2.append(0, 2, size=60, ack_policy=LEADER, now=0)
    got = acc2.drain(0)
    assert got is not None
    assert got.items == (1,)  # the second would exceed max_batch_bytes
    assert got.size == 60


def test_oversized_message_goes_alone() -> None:
    acc: Accumulator[int] = Accumulator(max_batch_bytes=10)
    assert acc.append(0, 1, size=50, ack_policy=LEADER, now=0)
    batch = acc.drain(0)
    assert batch is not None
    assert batch.items == (1,)


def test_policy_change_closes_batch() -> None:
    acc: Accumulator[str] = Accumulator(linger=10)
    acc.append(0, "a", size=1, ack_policy=LEADER, now=0)
    assert acc.append(0, "b", size=1, ack_policy=ALL, now=0)
    assert acc.ready(0, 0)
    first, second = acc.drain(0), acc.drain(0)
    assert first is not None
    assert second is not None
    assert (first.ack_policy, first.items) == (LEADER, ("a",))
    assert (second.ack_policy, second.items) == (ALL, ("b",))


def test_partitions_are_independent_and_flush() -> None:
    acc: Accumulator[str] = Accumulator(linger=10)
    acc.append(0, "a", size=1, ack_policy=LEADER, now=0)
    acc.append(1, "b", size=1, ack_policy=LEADER, now=5)
    assert sorted(acc.partitions()) == [0, 1]
    assert acc.ready(0, 10)
    assert not acc.ready(1, 10)
    assert acc.ready(1, 10, flushing=True)
    assert acc.total_queued == 2
    assert sorted(acc.drain_all()) == ["a", "b"]
    assert acc.total_queued == 0


def test_next_batch_keeps_its_age() -> None:
    acc: Accumulator[int] = Accumulator(linger=1.0, max_batch_messages=1)
    acc.append(0, 1, size=1, ack_policy=LEADER, now=0)
    acc.append(0, 2, size=1, ack_policy=LEADER, now=0.5)
    acc.drain(0)
    assert acc.deadline(0) == pytest.approx(1.5)


def test_bad_config() -> None:
    with pytest.raises(ValueError):
        Accumulator(linger=-1)
    with pytest.raises(ValueError):
        Accumulator(max_batch_messages=0)
