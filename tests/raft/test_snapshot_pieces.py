"""The metadata snapshot's unchanged parts taken from the last snapshot (raft/snapshot_pieces)."""

from __future__ import annotations

import orjson

from jetserver.metadata.model import StreamSpec
from jetserver.metadata.ops import CreateStream, DeleteStream, Op, UpdateIsr, UpdateIsrs
from jetserver.raft.machine import Entry, MachineState, apply_entry, encode_entry, machine_to_dict
from jetserver.raft.snapshot_pieces import SnapshotPieces


def _create(name: str, partitions: int) -> CreateStream:
    spec = StreamSpec(name=name, subject=name, partitions=partitions, replication_factor=3)
    reps = tuple(("s1", "s2", "s3") for _ in range(partitions))
    return CreateStream(spec, f"id-{name}", 7, reps)


def _apply(state: MachineState, op_id: str, op: Op) -> MachineState:
    state, outcome = apply_entry(state, encode_entry(Entry(op_id, op)))
    assert outcome.result.ok, outcome.result
    return state


def _snapshot(pieces: SnapshotPieces, state: MachineState) -> bytes:
    return orjson.dumps({"format": 1, "machine": pieces.machine(state)})


def _plain(state: MachineState) -> bytes:
    return orjson.dumps({"format": 1, "machine": machine_to_dict(state)})


def test_a_snapshot_encodes_only_what_changed_since_the_last_and_the_same_bytes() -> None:
    state = MachineState()
    for i in range(4):
        state = _apply(state, f"c{i}", _create(f"s{i}", 3))
    pieces = SnapshotPieces()
    assert _snapshot(pieces, state) == _plain(state)
    assert pieces.encoded == 4 + 4  # four streams, four remembered creates
    assert _snapshot(pieces, state) == _plain(state)
    assert pieces.encoded == 8  # nothing new
    # Shrink one partition's ISR: its stream is a new object, and one remembered op more.
    change = UpdateIsr("s2", 1, "s1", 0, ("s1", "s2"))
    state = _apply(state, "isr-1", UpdateIsrs((change,)))
    assert _snapshot(pieces, state) == _plain(state)
    assert pieces.encoded == 8 + 2
    # A deleted stream and a forgotten op are not kept for the next snapshot.
    state = _apply(state, "d0", DeleteStream("s0"))
    assert _snapshot(pieces, state) == _plain(state)
    assert pieces.encoded == 10 + 1  # the delete's result; s0 gone
    assert len(pieces._streams) == 3
    assert len(pieces._results) == len(state.recent)


def test_a_remembered_batch_of_codes_is_written_as_codes() -> None:
    state = MachineState()
    state = _apply(state, "c", _create("s", 4))
    changes = tuple(UpdateIsr("s", p, "s1", 0, ("s1", "s2")) for p in range(4))
    state = _apply(state, "isr", UpdateIsrs(changes))
    doc = orjson.loads(_snapshot(SnapshotPieces(), state))
    remembered = {op_id: result for op_id, _index, result in doc["machine"]["recent"]}
    assert remembered["isr"]["codes"] == [0, 0, 0, 0]
    assert "results" not in remembered["isr"]
