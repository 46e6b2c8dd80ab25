"""The batched partition operations (ElectLeaders, UpdateIsrs): the same outcome as their
items applied one by one, with the next state built once (pure, the real state machine)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from jetserver.metadata.model import MetadataState, StreamSpec
from jetserver.metadata.ops import (
    CreateStream,
    ElectLeader,
    ElectLeaders,
    UpdateIsr,
    UpdateIsrs,
    apply,
)

SERVERS = ("s1", "s2", "s3")


def _state(streams: int = 3, partitions: int = 4) -> MetadataState:
    state = MetadataState()
    for i in range(streams):
        spec = StreamSpec(name=f"t{i}", subject=f"t{i}", partitions=partitions)
        replicas = tuple(tuple(SERVERS[(p + k) % 3] for k in range(3)) for p in range(partitions))
        state, result = apply(state, CreateStream(spec, f"id{i}", 1, replicas))
        assert result.ok
    return state


_elect = st.builds(
    ElectLeader,
    stream=st.sampled_from(["t0", "t1", "t2", "nope"]),
    partition=st.integers(-1, 4),
    leader=st.sampled_from(SERVERS),
    leader_epoch=st.integers(0, 3),
    stream_id=st.sampled_from([None, "id0", "id1", "other"]),
    keep_isr=st.booleans(),
)
_isr = st.builds(
    UpdateIsr,
    stream=st.sampled_from(["t0", "t1", "t2"]),
    partition=st.integers(0, 3),
    leader=st.sampled_from(SERVERS),
    leader_epoch=st.integers(0, 2),
    isr=st.lists(st.sampled_from(SERVERS), min_size=0, max_size=3).map(tuple),
    partition_epoch=st.sampled_from([None, 0, 1, 2]),
)


@settings(max_examples=100, deadline=None)
@given(
    first=st.lists(_elect, max_size=4),
    elections=st.lists(_elect, max_size=12),
    changes=st.lists(_isr, max_size=12),
)
def test_a_batch_is_its_items_applied_in_order(
    first: list[ElectLeader], elections: list[ElectLeader], changes: list[UpdateIsr]
) -> None:
    state = _state()
    for op in first:  # some partitions moved already
        state, _ = apply(state, op)
    for batch, items in (
        (ElectLeaders(tuple(elections)), elections),
        (UpdateIsrs(tuple(changes)), changes),
    ):
        one_by_one, codes = state, []
        for each in items:
            one_by_one, result = apply(one_by_one, each)
            codes.append((result.error_code, result.message))
        batched, result = apply(state, batch)
        assert result.ok
        assert [(r.error_code, r.message) for r in result.results] == codes
        assert batched.streams == one_by_one.streams
        assert batched.applied == state.applied + 1
        state = batched


def test_a_batch_keeps_what_it_does_not_change() -> None:
    state = _state()
    a = state.streams["t1"].partitions[2]
    new, result = apply(
        state,
        ElectLeaders(
            (
                ElectLeader("t1", 2, a.isr[1], 1, "id1"),
                ElectLeader("t1", 2, a.isr[1], 1, "id1"),  # refused: epoch 1 is taken now
                ElectLeader("t1", 2, a.isr[2], 2, "id1"),  # sees the first one's change
            )
        ),
    )
    assert [r.ok for r in result.results] == [True, False, True]
    assert new.streams["t1"].partitions[2].leader == a.isr[2]
    assert new.streams["t1"].partitions[2].leader_epoch == 2
    assert new.streams["t1"].partitions[2].partition_epoch == 2
    # Only the changed stream and partition are new objects (the reconcile tells changes
    # by identity).
    assert new.streams["t0"] is state.streams["t0"]
    assert new.streams["t2"] is state.streams["t2"]
    assert new.streams["t1"] is not state.streams["t1"]
    for p in (0, 1, 3):
        assert new.streams["t1"].partitions[p] is state.streams["t1"].partitions[p]


def test_a_batch_that_changes_nothing_keeps_the_streams() -> None:
    state = _state()
    new, result = apply(state, ElectLeaders((ElectLeader("t0", 0, "s2", 5, "id0"),)))
    assert not result.results[0].ok
    assert new.streams is state.streams
    assert new.applied == state.applied + 1
