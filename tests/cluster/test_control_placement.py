"""Replica placement (pure): even spread of replicas and leaders, load-aware start."""

from __future__ import annotations

from collections import Counter

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jetserver.cluster.placement import place_replicas, server_load
from jetserver.errors import ApiError
from jetserver.metadata.model import PartitionAssignment, StreamMeta, StreamSpec


def meta(name: str, placement: tuple[tuple[str, ...], ...]) -> StreamMeta:
    spec = StreamSpec(name=name, subject=name, partitions=len(placement))
    parts = tuple(
        PartitionAssignment(partition=p, leader=r[0], replicas=r, isr=r)
        for p, r in enumerate(placement)
    )
    return StreamMeta(spec=spec, stream_id="x", created_ns=0, partitions=parts)


def test_three_partitions_rf3_on_three_servers() -> None:
    placement = place_replicas(3, 3, ["s2", "s3", "s1"])
    assert placement == (("s1", "s2", "s3"), ("s2", "s3", "s1"), ("s3", "s1", "s2"))


@settings(max_examples=200, deadline=None)
@given(
    servers=st.integers(min_value=1, max_value=9),
    partitions=st.integers(min_value=1, max_value=40),
    data=st.data(),
)
def test_spread_is_even_within_a_stream(servers: int, partitions: int, data: st.DataObject) -> None:
    ids = [f"s{i}" for i in range(1, servers + 1)]
    rf = data.draw(st.integers(min_value=1, max_value=servers))
    placement = place_replicas(partitions, rf, ids)
    assert len(placement) == partitions
    for replicas in placement:
        assert len(replicas) == rf
        assert len(set(replicas)) == rf
        assert set(replicas) <= set(ids)
    leaders = Counter(r[0] for r in placement)
    held = Counter(s for r in placement for s in r)
    leader_counts = [leaders.get(s, 0) for s in ids]
    held_counts = [held.get(s, 0) for s in ids]
    assert max(leader_counts) - min(leader_counts) <= 1
    assert max(held_counts) - min(held_counts) <= 1


def test_successive_streams_spread_their_leaders() -> None:
    ids = ["s1", "s2", "s3"]
    streams: list[StreamMeta] = []
    for i in range(6):
        placement = place_replicas(1, 2, ids, server_load(streams))
        streams.append(meta(f"t{i}", placement))
    load = server_load(streams)
    assert [load[s][0] for s in ids] == [2, 2, 2]  # leaders
    assert [load[s][1] for s in ids] == [4, 4, 4]  # replicas


def test_the_load_follows_changed_and_removed_streams() -> None:
    # Counted once per stream object: a stream replaced by another object (an election)
    # or gone is counted as it is now, not as it was.
    a = meta("a", (("s1", "s2"), ("s2", "s3")))
    b = meta("b", (("s3", "s1"),))
    assert server_load([a, b]) == {"s1": (1, 2), "s2": (1, 2), "s3": (1, 2)}
    moved = attrs.evolve(
        a, partitions=(attrs.evolve(a.partitions[0], leader="s2"), a.partitions[1])
    )
    assert server_load([moved, b]) == {"s1": (0, 2), "s2": (2, 2), "s3": (1, 2)}
    assert server_load([b]) == {"s3": (1, 1), "s1": (0, 1)}
    assert server_load([a, b]) == {"s1": (1, 2), "s2": (1, 2), "s3": (1, 2)}


def test_replication_factor_above_the_live_servers_is_refused() -> None:
    with pytest.raises(ApiError) as info:
        place_replicas(1, 3, ["s1", "s2"])
    assert info.value.details == {"field": "replication_factor"}
    assert info.value.message == (
        "replication factor 3 exceeds the 2 live servers of the cluster (s1, s2)"
    )


def test_counts_below_one_are_a_bug() -> None:
    with pytest.raises(ValueError, match=">= 1"):
        place_replicas(0, 1, ["s1"])
