"""Partitioner: Kafka-compatible murmur2 and the spec's vectors."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jetsdk.partitioner import (
    DefaultPartitioner,
    RoundRobinPartitioner,
    murmur2,
    partition_for_key,
)
from support.vectors import load_vectors

# From Kafka's UtilsTest (clients/src/test/java/org/apache/kafka/common/utils/UtilsTest.java).
KAFKA = {
    b"21": -973932308,
    b"foobar": -790332482,
    b"a-little-bit-long-string": -985981536,
    b"a-little-bit-longer-string": -1486304829,
    b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
    b"abc": 479470107,
}


@pytest.mark.parametrize(("key", "expected"), KAFKA.items())
def test_murmur2_matches_kafka(key: bytes, expected: int) -> None:
    assert murmur2(key) == expected


def test_spec_vectors() -> None:
    doc = load_vectors("partitioning.json")
    assert len(doc["cases"]) >= 10
    for case in doc["cases"]:
        key = bytes.fromhex(case["key_hex"])
        assert murmur2(key) == case["murmur2"]
        for n, partition in case["partitions"].items():
            assert partition_for_key(key, int(n)) == partition


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=64), st.integers(min_value=1, max_value=1000))
def test_partition_in_range_and_signed_32(key: bytes, n: int) -> None:
    h = murmur2(key)
    assert -(2**31) <= h < 2**31
    assert 0 <= partition_for_key(key, n) < n


def test_round_robin_and_default() -> None:
    rr = RoundRobinPartitioner()
    assert [rr(None, b"", 3) for _ in range(5)] == [0, 1, 2, 0, 1]
    default = DefaultPartitioner()
    assert default(b"foobar", b"", 4) == partition_for_key(b"foobar", 4)
    assert [default(None, b"", 2) for _ in range(3)] == [0, 1, 0]
    with pytest.raises(ValueError):
        partition_for_key(b"k", 0)
