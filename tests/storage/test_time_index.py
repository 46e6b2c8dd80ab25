from __future__ import annotations

import pytest

from jetserver.storage import CorruptFileError
from jetserver.storage.time_index import TimeIndex, encode_entry


def test_entry_layout() -> None:
    assert encode_entry(1, 2) == bytes.fromhex("000000000000000100000002")
    assert encode_entry(-1, 7) == bytes.fromhex("ffffffffffffffff00000007")


def test_round_trip_and_search() -> None:
    index = TimeIndex()
    for ts, rel in [(10, 1), (10, 4), (20, 9)]:
        index.append(ts, rel)
    again = TimeIndex.from_bytes(index.to_bytes())
    assert list(again.timestamps) == [10, 10, 20]
    assert list(again.relative_offsets) == [1, 4, 9]
    assert index.last_before(10, 3) == -1
    assert index.last_before(11, 3) == 1
    assert index.last_before(21, 3) == 2
    assert index.last_before(21, 1) == 0


@pytest.mark.parametrize(
    "data",
    [bytes(13), encode_entry(5, 1) + encode_entry(4, 2), encode_entry(5, 2) + encode_entry(6, 2)],
)
def test_corrupt_time_index_is_refused(data: bytes) -> None:
    with pytest.raises(CorruptFileError):
        TimeIndex.from_bytes(data)
