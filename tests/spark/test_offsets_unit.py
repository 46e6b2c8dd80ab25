"""Pure planning arithmetic: checkpoint JSON, admission control, range splitting and
packing."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jetspark.offsets import (
    OffsetRange,
    from_json,
    limit_bytes,
    limit_offsets,
    pack_ranges,
    plan_ranges,
    to_json,
)


def test_json_round_trip_is_canonical() -> None:
    offsets = {"b": {10: 5, 2: 7}, "a": {0: 1}}
    text = to_json(offsets)
    assert list(text) == ["a", "b"]
    assert list(text["b"]) == ["2", "10"]
    assert from_json(text) == offsets


@pytest.mark.parametrize(
    "bad", [[], {"a": 1}, {"a": {"x": 1}}, {"a": {"0": -1}}, {"a": {"0": "1"}}]
)
def test_from_json_rejects_garbage(bad: object) -> None:
    with pytest.raises(ValueError, match="jetstream offset"):
        from_json(bad)


offsets_maps = st.dictionaries(
    st.sampled_from(["a", "b", "c"]),
    st.dictionaries(st.integers(0, 5), st.integers(0, 1000), min_size=1, max_size=4),
    min_size=1,
)


@settings(max_examples=200, deadline=None)
@given(latest=offsets_maps, data=st.data(), limit=st.integers(1, 3000))
def test_limit_offsets_takes_exactly_the_limit_and_never_moves_back(
    latest: dict[str, dict[int, int]], data: st.DataObject, limit: int
) -> None:
    start = {
        s: {p: data.draw(st.integers(0, end)) for p, end in parts.items()}
        for s, parts in latest.items()
    }
    end = limit_offsets(start, latest, limit)
    available = sum(latest[s][p] - start[s][p] for s in latest for p in latest[s])
    taken = sum(end[s][p] - start[s][p] for s in end for p in end[s])
    assert taken == min(limit, available)
    for s, parts in end.items():
        for p, offset in parts.items():
            assert start[s][p] <= offset <= latest[s][p]


def test_limit_offsets_is_proportional() -> None:
    end = limit_offsets({"s": {0: 0, 1: 0}}, {"s": {0: 300, 1: 100}}, 100)
    assert end == {"s": {0: 75, 1: 25}}


@settings(max_examples=200, deadline=None)
@given(
    latest=offsets_maps,
    data=st.data(),
    limit=st.integers(1, 200_000),
    sizes=st.lists(st.floats(0.5, 5000.0), min_size=24, max_size=24),
)
def test_limit_bytes_stays_under_the_limit_and_always_moves_on(
    latest: dict[str, dict[int, int]], data: st.DataObject, limit: int, sizes: list[float]
) -> None:
    start = {
        s: {p: data.draw(st.integers(0, end)) for p, end in parts.items()}
        for s, parts in latest.items()
    }
    per_offset = {(s, p): sizes[i * 6 + p] for i, s in enumerate("abc") for p in range(6)}
    end = limit_bytes(start, latest, limit, per_offset)
    available = sum(latest[s][p] - start[s][p] for s in latest for p in latest[s])
    took = {(s, p): end[s][p] - start[s][p] for s in end for p in end[s]}
    used = sum(n * per_offset[tp] for tp, n in took.items())
    for (s, p), n in took.items():
        assert 0 <= n <= latest[s][p] - start[s][p]
    if available and not any(took.values()):
        raise AssertionError("no progress")
    if sum(took.values()) > 1:
        assert used <= limit * (1 + 1e-9)
    if used + min(per_offset.values()) <= limit and sum(took.values()) < available:
        # Not full: something that fits was left behind only if larger than what is left.
        left = limit - used
        assert all(
            per_offset[(s, p)] > left
            for s in latest
            for p in latest[s]
            if took[(s, p)] < latest[s][p] - start[s][p]
        )


def test_limit_bytes_takes_an_offset_that_fits_exactly_despite_float_sums() -> None:
    """Found by the property above: 16.5 bytes left, 1.1 bytes per offset; 16.5 // 1.1 is
    14.999... in floats, which left one offset that fits behind."""
    sizes = {("c", 0): 1.1, ("c", 2): 624.0}
    end = limit_bytes({"c": {0: 0, 2: 0}}, {"c": {0: 30, 2: 2}}, 657, sizes)
    assert end == {"c": {0: 30, 2: 1}}


def test_limit_bytes_shares_bytes_in_proportion() -> None:
    sizes = {("s", 0): 10.0, ("s", 1): 100.0}
    end = limit_bytes({"s": {0: 0, 1: 0}}, {"s": {0: 100, 1: 100}}, 1100, sizes)
    assert end == {"s": {0: 10, 1: 10}}  # 100 + 1000 bytes
    assert limit_bytes({"s": {0: 0}}, {"s": {0: 5}}, 1, sizes) == {"s": {0: 1}}  # soft
    assert limit_bytes({"s": {0: 0}}, {"s": {0: 5}}, 10_000, sizes) == {"s": {0: 5}}


def test_plan_ranges_marks_new_partitions_and_skips_empty() -> None:
    ranges = plan_ranges({"s": {0: 5, 1: 9}}, {"s": {0: 8, 1: 9, 2: 4}})
    assert ranges == [OffsetRange("s", 0, 5, 8), OffsetRange("s", 2, 0, 4, new_partition=True)]


def test_plan_ranges_splits_for_min_partitions() -> None:
    ranges = plan_ranges({"s": {0: 0, 1: 0}}, {"s": {0: 90, 1: 10}}, min_partitions=10)
    assert len(ranges) >= 10
    for part, total in ((0, 90), (1, 10)):
        pieces = [r for r in ranges if r.partition == part]
        assert pieces[0].start == 0
        assert pieces[-1].end == total
        assert all(a.end == b.start for a, b in itertools.pairwise(pieces))


def _eight(offsets: int) -> list[OffsetRange]:
    return [OffsetRange("s", p, 0, offsets) for p in range(8)]


def test_pack_ranges_puts_small_ranges_together_in_order() -> None:
    ranges = _eight(10)
    assert pack_ranges(ranges, {}, 1024) == [tuple(ranges)]  # 1.0 byte per offset if unknown


def test_pack_ranges_keeps_every_group_under_the_bound_and_about_even() -> None:
    ranges = _eight(10)
    sizes = {("s", p): 2.0 for p in range(8)}  # 20 bytes a range, 160 in all
    groups = pack_ranges(ranges, sizes, 64)
    assert [len(g) for g in groups] == [3, 3, 2]
    assert sorted((r for g in groups for r in g), key=ranges.index) == ranges
    assert all(list(g) == sorted(g, key=ranges.index) for g in groups)
    assert [ranges.index(g[0]) for g in groups] == sorted(ranges.index(g[0]) for g in groups)
    assert pack_ranges(ranges, sizes, 59) == pack_ranges(ranges, sizes, 40)  # 4 of 2 ranges
    assert [len(g) for g in pack_ranges(ranges, sizes, 40)] == [2, 2, 2, 2]


def test_pack_ranges_leaves_a_large_range_alone_and_honours_min_groups() -> None:
    ranges = [OffsetRange("s", 0, 0, 1000), OffsetRange("s", 1, 0, 5), OffsetRange("s", 2, 0, 5)]
    assert pack_ranges(ranges, {}, 100) == [(ranges[0],), (ranges[1], ranges[2])]
    assert pack_ranges(_eight(10), {}, 1024, min_groups=3) == pack_ranges(_eight(10), {}, 30)
    assert pack_ranges(_eight(10), {}, 1) == [(r,) for r in _eight(10)]  # one per range
    assert pack_ranges([], {}, 1) == []


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.integers(0, 1000), min_size=1, max_size=12),
    st.lists(st.floats(0.5, 5000.0), min_size=12, max_size=12),
    st.integers(1, 20_000),
    st.integers(1, 15),
)
def test_pack_ranges_places_each_range_once_within_the_bound(
    sizes: list[int], per_offset: list[float], max_bytes: int, min_groups: int
) -> None:
    ranges = [OffsetRange("s", p, 7, 7 + n) for p, n in enumerate(sizes)]
    table = {("s", p): per_offset[p] for p in range(len(sizes))}
    groups = pack_ranges(ranges, table, max_bytes, min_groups=min_groups)
    assert sorted((r for g in groups for r in g), key=ranges.index) == ranges
    assert len(groups) >= min(min_groups, len(ranges))
    for group in groups:
        assert group
        weight = sum(r.size * table[(r.stream, r.partition)] for r in group)
        assert len(group) == 1 or weight <= max_bytes * (1 + 1e-9)
    assert pack_ranges(ranges, table, max_bytes, min_groups=min_groups) == groups
