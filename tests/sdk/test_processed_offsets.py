"""ProcessedOffsets and Progress (pure): committed = first un-acked, redelivery, delivery counts."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jetsdk.consumer.processed import ProcessedOffsets
from jetsdk.consumer.progress import (
    MAX_USER_METADATA_BYTES,
    PROGRESS_PREFIX,
    Progress,
    decode_progress,
    encode_progress,
)
from jetsdk.group.records import MAX_METADATA_BYTES


def deliver(acks: ProcessedOffsets, offsets: list[int]) -> dict[int, int]:
    out = {}
    for o in offsets:
        count = acks.admit(o)
        if count:
            acks.handed_out(o, count)
            out[o] = count
    return out


def test_manual_acks_out_of_order() -> None:
    acks = ProcessedOffsets(10, manual=True)
    assert deliver(acks, [10, 11, 12, 13]) == dict.fromkeys([10, 11, 12, 13], 1)
    assert acks.unacked == 4
    assert acks.ack(12)
    assert not acks.ack(12)
    assert not acks.ack(99)
    assert acks.committable() == 10
    assert acks.ack(10)
    assert acks.committable() == 11
    progress = acks.progress("m")
    assert progress == Progress(11, 14, ((11, 12, 1), (13, 14, 1)), "m")
    assert not acks.drained
    acks.ack(11)
    acks.ack(13)
    assert acks.drained
    assert acks.committable() == 14
    assert acks.window == 0


def test_auto_mode_settles_on_the_next_call() -> None:
    acks = ProcessedOffsets(0)
    deliver(acks, [0, 1, 2])
    assert acks.committable() == 0
    assert not acks.drained
    assert acks.progress() == Progress(0, 3, ((0, 3, 1),))
    acks.settle()
    assert acks.committable() == 3
    assert acks.drained
    assert acks.finish() == 3


def test_settle_to_settles_only_below_a_batch_handed_out_later() -> None:
    acks = ProcessedOffsets(0)
    deliver(acks, list(range(20)))  # two batches of ten, the second one read ahead
    acks.settle_to(10)  # the application started the second batch
    assert acks.committable() == 10
    assert not acks.drained
    acks.settle_to(5)  # never back
    assert acks.committable() == 10
    acks.settle_to(99)  # never beyond what was handed out
    assert acks.committable() == 20
    assert acks.drained


def test_take_back_returns_the_position_and_the_unacked() -> None:
    auto = ProcessedOffsets(0)
    deliver(auto, list(range(10)))
    assert auto.take_back(4) == 0
    assert auto.position == 4
    assert auto.finish() == 4  # a clean close counts only what the application got
    manual = ProcessedOffsets(0, manual=True)
    deliver(manual, list(range(10)))
    assert manual.ack(1)
    assert manual.take_back(6) == 4  # 6..9 never reached the application
    assert (manual.position, manual.unacked, manual.committable()) == (6, 5, 0)
    assert manual.take_back(8) == 0  # nothing handed out there
    assert deliver(manual, [6, 7]) == {6: 1, 7: 1}  # handed out again, un-acked again
    assert manual.unacked == 7


def test_inherited_progress_skips_processed_and_counts() -> None:
    inherited = Progress(5, 9, ((5, 6, 1), (7, 8, 2)))
    acks = ProcessedOffsets(5, manual=True, inherited=inherited)
    assert not acks.is_plain(5)
    assert acks.is_plain(9)
    assert deliver(acks, [5, 6, 7, 8, 9]) == {5: 2, 7: 3, 9: 1}
    acks.ack(5)
    assert acks.committable() == 7
    acks.ack(7)
    assert acks.committable() == 9
    # a run that stopped before the inherited frontier keeps what it has not reached
    acks2 = ProcessedOffsets(5, manual=True, inherited=inherited)
    deliver(acks2, [5])
    acks2.ack(5)
    assert acks2.committable() == 7
    assert acks2.progress() == Progress(7, 9, ((7, 8, 2),))


def test_inherited_progress_of_another_offset_is_ignored() -> None:
    acks = ProcessedOffsets(6, inherited=Progress(5, 9, ((5, 6, 1),)))
    assert acks.is_plain(6)


def test_encoding_round_trip_and_plain_metadata() -> None:
    assert encode_progress(Progress(3, 3, (), "hello")) == "hello"
    assert decode_progress(3, "hello") == Progress(3, 3, (), "hello")
    progress = Progress(3, 10, ((3, 4, 1), (6, 8, 2)), "user")
    text = encode_progress(progress)
    assert text.startswith(PROGRESS_PREFIX)
    assert decode_progress(3, text) == progress
    assert decode_progress(4, text) == Progress(4, 4)  # progress of another commit
    assert decode_progress(3, PROGRESS_PREFIX + "{bad") == Progress(3, 3)
    # user metadata that looks like ours is wrapped, not misread
    tricky = Progress(1, 1, (), PROGRESS_PREFIX + "x")
    assert decode_progress(1, encode_progress(tricky)) == tricky
    with pytest.raises(ValueError, match="metadata"):
        encode_progress(Progress(0, 0, (), "x" * (MAX_USER_METADATA_BYTES + 1)))
    with pytest.raises(ValueError, match="pending"):
        encode_progress(Progress(0, 5, ((3, 2, 1),)))


def test_too_many_ranges_are_cut_safely() -> None:
    pending = tuple((i, i + 1, 1) for i in range(0, 4000, 2))
    progress = Progress(0, 4000, pending)
    text = encode_progress(progress)
    assert len(text.encode()) <= MAX_METADATA_BYTES
    back = decode_progress(0, text)
    assert back.frontier < 4000
    assert back.pending == pending[: len(back.pending)]
    # whatever was cut is redelivered (prior count 0), never skipped
    for offset in range(back.frontier, 4000, 2):
        assert back.prior_deliveries(offset) == 0


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.tuples(st.lists(st.integers(0, 11), max_size=12), st.booleans()),
        min_size=1,
        max_size=6,
    ),
    st.booleans(),
)
def test_runs_redeliver_exactly_the_unprocessed(
    runs: list[tuple[list[int], bool]], manual: bool
) -> None:
    """Successive owners of one partition of 12 records, each acking some of what it got
    and handing over gracefully: processed records are never delivered again, unprocessed
    ones always are, and delivery counts are exact."""
    processed: set[int] = set()
    delivered: dict[int, int] = {}
    progress = Progress(0, 0)
    for acked, settle in runs:
        acks = ProcessedOffsets(progress.committed, manual=manual, inherited=progress)
        got = deliver(acks, list(range(progress.committed, 12)))
        for offset, count in got.items():
            assert offset not in processed
            delivered[offset] = delivered.get(offset, 0) + 1
            assert count == delivered[offset]
        for offset in range(progress.committed, 12):
            if offset not in processed:
                assert offset in got
        if manual:
            for offset in acked:
                if offset in got and acks.ack(offset):
                    processed.add(offset)
        elif settle:
            acks.settle()
            processed.update(got)
        committed = acks.committable()
        assert committed == min(set(range(12)) - processed, default=12)
        progress = decode_progress(committed, encode_progress(acks.progress()))
