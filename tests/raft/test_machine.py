"""The state machine applied under Raft: entries, idempotency by op id, snapshots (pure)."""

from __future__ import annotations

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jetsdk.codec.error_codes import ErrorCode
from jetserver.metadata.model import StreamSpec
from jetserver.metadata.ops import CreateStream, DeleteStream, Op
from jetserver.raft.machine import (
    MAX_OP_ID_CHARS,
    MAX_REMEMBERED_OPS,
    Entry,
    EntryDecodeError,
    MachineState,
    apply_entry,
    decode_entry,
    encode_entry,
    machine_from_dict,
    machine_to_dict,
)


def create(name: str, partitions: int = 1, subject: str | None = None) -> CreateStream:
    spec = StreamSpec(name=name, subject=subject or name, partitions=partitions)
    return CreateStream(spec, f"id-{name}", 7, tuple(("s1", "s2") for _ in range(partitions)))


def entry(op_id: str, op: Op) -> bytes:
    return encode_entry(Entry(op_id, op))


def test_entry_round_trip() -> None:
    for op in (create("a", 3), DeleteStream("a")):
        assert decode_entry(encode_entry(Entry("id-1", op))) == Entry("id-1", op)


@pytest.mark.parametrize(
    ("data", "fragment"),
    [
        (b"\xff", "not JSON"),
        (b"[1]", "not a JSON object"),
        (b'{"op": {}}', "string op_id"),
        (b'{"op_id": "x", "op": {"op": "nope"}}', "unknown metadata op"),
        (b'{"op_id": "", "op": {"op": "delete_stream", "name": "a"}}', "1-128"),
        (b'{"op_id": "x", "op": {"op": "create_stream"}}', "invalid entry"),
    ],
)
def test_decode_rejects_bad_entries(data: bytes, fragment: str) -> None:
    with pytest.raises(EntryDecodeError, match=fragment):
        decode_entry(data)


def test_encode_rejects_bad_op_ids() -> None:
    with pytest.raises(ValueError, match="op id"):
        encode_entry(Entry("", DeleteStream("a")))
    with pytest.raises(ValueError, match="op id"):
        encode_entry(Entry("x" * (MAX_OP_ID_CHARS + 1), DeleteStream("a")))


def test_apply_counts_every_entry_and_answers_retries_with_the_original_result() -> None:
    state = MachineState()
    state, first = apply_entry(state, entry("c1", create("a")))
    assert (first.index, first.result.created, first.duplicate) == (1, True, False)
    state, retry = apply_entry(state, entry("c1", create("a")))
    assert retry == first.__class__(1, first.result, duplicate=True)
    assert state.index == 2
    state, deleted = apply_entry(state, entry("d1", DeleteStream("a")))
    assert deleted.result.ok
    assert deleted.result.stream is not None
    assert "a" not in state.metadata.streams
    # A retried delete returns the original success, a new delete of the same name fails.
    state, again = apply_entry(state, entry("d1", DeleteStream("a")))
    assert again.duplicate
    assert again.result == deleted.result
    state, other = apply_entry(state, entry("d2", DeleteStream("a")))
    assert other.result.error_code == ErrorCode.STREAM_NOT_FOUND
    assert state.index == 5


def test_undecodable_entry_consumes_its_index_everywhere_alike() -> None:
    state, outcome = apply_entry(MachineState(), b"garbage")
    assert outcome.index == 1
    assert outcome.result.error_code == ErrorCode.INVALID_ARGUMENT
    assert state.index == 1
    assert not state.metadata.streams
    assert not state.recent


def test_remembered_ids_are_bounded_oldest_first() -> None:
    state = MachineState()
    for i in range(MAX_REMEMBERED_OPS + 2):
        state, _ = apply_entry(state, entry(f"op{i}", DeleteStream(f"s{i}")))
    assert len(state.recent) == MAX_REMEMBERED_OPS
    assert next(iter(state.recent)) == "op2"
    assert "op0" not in state.recent
    # A forgotten id is applied again (documented limit of the de-duplication window).
    state, outcome = apply_entry(state, entry("op0", DeleteStream("s0")))
    assert not outcome.duplicate


def test_snapshot_round_trip_through_orjson() -> None:
    state = MachineState()
    ops: list[Op] = [create("a", 2), create("b"), DeleteStream("a"), DeleteStream("x")]
    for i, op in enumerate(ops):
        state, _ = apply_entry(state, entry(f"op{i}", op))
    doc = orjson.loads(orjson.dumps(machine_to_dict(state)))
    restored = machine_from_dict(doc)
    assert restored == state
    assert list(restored.recent) == list(state.recent)


def test_snapshot_rejects_unknown_format_and_garbage() -> None:
    with pytest.raises(ValueError, match="format"):
        machine_from_dict({"format": 99})
    with pytest.raises(ValueError, match="malformed"):
        machine_from_dict({"format": 1, "metadata": {}})


_ops = st.one_of(
    st.builds(create, st.sampled_from("abc"), st.integers(1, 2), st.sampled_from(["x", "y"])),
    st.builds(DeleteStream, st.sampled_from("abc")),
)
_entries = st.lists(
    st.one_of(
        st.tuples(st.sampled_from([f"id{i}" for i in range(6)]), _ops).map(lambda t: entry(*t)),
        st.just(b"not an entry"),
    ),
    max_size=25,
)


@settings(max_examples=150, deadline=None)
@given(_entries, st.integers(0, 25))
def test_replay_and_snapshot_restore_are_deterministic(entries: list[bytes], cut: int) -> None:
    """Replaying the log, or restoring a snapshot taken anywhere and replaying the rest,
    gives the same states and outcomes."""
    state = MachineState()
    outcomes = []
    for data in entries:
        state, outcome = apply_entry(state, data)
        outcomes.append(outcome)
    cut = min(cut, len(entries))
    prefix = MachineState()
    for data in entries[:cut]:
        prefix, _ = apply_entry(prefix, data)
    restored = machine_from_dict(orjson.loads(orjson.dumps(machine_to_dict(prefix))))
    tail = []
    for data in entries[cut:]:
        restored, outcome = apply_entry(restored, data)
        tail.append(outcome)
    assert restored == state
    assert tail == outcomes[cut:]
    assert state.index == len(entries)


def test_an_op_that_makes_apply_raise_fails_alike_and_the_log_goes_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import jetserver.raft.machine as machine

    def broken(state: object, op: object) -> object:
        raise RuntimeError(f"bug at {id(op):#x}")

    monkeypatch.setattr(machine, "apply", broken)
    state, outcome = apply_entry(MachineState(), entry("x", DeleteStream("a")))
    assert outcome.result.error_code == ErrorCode.UNKNOWN
    assert outcome.result.message == "metadata op failed (RuntimeError)"
    assert state.index == 1
