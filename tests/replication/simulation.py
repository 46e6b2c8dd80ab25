"""A deterministic, seeded simulation of one partition's ISR replication (issue 4 item 8,
issue 10 item 3).

N replicas of one partition, the metadata controller and a producer exchange messages over
a simulated network (delay, loss, partitions) under an injected virtual clock, with
crashes (a process crash keeps what was written; a power loss also drops a random part of
what was not fsynced), pauses (SIGSTOP), graceful stops (one or two at once: handoff, then
LeaveIsr, planned from the stopping node's own view), failed fsyncs (the unsynced records
dropped) and restarts that register again (an unclean one leaves the ISR).

Nothing of the replica or the metadata is re-implemented here: each replica runs the
server's :class:`~jetserver.replication.core.ReplicaCore` (roles, leader state, HW, ALL
acks, ISR proposals, the cut after a failed fsync; see :mod:`.sim_replica`), and the
controller changes a real :class:`~jetserver.metadata.model.MetadataState` only through
:func:`jetserver.metadata.ops.apply`, electing with the server's
:func:`~jetserver.cluster.elections.choose_leader`. :mod:`invariants` checks every
property as the run goes. A scenario can also be scripted (``SimConfig.script``): the
regression scenarios of issue 10 are.

Same seed, same run: every choice comes from one ``random.Random(seed)``, events are
ordered by (time, sequence number).
"""

from __future__ import annotations

import heapq
import random
from collections.abc import Callable
from typing import Any

import attrs

from jetserver.cluster.elections import choose_leader
from jetserver.metadata.model import MetadataState, PartitionAssignment, StreamSpec
from jetserver.metadata.ops import (
    CreateStream,
    ElectLeader,
    Op,
    RegisterServer,
    UpdateIsr,
    apply,
)

from .invariants import Checker
from .sim_model import (
    CLIENT,
    CTL,
    STREAM,
    IsrReply,
    Meta,
    Produce,
    ProduceReply,
    Propose,
    ProposeIsr,
    Registered,
    Silent,
    SimConfig,
    Step,
)
from .sim_replica import Node

__all__ = ["Client", "Controller", "Node", "Sim", "SimConfig", "Step", "run_seed"]

# ------------------------------------------------------------------------ the world


@attrs.define(eq=False)
class Sim:
    """The event loop, network and fault injector; owns the nodes, controller and client."""

    seed: int
    cfg: SimConfig
    rng: random.Random = attrs.field(init=False)
    now: float = 0.0
    _queue: list[tuple[float, int, Callable[[], None]]] = attrs.field(factory=list)
    _seq: int = 0
    cut: set[frozenset[str]] = attrs.field(factory=set)
    checker: Checker = attrs.field(factory=Checker)
    nodes: dict[str, Node] = attrs.field(factory=dict)
    ctl: Controller = attrs.field(init=False)
    client: Client = attrs.field(init=False)
    faults: list[str] = attrs.field(factory=list)
    events: int = 0

    def __attrs_post_init__(self) -> None:
        self.rng = random.Random(self.seed)
        names = tuple(f"n{i}" for i in range(self.cfg.replicas))
        for name in names:
            self.nodes[name] = Node(name, self)
        self.ctl = Controller(self, names)
        self.client = Client(self)

    # ---------------------------------------------------------------- scheduling

    def at(self, when: float, fn: Callable[[], None]) -> None:
        self._seq += 1
        heapq.heappush(self._queue, (when, self._seq, fn))

    def after(self, delay: float, fn: Callable[[], None]) -> None:
        self.at(self.now + delay, fn)

    def run_until(self, end: float) -> None:
        while self._queue and self._queue[0][0] <= end:
            when, _, fn = heapq.heappop(self._queue)
            self.now = when
            self.events += 1
            fn()
        self.now = end

    # ---------------------------------------------------------------- network

    def reachable(self, a: str, b: str) -> bool:
        return frozenset((a, b)) not in self.cut

    def send(self, src: str, dst: str, msg: Any) -> None:
        if not self.reachable(src, dst) or self.rng.random() < self.cfg.loss:
            return
        target = self.nodes.get(dst)
        incarnation = target.incarnation if target is not None else 0
        delay = self.rng.uniform(self.cfg.delay_min_s, self.cfg.delay_max_s)
        if self.rng.random() < 0.01:
            delay *= 20  # a rare long delay: reordering
        self.after(delay, lambda: self._deliver(src, dst, msg, incarnation))

    def _deliver(self, src: str, dst: str, msg: Any, incarnation: int) -> None:
        if not self.reachable(src, dst):
            return  # cut while in flight
        if dst == CTL:
            self.ctl.receive(msg)
        elif dst == CLIENT:
            self.client.receive(msg)
        else:
            node = self.nodes[dst]
            if node.alive and node.incarnation == incarnation:
                node.deliver(msg)

    # ---------------------------------------------------------------- faults

    def _fault(self) -> None:
        if self.now >= self.cfg.duration_s:
            return
        names = list(self.nodes)
        victim = self.rng.choice(names)
        node = self.nodes[victim]
        kinds = ["crash", "partition", "pause", "isolate_ctl"]
        if self.cfg.stops:
            kinds += ["stop", "two_stops"]
        kind = self.rng.choice(kinds)
        length = self.rng.uniform(0.1, 2.0)
        if kind == "crash" and node.alive:
            power = self.cfg.power_loss and self.rng.random() < 0.5
            self.faults.append(f"{self.now:.3f} crash {victim} power_loss={power} {length:.2f}s")
            node.crash(power)
            self.after(length, node.restart)
        elif kind == "partition":
            others = [n for n in [*names, CTL, CLIENT] if n != victim]
            cut = {frozenset((victim, o)) for o in others if self.rng.random() < 0.7}
            self.faults.append(f"{self.now:.3f} partition {victim} {length:.2f}s")
            self.cut |= cut
            self.after(length, lambda: self.cut.difference_update(cut))
        elif kind == "pause" and node.alive:
            self.faults.append(f"{self.now:.3f} pause {victim} {length:.2f}s")
            node.frozen_until = max(node.frozen_until, self.now + length)
        elif kind == "stop" and node.alive:
            self.faults.append(f"{self.now:.3f} stop {victim} {length:.2f}s")
            node.stop(length)
        elif kind == "two_stops":
            pair = self.rng.sample(names, 2)
            self.faults.append(f"{self.now:.3f} stop {pair[0]} and {pair[1]} {length:.2f}s")
            for name in pair:
                self.nodes[name].stop(length)
        elif kind == "isolate_ctl":
            cut = {frozenset((victim, CTL))}
            self.faults.append(f"{self.now:.3f} isolate {victim} from ctl {length:.2f}s")
            self.cut |= cut
            self.after(length, lambda: self.cut.difference_update(cut))
        self.after(self.rng.expovariate(self.cfg.faults_per_s), self._fault)

    def _resolve(self, name: str) -> str:
        a = self.ctl.a
        if name == "leader":
            return a.leader
        if name.startswith("follower"):
            followers = [r for r in a.replicas if r != a.leader]
            return followers[int(name[len("follower") :]) - 1]
        return name

    def _scripted(self, step: Step) -> None:
        names = [self._resolve(n) for n in step.nodes]
        self.faults.append(f"{self.now:.3f} {step.kind} {' '.join(names)} {step.length:.2f}s")
        for name in names:
            node = self.nodes[name]
            if step.kind in ("crash", "power_loss"):
                if node.alive:
                    node.crash(power_loss=step.kind == "power_loss")
                    self.after(step.length, node.restart)
            elif step.kind == "stop":
                node.stop(step.length)
            elif step.kind == "isolate":
                others = [n for n in [*self.nodes, CTL, CLIENT] if n != name]
                cut = {frozenset((name, o)) for o in others}
                self.cut |= cut
                self.after(step.length, lambda cut=cut: self.cut.difference_update(cut))
            elif step.kind == "pause":
                node.frozen_until = max(node.frozen_until, self.now + step.length)
            elif step.kind == "fsync_fail":
                node.fail_next_fsync = True
            else:
                raise ValueError(f"unknown scripted fault {step.kind!r}")

    def _heal(self) -> None:
        self.cut.clear()
        for node in self.nodes.values():
            node.frozen_until = min(node.frozen_until, self.now)
            if not node.alive:
                node.restart(clean=False)

    # ---------------------------------------------------------------- run

    def run(self) -> None:
        """Run the scenario, then heal everything, settle, and check the end state."""
        self.ctl.start()
        self.client.start()
        for node in self.nodes.values():
            node.start_timers()
        for step in self.cfg.script:
            self.at(step.at, lambda step=step: self._scripted(step))
        if self.cfg.faults_per_s > 0 and not self.cfg.script:
            self.after(self.rng.expovariate(self.cfg.faults_per_s), self._fault)
        self.run_until(self.cfg.duration_s)
        self.client.stop()
        self._heal()
        self.run_until(self.cfg.duration_s + self.cfg.settle_s)
        leader = self.nodes[self.ctl.leader]
        for node in self.nodes.values():
            self.checker.check_log(node)
        self.checker.final(leader, list(self.nodes.values()))


# ------------------------------------------------------------------------ controller


@attrs.define(eq=False)
class Controller:
    """The metadata (reliable, as Raft makes it), reached over the simulated network.

    Its state is a real :class:`~jetserver.metadata.model.MetadataState` changed only by
    the real :func:`jetserver.metadata.ops.apply`: ``UpdateIsr`` (compare-and-set on the
    partition epoch), ``LeaveIsr``, ``ElectLeader`` (from silence reports, chosen by
    :func:`~jetserver.cluster.elections.choose_leader`, and from handoffs) and
    ``RegisterServer`` (every start; an unclean one takes the server out of the ISR and
    moves its leadership).
    """

    sim: Sim
    replicas: tuple[str, ...]
    state: MetadataState = attrs.field(init=False)
    votes: dict[str, float] = attrs.field(factory=dict)
    refused: int = 0
    """Operations the state machine refused (stale ISR proposals, late handoffs)."""

    def __attrs_post_init__(self) -> None:
        state = MetadataState()
        for name in self.replicas:
            state, _ = apply(state, RegisterServer(name, f"{name}:1", f"{name}:2", "i0", True))
        spec = StreamSpec(
            name=STREAM,
            subject=STREAM,
            partitions=1,
            replication_factor=len(self.replicas),
            min_isr=self.sim.cfg.min_isr,
            durability=self.sim.cfg.durability,
        )
        state, result = apply(state, CreateStream(spec, "sim", 0, (self.replicas,)))
        assert result.ok, result
        self.state = state

    @property
    def a(self) -> PartitionAssignment:
        return self.state.streams[STREAM].partitions[0]

    @property
    def leader(self) -> str:
        return self.a.leader

    @property
    def isr(self) -> tuple[str, ...]:
        return self.a.isr

    @property
    def epoch(self) -> int:
        return self.a.leader_epoch

    def start(self) -> None:
        self.sim.checker.metadata_changed(self.epoch)
        self._broadcast()
        self.sim.after(self.sim.cfg.meta_interval_s, self._periodic)

    def meta(self) -> Meta:
        return Meta(self.state)

    def _broadcast(self) -> None:
        for name in [*self.replicas, CLIENT]:
            self.sim.send(CTL, name, self.meta())

    def _periodic(self) -> None:
        self._broadcast()
        self.sim.after(self.sim.cfg.meta_interval_s, self._periodic)

    def _apply(self, op: Op) -> bool:
        before = self.a
        self.state, result = apply(self.state, op)
        if not result.ok:
            self.refused += 1
        if self.a != before:
            self.sim.checker.metadata_changed(self.epoch)
            if self.a.leader_epoch != before.leader_epoch:
                self.votes.clear()
            self._broadcast()
        return result.ok

    def receive(self, msg: Any) -> None:
        if isinstance(msg, ProposeIsr):
            op = UpdateIsr(
                STREAM, 0, msg.sender, msg.epoch, msg.isr, partition_epoch=msg.partition_epoch
            )
            ok = self._apply(op)
            self.sim.send(CTL, msg.sender, IsrReply(msg.rid, ok))
        elif isinstance(msg, Propose):
            self._apply(msg.op)
            if isinstance(msg.op, RegisterServer):
                self.sim.send(CTL, msg.sender, Registered(msg.rid))
        elif isinstance(msg, Silent):
            self._silent(msg)

    def _leader_unreachable(self) -> bool:
        node = self.sim.nodes[self.leader]
        return (
            not node.alive
            or node.frozen_until > self.sim.now
            or not self.sim.reachable(CTL, self.leader)
        )

    def _silent(self, msg: Silent) -> None:
        a = self.a
        if msg.epoch != a.leader_epoch or msg.sender not in a.isr:
            return
        if msg.sender == a.leader:  # it gave up its epoch after a failed fsync: renew it
            self._apply(ElectLeader(STREAM, 0, a.leader, a.leader_epoch + 1, "sim"))
            return
        now = self.sim.now
        self.votes[msg.sender] = now
        window = self.sim.cfg.vote_window_s
        recent = {v for v, t in self.votes.items() if now - t <= window}
        new = choose_leader(a, recent, self._leader_unreachable())
        if new is not None:
            self._apply(ElectLeader(STREAM, 0, new, a.leader_epoch + 1, "sim"))


# ------------------------------------------------------------------------ client


@attrs.define(eq=False)
class Client:
    """A producer with ack ALL sending to the leader it believes in."""

    sim: Sim
    meta: Meta | None = None
    count: int = 0
    outstanding: dict[int, str] = attrs.field(factory=dict)
    running: bool = True
    refused: int = 0

    def start(self) -> None:
        self.sim.after(self.sim.cfg.produce_interval_s, self._tick)

    def stop(self) -> None:
        self.running = False

    def _tick(self) -> None:
        if not self.running:
            return
        if self.meta is not None:
            self.count += 1
            value = f"v{self.count}"
            self.outstanding[self.count] = value
            self.sim.send(CLIENT, self.meta.a.leader, Produce(self.count, value))
        self.sim.after(self.sim.cfg.produce_interval_s, self._tick)

    def receive(self, msg: Any) -> None:
        if isinstance(msg, Meta):
            if self.meta is None or msg.version > self.meta.version:
                self.meta = msg
        elif isinstance(msg, ProduceReply):
            value = self.outstanding.pop(msg.rid, None)
            if value is None:
                return
            if msg.error is None:
                isr = [self.sim.nodes[n] for n in self.sim.ctl.isr]
                self.sim.checker.acknowledged(value, msg.offset, isr)
            else:
                self.refused += 1


# ------------------------------------------------------------------------ replicas


def run_seed(seed: int, cfg: SimConfig | None = None) -> Sim:
    """Run one seeded scenario; raises InvariantViolation (with the seed) on a violation."""
    sim = Sim(seed, cfg or SimConfig())
    try:
        sim.run()
    except AssertionError as exc:
        history = "\n  ".join(sim.faults[-20:])
        raise AssertionError(
            f"seed {seed} ({sim.cfg}) failed at t={sim.now:.4f}: {exc}\nlast faults:\n  {history}"
        ) from exc
    return sim
