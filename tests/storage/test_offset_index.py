from __future__ import annotations

import pytest

from jetserver.storage import CorruptFileError
from jetserver.storage.offset_index import OffsetIndex, encode_entry, index_points


def test_entry_layout() -> None:
    assert encode_entry(1, 2) == bytes.fromhex("0000000100000002")
    assert encode_entry(0xFFFFFFFF, 0x01020304) == bytes.fromhex("ffffffff01020304")


def test_round_trip_and_lookups() -> None:
    index = OffsetIndex()
    for rel, pos in [(3, 100), (7, 230), (12, 400)]:
        index.append(rel, pos)
    data = index.to_bytes()
    assert len(data) == 24
    again = OffsetIndex.from_bytes(data)
    assert list(again.relative_offsets) == [3, 7, 12]
    assert list(again.positions) == [100, 230, 400]
    assert index.floor_for_offset(2, 3) == -1
    assert index.floor_for_offset(7, 3) == 1
    assert index.floor_for_offset(99, 3) == 2
    assert index.floor_for_offset(99, 2) == 1  # only the visible entries count
    assert index.floor_for_position(229, 3) == 0
    assert index.floor_for_position(230, 3) == 1
    assert list(index.truncated(1).positions) == [100]


@pytest.mark.parametrize(
    "data",
    [
        bytes(7),
        encode_entry(5, 100) + encode_entry(5, 200),
        encode_entry(5, 100) + encode_entry(6, 100),
        encode_entry(1, 0),
    ],
)
def test_corrupt_index_is_refused(data: bytes) -> None:
    with pytest.raises(CorruptFileError):
        OffsetIndex.from_bytes(data)


def test_index_points_rule() -> None:
    # Records start every 40 bytes; interval 100: entries where start - last >= 100.
    starts = list(range(0, 400, 40))
    assert index_points(0, 100, starts) == [3, 6, 9]  # positions 120, 240, 360
    assert index_points(80, 100, starts) == [5, 8]  # 200, 320
    assert index_points(0, 100, starts, 4) == [3]
    assert index_points(0, 1, [0, 10, 20]) == [1, 2]
