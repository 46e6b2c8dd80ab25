"""What ``commit(offsets, metadata)`` asks for, checked once for the group and the simple
consumer (jetsdk.consumer.progress.commit_entries)."""

from __future__ import annotations

import pytest

from jetsdk import InvalidArgument, OffsetAndMetadata
from jetsdk.consumer.progress import MAX_USER_METADATA_BYTES, commit_entries
from jetsdk.group.stream_partition import StreamPartition

P0 = StreamPartition("orders", 0)
P1 = StreamPartition("orders", 1)


def test_no_offsets_means_what_was_processed() -> None:
    assert commit_entries(None, "note") is None


def test_plain_offsets_take_the_call_metadata_and_entries_keep_their_own() -> None:
    entries = commit_entries({P0: 5, P1: OffsetAndMetadata(9, "own")}, "call")
    assert entries == {P0: OffsetAndMetadata(5, "call"), P1: OffsetAndMetadata(9, "own")}


def test_metadata_over_the_limit_is_refused() -> None:
    with pytest.raises(InvalidArgument) as info:
        commit_entries({P0: 5}, "x" * (MAX_USER_METADATA_BYTES + 1))
    assert info.value.details == {"field": "metadata"}
    with pytest.raises(InvalidArgument):
        commit_entries(None, "x" * (MAX_USER_METADATA_BYTES + 1))
    assert commit_entries({P0: 5}, "x" * MAX_USER_METADATA_BYTES) is not None


@pytest.mark.parametrize(
    "value", [-1, OffsetAndMetadata(-1), OffsetAndMetadata(3, "é" * MAX_USER_METADATA_BYTES)]
)
def test_a_bad_entry_refuses_the_whole_commit(value: int | OffsetAndMetadata) -> None:
    with pytest.raises(InvalidArgument) as info:
        commit_entries({P0: 5, P1: value}, "")
    assert info.value.details == {"field": "offsets"}
