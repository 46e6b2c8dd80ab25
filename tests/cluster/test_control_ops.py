"""Metadata operations of the control plane (pure): RegisterServer, UpdateIsr, ElectLeader."""

from __future__ import annotations

import attrs
import orjson
import pytest

from jetsdk.codec.error_codes import ErrorCode
from jetserver.metadata.model import MetadataState, RegisteredServer, StreamSpec
from jetserver.metadata.op_codec import op_from_dict
from jetserver.metadata.ops import (
    CreateStream,
    DeleteStream,
    ElectLeader,
    ElectLeaders,
    Op,
    RegisterServer,
    UpdateIsr,
    UpdateIsrs,
    apply,
)
from jetserver.raft.machine import (
    Entry,
    MachineState,
    apply_entry,
    encode_entry,
    machine_from_dict,
    machine_to_dict,
)

R3 = ("s1", "s2", "s3")


def state_with_stream(replicas: tuple[str, ...] = R3) -> MetadataState:
    spec = StreamSpec(name="orders", subject="orders", partitions=2, replication_factor=3)
    op = CreateStream(spec, "id1", 5, (replicas, replicas[1:] + replicas[:1]))
    state, result = apply(MetadataState(), op)
    assert result.ok
    return state


def part(state: MetadataState, p: int = 0) -> tuple[str, tuple[str, ...], int]:
    a = state.streams["orders"].partitions[p]
    return a.leader, a.isr, a.leader_epoch


@pytest.mark.parametrize(
    "op",
    [
        RegisterServer("s1", "127.0.0.1:1", "127.0.0.1:2"),
        RegisterServer("s1", "127.0.0.1:1", "127.0.0.1:2", "run-7"),
        RegisterServer("s1", "127.0.0.1:1", "127.0.0.1:2", "run-8", clean=True),
        UpdateIsr("orders", 0, "s1", 3, ("s1", "s2"), "id1"),
        UpdateIsr("orders", 1, "s2", 0, ("s2",)),
        ElectLeader("orders", 0, "s2", 4, "id1"),
        ElectLeader("orders", 0, "s2", 4),
        ElectLeader("orders", 0, "s2", 4, "id1", keep_isr=True),
        ElectLeaders((ElectLeader("orders", 0, "s2", 4, "id1"), ElectLeader("orders", 1, "s3", 2))),
        UpdateIsrs(
            (
                UpdateIsr("orders", 0, "s1", 3, ("s1",), "id1", 2),
                UpdateIsr("o", 1, "s2", 0, ("s2",)),
            )
        ),
    ],
)
def test_ops_round_trip_through_json(op: Op) -> None:
    assert op_from_dict(orjson.loads(orjson.dumps(op.to_dict()))) == op


def test_register_server_is_idempotent_and_updates_addresses() -> None:
    state, result = apply(MetadataState(), RegisterServer("s1", "h:1", "h:2"))
    assert result.ok
    assert state.servers == {"s1": RegisteredServer("s1", "h:1", "h:2")}
    again, result = apply(state, RegisterServer("s1", "h:1", "h:2"))
    assert result.ok
    assert again.servers is state.servers
    assert again.applied == state.applied + 1
    moved, _ = apply(again, RegisterServer("s1", "h:9", "h:2"))
    assert moved.client_addresses() == {"s1": "h:9"}


def test_streams_and_servers_survive_each_other() -> None:
    state, _ = apply(MetadataState(), RegisterServer("s1", "h:1", "h:2"))
    spec = StreamSpec(name="a", subject="a")
    state, _ = apply(state, CreateStream(spec, "i", 1, (("s1",),)))
    state, _ = apply(state, DeleteStream("a"))
    assert "s1" in state.servers
    restored = MetadataState.from_dict(orjson.loads(orjson.dumps(state.to_dict())))
    assert restored == state


def test_servers_are_not_written_when_there_are_none() -> None:
    assert "servers" not in MetadataState().to_dict()


def test_update_isr_by_the_leader_at_its_epoch() -> None:
    state = state_with_stream()
    state, result = apply(state, UpdateIsr("orders", 0, "s1", 0, ("s1", "s3"), "id1"))
    assert result.ok
    assert part(state) == ("s1", ("s1", "s3"), 0)
    assert result.stream is not None
    assert result.stream.partitions[0].isr == ("s1", "s3")
    same, result = apply(state, UpdateIsr("orders", 0, "s1", 0, ("s1", "s3")))
    assert result.ok
    assert same.streams is state.streams


@pytest.mark.parametrize(
    ("op", "code"),
    [
        (UpdateIsr("orders", 0, "s2", 0, ("s2",)), ErrorCode.NOT_LEADER),
        (UpdateIsr("orders", 0, "s1", 1, ("s1",)), ErrorCode.NOT_LEADER),
        (UpdateIsr("orders", 0, "s1", 0, ("s2", "s3")), ErrorCode.INVALID_ARGUMENT),
        (UpdateIsr("orders", 0, "s1", 0, ("s1", "s9")), ErrorCode.INVALID_ARGUMENT),
        (UpdateIsr("orders", 0, "s1", 0, ("s1", "s1")), ErrorCode.INVALID_ARGUMENT),
        (UpdateIsr("orders", 0, "s1", 0, ()), ErrorCode.INVALID_ARGUMENT),
        (UpdateIsr("orders", 0, "s1", 0, ("s1",), "old-id"), ErrorCode.STREAM_NOT_FOUND),
        (UpdateIsr("nope", 0, "s1", 0, ("s1",)), ErrorCode.STREAM_NOT_FOUND),
        (UpdateIsr("orders", 7, "s1", 0, ("s1",)), ErrorCode.PARTITION_NOT_FOUND),
    ],
)
def test_update_isr_refusals_leave_the_state(op: UpdateIsr, code: ErrorCode) -> None:
    state = state_with_stream()
    after, result = apply(state, op)
    assert result.error_code == code
    assert after.streams is state.streams
    assert after.applied == state.applied + 1


def test_elect_leader_moves_leadership_bumps_the_epoch_and_drops_the_old_leader() -> None:
    state = state_with_stream()
    state, result = apply(state, ElectLeader("orders", 0, "s2", 1, "id1"))
    assert result.ok
    assert part(state) == ("s2", ("s2", "s3"), 1)
    assert state.streams["orders"].partitions[0].replicas == R3  # preferred order kept
    assert part(state, 1) == ("s2", ("s2", "s3", "s1"), 0)  # other partitions untouched
    # The deposed leader cannot change the ISR any more; the new one can.
    _, refused = apply(state, UpdateIsr("orders", 0, "s1", 0, ("s1", "s2", "s3")))
    assert refused.error_code == ErrorCode.NOT_LEADER
    state, result = apply(state, UpdateIsr("orders", 0, "s2", 1, ("s2", "s3", "s1")))
    assert result.ok
    assert part(state) == ("s2", ("s2", "s3", "s1"), 1)


@pytest.mark.parametrize(
    ("op", "code"),
    [
        (ElectLeader("orders", 0, "s2", 2), ErrorCode.NOT_LEADER),
        (ElectLeader("orders", 0, "s2", 0), ErrorCode.NOT_LEADER),
        (ElectLeader("orders", 0, "s1", 2), ErrorCode.NOT_LEADER),  # a renewal: epoch + 1
        (ElectLeader("orders", 0, "s9", 1), ErrorCode.INVALID_ARGUMENT),
        (ElectLeader("orders", 0, "s2", 1, "old-id"), ErrorCode.STREAM_NOT_FOUND),
    ],
)
def test_elect_leader_refusals(op: ElectLeader, code: ErrorCode) -> None:
    state = state_with_stream()
    after, result = apply(state, op)
    assert result.error_code == code
    assert after.streams is state.streams


def test_elect_leader_of_the_current_leader_renews_its_leadership_in_the_next_epoch() -> None:
    # A leader that gave up its epoch after a failed fsync leads on in the next one, with
    # the same ISR (its followers then truncate what its cut took back).
    state = state_with_stream()
    state, result = apply(state, ElectLeader("orders", 0, "s1", 1, "id1"))
    assert result.ok
    assert part(state) == ("s1", ("s1", "s2", "s3"), 1)
    _, stale = apply(state, UpdateIsr("orders", 0, "s1", 0, ("s1", "s2")))
    assert stale.error_code == ErrorCode.NOT_LEADER  # the old epoch is over
    state, result = apply(state, UpdateIsr("orders", 0, "s1", 1, ("s1", "s2")))
    assert result.ok


def test_elect_leader_only_from_the_isr() -> None:
    state = state_with_stream()
    state, _ = apply(state, UpdateIsr("orders", 0, "s1", 0, ("s1", "s3")))
    _, result = apply(state, ElectLeader("orders", 0, "s2", 1))
    assert result.error_code == ErrorCode.INVALID_ARGUMENT
    state, result = apply(state, ElectLeader("orders", 0, "s3", 1))
    assert part(state) == ("s3", ("s3",), 1)


def test_a_repeated_election_entry_is_applied_once() -> None:
    machine = state = MachineState(metadata=state_with_stream())
    entry = encode_entry(Entry("elect-1", ElectLeader("orders", 0, "s2", 1)))
    machine, first = apply_entry(state, entry)
    machine, second = apply_entry(machine, entry)
    assert first.result.ok
    assert second.duplicate
    # Remembered without the stream (codes and messages are what a proposer reads).
    assert second.result == attrs.evolve(first.result, stream=None)
    assert first.result.stream is not None
    assert machine.metadata.streams["orders"].partitions[0].leader_epoch == 1
    restored = machine_from_dict(orjson.loads(orjson.dumps(machine_to_dict(machine))))
    assert restored == machine


def test_elect_leaders_applies_each_election_on_its_own() -> None:
    state = state_with_stream()  # partition 0 led by s1, partition 1 by s2
    op = ElectLeaders(
        (
            ElectLeader("orders", 0, "s2", 1, "id1"),
            ElectLeader("orders", 1, "s3", 7, "id1"),  # a stale epoch: refused alone
            ElectLeader("nope", 0, "s2", 1),  # an unknown stream: refused alone
        )
    )
    after, result = apply(state, op)
    assert result.ok
    assert [r.error_code for r in result.results] == [
        ErrorCode.NONE,
        ErrorCode.NOT_LEADER,
        ErrorCode.STREAM_NOT_FOUND,
    ]
    assert part(after, 0) == ("s2", ("s2", "s3"), 1)
    assert part(after, 1) == part(state, 1)
    assert after.applied == state.applied + 1  # one entry
    # Through the Raft machine, and remembered with every result's code (not its message:
    # the snapshot keeps a list of codes per remembered batch).
    entry = encode_entry(Entry("elect-many", op))
    machine, first = apply_entry(MachineState(metadata=state), entry)
    machine, second = apply_entry(machine, entry)
    assert second.duplicate
    assert [r.error_code for r in second.result.results] == [
        r.error_code for r in first.result.results
    ]
    assert all(r.stream is None for r in second.result.results)
    restored = machine_from_dict(orjson.loads(orjson.dumps(machine_to_dict(machine))))
    assert restored == machine
    assert [r.error_code for r in restored.recent["elect-many"].result.results] == [
        r.error_code for r in result.results
    ]


def test_remembered_results_keep_a_stream_only_for_create_and_delete() -> None:
    spec = StreamSpec(name="wide", subject="wide", partitions=100, replication_factor=3)
    machine = MachineState()
    create = CreateStream(spec, "id9", 1, (R3,) * 100)
    machine, created = apply_entry(machine, encode_entry(Entry("create", create)))
    changes = UpdateIsrs(tuple(UpdateIsr("wide", p, "s1", 0, ("s1", "s2")) for p in range(100)))
    machine, changed = apply_entry(machine, encode_entry(Entry("isr", changes)))
    assert changed.result.results[0].stream is not None  # the proposer's own answer has it
    assert machine.recent["create"].result == created.result  # a retried create needs it
    remembered = machine.recent["isr"].result
    assert remembered.stream is None
    assert all(r.ok and r.stream is None for r in remembered.results)
    # The snapshot holds the stream once (in the metadata), not once per remembered op.
    snapshot = orjson.dumps(machine_to_dict(machine))
    assert len(snapshot) < 3 * len(orjson.dumps(machine.metadata.to_dict()))

    # Of a batch, each change's code only (refusals included), written as a list of ints.
    refused = UpdateIsrs(tuple(UpdateIsr("wide", p, "s9", 0, ("s9",)) for p in range(100)))
    machine, answer = apply_entry(machine, encode_entry(Entry("isr2", refused)))
    assert answer.result.results[0].message  # the proposer's own answer says why
    remembered = machine.recent["isr2"].result
    assert [r.error_code for r in remembered.results] == [ErrorCode.NOT_LEADER] * 100
    assert all(r.message == "" for r in remembered.results)
    encoded = machine_to_dict(machine)
    entry = next(e for e in encoded["recent"] if e[0] == "isr2")
    assert entry[2]["codes"] == [int(ErrorCode.NOT_LEADER)] * 100
    assert len(orjson.dumps(entry)) < 500
    assert machine_from_dict(orjson.loads(orjson.dumps(encoded))) == machine


def test_update_isrs_applies_each_change_on_its_own() -> None:
    state = state_with_stream()  # partition 0 led by s1, partition 1 by s2
    op = UpdateIsrs(
        (
            UpdateIsr("orders", 0, "s1", 0, ("s1", "s2"), "id1", 0),
            UpdateIsr("orders", 1, "s3", 0, ("s3",)),  # not the leader: refused alone
            UpdateIsr("orders", 1, "s2", 0, ("s2", "s1"), partition_epoch=0),
        )
    )
    after, result = apply(state, op)
    assert result.ok
    assert [r.error_code for r in result.results] == [
        ErrorCode.NONE,
        ErrorCode.NOT_LEADER,
        ErrorCode.NONE,
    ]
    assert part(after, 0) == ("s1", ("s1", "s2"), 0)
    assert part(after, 1) == ("s2", ("s2", "s1"), 0)
    assert after.applied == state.applied + 1  # one entry
    # Applied again (a replayed entry), each change's compare-and-set refuses it.
    again, result = apply(after, op)
    assert [r.error_code for r in result.results] == [ErrorCode.NOT_LEADER] * 3
    assert again.streams == after.streams


def test_create_refuses_a_server_twice_in_one_partition() -> None:
    spec = StreamSpec(name="a", subject="a", replication_factor=2)
    _, result = apply(MetadataState(), CreateStream(spec, "i", 1, (("s1", "s1"),)))
    assert result.error_code == ErrorCode.INVALID_ARGUMENT


def test_a_restarted_server_leaves_the_isrs_it_shares_and_its_leaderships() -> None:
    registered, _ = apply(MetadataState(), RegisterServer("s1", "h:1", "r:1", "run-1"))
    state = state_with_stream()  # p0: leader s1 (s1, s2, s3); p1: leader s2 (s2, s3, s1)
    state = attrs.evolve(state, servers=registered.servers)
    state, result = apply(state, RegisterServer("s1", "h:1", "r:1", "run-2"))
    assert result.ok
    assert result.message == (
        "restarted: left 2 ISR(s), 1 leadership(s) moved, 0 kept in a new epoch"
    )
    assert part(state, 0) == ("s2", ("s2", "s3"), 1)
    assert part(state, 1) == ("s2", ("s2", "s3"), 0)
    assert state.servers["s1"].incarnation == "run-2"
    # The same registration again (a retry) changes nothing.
    again, result = apply(state, RegisterServer("s1", "h:1", "r:1", "run-2"))
    assert again.streams is state.streams
    assert result.message == ""
    # An address update without an incarnation is not a restart.
    moved, _ = apply(state, RegisterServer("s2", "h:9", "r:2"))
    assert part(moved, 0) == ("s2", ("s2", "s3"), 1)


def test_a_restarted_server_alone_in_an_isr_keeps_it_in_a_new_epoch() -> None:
    state = state_with_stream()
    state, _ = apply(state, UpdateIsr("orders", 0, "s1", 0, ("s1",)))
    state, _ = apply(state, RegisterServer("s1", "h:1", "r:1", "run-1"))
    assert part(state, 0) == ("s1", ("s1",), 1)  # a first registration is a (re)start too
    state, _ = apply(state, RegisterServer("s1", "h:1", "r:1", "run-2"))
    assert part(state, 0) == ("s1", ("s1",), 2)


def test_the_next_leader_after_a_restart_follows_replica_order() -> None:
    state = state_with_stream()
    state, _ = apply(state, UpdateIsr("orders", 0, "s1", 0, ("s1", "s3")))
    state, _ = apply(state, RegisterServer("s1", "h:1", "r:1", "a"))
    state, _ = apply(state, RegisterServer("s1", "h:1", "r:1", "b"))
    assert part(state, 0) == ("s3", ("s3",), 1)


def test_a_server_restarted_after_a_clean_stop_keeps_its_places() -> None:
    registered, _ = apply(MetadataState(), RegisterServer("s1", "h:1", "r:1", "run-1"))
    state = attrs.evolve(state_with_stream(), servers=registered.servers)
    state, result = apply(state, RegisterServer("s1", "h:1", "r:1", "run-2", clean=True))
    assert result.message == ""
    assert part(state, 0) == ("s1", R3, 0)
    assert state.servers["s1"].incarnation == "run-2"
