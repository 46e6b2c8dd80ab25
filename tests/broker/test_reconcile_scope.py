"""jetserver.broker.reconcile_scope: a reconcile examines only the partitions that changed,
with the outcome of a scan of every partition."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import anyio
import attrs
import pytest

from jetserver.broker.reconcile_scope import Key, ReconcilePlan, ReconcileScope
from jetserver.broker.running import RunningPartition, Wanted
from jetserver.broker.stream_files import stream_dir
from jetserver.broker.streams import StreamManager
from jetserver.config.server import ServerConfig, ServerSection
from jetserver.infra.lazy_event import LazyEvent
from jetserver.metadata import ops
from jetserver.metadata.model import MetadataState, PartitionAssignment, StreamMeta, StreamSpec
from jetserver.metadata.store import MetadataStore

ME = "s1"
SERVERS = ("s1", "s2", "s3")


@attrs.define(eq=False)
class _Opened:
    """What a reconcile reads and writes of a running partition."""

    stream_id: str
    wanted: Wanted | None = None
    wake: LazyEvent = attrs.field(factory=LazyEvent)


class _Server:
    """StreamManager.reconcile's steps over a plan, without logs ("open" may be refused)."""

    def __init__(self) -> None:
        self.scope = ReconcileScope(ME)
        self.running: dict[Key, _Opened] = {}
        self.cannot_open: set[Key] = set()

    def reconcile(self, state: MetadataState, *, collect: bool = False) -> ReconcilePlan:
        running = cast(dict[Key, RunningPartition], self.running)
        plan = self.scope.plan(state, collect=collect)
        for key, _opened in plan.stale(running):
            del self.running[key]
        for meta, a in plan.to_open(running):
            key = (meta.name, a.partition)
            if key not in self.cannot_open:
                self.running[key] = _Opened(meta.stream_id)
        plan.retarget(running)
        self.scope.done(plan, running)
        return plan


def _full_scan(state: MetadataState, cannot_open: set[Key]) -> dict[Key, tuple[str, Wanted]]:
    """Every partition ``ME`` holds a replica of: its stream id and target (the old scan)."""
    addresses = state.client_addresses()
    out: dict[Key, tuple[str, Wanted]] = {}
    for meta in state.streams.values():
        for a in meta.partitions:
            key = (meta.name, a.partition)
            if ME in a.replicas and key not in cannot_open:
                target = (a, tuple((r, addresses.get(r, "")) for r in a.replicas))
                out[key] = (meta.stream_id, target)
    return out


def _apply(state: MetadataState, op: ops.Op) -> MetadataState:
    new, result = ops.apply(state, op)
    assert result.ok, result.message
    for each in result.results:
        assert each.ok, each.message
    return new


def _create(state: MetadataState, name: str, partitions: int, stream_id: str) -> MetadataState:
    replicas = tuple(
        tuple(SERVERS[(p + i) % 3] for i in range(2)) for p in range(partitions)
    )  # RF 2 over 3 servers: s1 holds some partitions, not all
    spec = StreamSpec(name=name, subject=name, partitions=partitions, replication_factor=2)
    return _apply(state, ops.CreateStream(spec, stream_id, 1, replicas))


def _move(state: MetadataState, name: str, p: int, replicas: tuple[str, ...]) -> MetadataState:
    """Partition ``p`` of ``name`` held by ``replicas`` (a reassignment, made by hand)."""
    meta = state.streams[name]
    parts = list(meta.partitions)
    parts[p] = parts[p].changed(replicas=replicas, isr=replicas, leader=replicas[0])
    streams = dict(state.streams)
    streams[name] = attrs.evolve(meta, partitions=tuple(parts))
    return attrs.evolve(state, streams=streams)


def _steps() -> Iterator[tuple[str, MetadataState, set[Key]]]:
    """(what changed, the state, the partitions that cannot open)."""
    state = MetadataState()
    for s in SERVERS:
        state = _apply(state, ops.RegisterServer(s, f"127.0.0.1:{s[1]}000", f"r{s}", "i1"))
    yield "servers registered", state, set()
    state = _create(state, "a", 6, "a1")
    yield "stream a created", state, set()
    state = _create(state, "b", 4, "b1")
    yield "stream b created, b/0 cannot open", state, {("b", 0)}
    yield "nothing changed, b/0 opens now", state, set()
    a0 = state.streams["a"].partitions[0]
    elect = ops.ElectLeader("a", 0, a0.replicas[1], a0.leader_epoch + 1)
    state = _apply(state, ops.ElectLeaders((elect,)))
    yield "a/0 elected another leader", state, set()
    a0 = state.streams["a"].partitions[0]
    state = _apply(state, ops.UpdateIsr("a", 0, a0.leader, a0.leader_epoch, a0.replicas))
    yield "a/0 ISR grew", state, set()
    older = state
    state = _move(state, "b", 0, ("s2", "s3"))
    yield "b/0 moved away from s1", state, set()
    state = _move(state, "b", 1, ("s2", "s1"))
    yield "b/1 moved to s1", state, set()
    state = _move(state, "a", 2, ("s2", "s3", "s1"))
    yield "a/2 gained a replica on s1", state, set()
    state = _move(state, "a", 2, ("s2", "s3"))
    yield "a/2 lost it", state, set()
    yield "an older state again (a replay)", older, set()
    yield "the newer one", state, set()
    state = _apply(state, ops.DeleteStream("a"))
    yield "stream a deleted", state, set()
    state = _create(state, "a", 3, "a2")
    yield "stream a re-created (a new id, fewer partitions)", state, set()
    state = _apply(state, ops.RegisterServer("s2", "127.0.0.1:2001", "rs2", "i1"))
    yield "s2's client address changed", state, set()
    state = _apply(state, ops.DeleteStream("b"))
    state = _create(state, "b", 4, "b2")
    yield "stream b re-created with the same partitions", state, set()


def test_every_step_ends_as_a_full_scan_does() -> None:
    server = _Server()
    for collect in (False, False, True):  # the sequence again from a server with replicas
        for what, state, cannot_open in _steps():
            before = dict(server.running)
            server.cannot_open = cannot_open
            server.reconcile(state, collect=collect)
            got = {k: (r.stream_id, r.wanted) for k, r in server.running.items()}
            assert got == _full_scan(state, cannot_open), what
            for key, opened in server.running.items():  # kept unless its stream changed
                was = before.get(key)
                if was is not None and was.stream_id == opened.stream_id:
                    assert was is opened, (what, key)


def test_the_data_of_gone_streams_is_looked_for_only_when_a_stream_went() -> None:
    server = _Server()
    collected = []
    for what, state, cannot_open in _steps():
        server.cannot_open = cannot_open
        if server.reconcile(state, collect=True).collect:
            collected.append(what)
    assert collected == [
        "servers registered",  # the first: a full scan
        "stream a deleted",
        "s2's client address changed",  # a full scan
        "stream b re-created with the same partitions",
    ]


def test_a_change_to_one_stream_examines_its_partitions_only() -> None:
    server = _Server()
    state = MetadataState()
    for s in SERVERS:
        state = _apply(state, ops.RegisterServer(s, f"127.0.0.1:{s[1]}000", f"r{s}", "i1"))
    for i in range(20):
        state = _create(state, f"s{i}", 50, f"id{i}")
    server.reconcile(state)
    start = server.scope.examined
    a = state.streams["s7"].partitions[3]
    state = _apply(state, ops.ElectLeader("s7", 3, a.replicas[1], a.leader_epoch + 1))
    server.reconcile(state)
    assert server.scope.examined - start == 1
    assert server.running[("s7", 3)].wanted == _full_scan(state, set())[("s7", 3)][1]


class _CountedTuple(tuple[PartitionAssignment, ...]):
    """The assignments of a stream, counting how often they are read."""

    reads = 0

    def __iter__(self) -> Iterator[PartitionAssignment]:
        _CountedTuple.reads += 1
        return super().__iter__()

    def __getitem__(self, i: Any) -> Any:
        _CountedTuple.reads += 1
        return super().__getitem__(i)


@pytest.mark.anyio
async def test_the_stream_manager_does_not_read_the_streams_that_did_not_change(
    tmp_path: Path,
) -> None:
    """On a real StreamManager: after one stream changed, the assignments of the others
    are not read (the old reconcile read every assignment at every change). None is held
    here (this server is "s9"), so nothing opens."""
    config = ServerConfig(server=ServerSection(id="s9", data_dir=str(tmp_path)))
    manager = StreamManager(config, MetadataStore(tmp_path / "metadata.json"), cast(Any, None))
    state = MetadataState()
    for i in range(5):
        state = _create(state, f"s{i}", 10, f"id{i}")
    streams: dict[str, StreamMeta] = {  # s2 changes below: its assignments are read
        n: m if n == "s2" else attrs.evolve(m, partitions=_CountedTuple(m.partitions))
        for n, m in state.streams.items()
    }
    state = attrs.evolve(state, streams=streams)
    await manager.reconcile(state, collect=False)
    a = state.streams["s2"].partitions[0]
    changed = _apply(state, ops.ElectLeader("s2", 0, a.replicas[1], a.leader_epoch + 1))
    _CountedTuple.reads = 0
    await manager.reconcile(changed, collect=False)
    assert _CountedTuple.reads == 0


@pytest.mark.anyio
async def test_a_reconcile_runs_in_its_callers_step(tmp_path: Path) -> None:
    """The manager's lock is taken without a pass of the event loop when it is free: a
    failover's reconcile (its retarget hands out the role changes) waited a whole pass of a
    survivor's busy loop there. A task made ready before the reconcile has not run when it
    returns (nothing to open here: this server, "s9", holds no replica)."""
    config = ServerConfig(server=ServerSection(id="s9", data_dir=str(tmp_path)))
    manager = StreamManager(config, MetadataStore(tmp_path / "metadata.json"), cast(Any, None))
    state = _create(MetadataState(), "a", 3, "a1")
    ran: list[str] = []

    async def woken() -> None:
        ran.append("woken")

    async with anyio.create_task_group() as tg:
        tg.start_soon(woken)
        await manager.reconcile(state, collect=False)
        assert ran == []
    assert ran == ["woken"]


@pytest.mark.anyio
async def test_the_stream_manager_removes_the_data_of_a_deleted_stream(tmp_path: Path) -> None:
    config = ServerConfig(server=ServerSection(id="s9", data_dir=str(tmp_path)))
    manager = StreamManager(config, MetadataStore(tmp_path / "metadata.json"), cast(Any, None))
    state = _create(_create(MetadataState(), "a", 3, "a1"), "b", 3, "b1")
    dirs = {n: stream_dir(tmp_path, m) for n, m in state.streams.items()}
    for d in dirs.values():
        d.mkdir(parents=True)
    await manager.reconcile(state, collect=False)  # a replay: not known current yet
    state = _apply(state, ops.DeleteStream("a"))
    await manager.reconcile(state, collect=False)
    assert dirs["a"].is_dir()
    await manager.reconcile(state, collect=True)
    assert not dirs["a"].exists()
    assert dirs["b"].is_dir()
    state = _apply(
        _create(_apply(state, ops.DeleteStream("b")), "b", 3, "b2"), ops.DeleteStream("b")
    )
    await manager.reconcile(state, collect=True)
    assert not dirs["b"].exists()
