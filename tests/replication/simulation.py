"""A deterministic, seeded simulation of one partition's ISR replication (issue 4 item 8).

N replicas of one partition, a tiny metadata controller and a producer exchange messages
over a simulated network (delay, loss, partitions) under an injected virtual clock, with
crashes (a process crash keeps what was written; a power loss also drops a random part of
what was not fsynced) and pauses (SIGSTOP). The replicas run the real pure replication
core of the server — :class:`~jetserver.replication.LeaderState`,
:func:`~jetserver.replication.truncation_point`, :func:`~jetserver.replication.follower_hw`,
:class:`~jetserver.replication.SilenceDetector` and the storage's
:class:`~jetserver.storage.LeaderEpochCache` — around an in-memory log, with the same
protocol as the server: OffsetForLeaderEpoch then Fetch(offset = LEO, replica_flushed,
leader_epoch) served up to the leader's flushed offset, long polls, HW piggybacked, ISR
changes proposed to the controller (epoch-checked), silent leaders reported and replaced by
a majority of the ISR. :mod:`invariants` checks every property as the run goes.

Same seed, same run: every choice comes from one ``random.Random(seed)``, events are
ordered by (time, sequence number).
"""

from __future__ import annotations

import heapq
import random
from collections.abc import Callable
from typing import Any

import attrs

from .invariants import Checker
from .sim_model import (
    CLIENT,
    CTL,
    IsrReply,
    Meta,
    Produce,
    ProduceReply,
    ProposeIsr,
    Silent,
    SimConfig,
)
from .sim_replica import Node

__all__ = ["Client", "Controller", "Node", "Sim", "SimConfig", "run_seed"]

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
        kind = self.rng.choice(("crash", "partition", "pause", "isolate_ctl"))
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
        elif kind == "isolate_ctl":
            cut = {frozenset((victim, CTL))}
            self.faults.append(f"{self.now:.3f} isolate {victim} from ctl {length:.2f}s")
            self.cut |= cut
            self.after(length, lambda: self.cut.difference_update(cut))
        self.after(self.rng.expovariate(self.cfg.faults_per_s), self._fault)

    def _heal(self) -> None:
        self.cut.clear()
        for node in self.nodes.values():
            node.frozen_until = min(node.frozen_until, self.now)
            if not node.alive:
                node.restart()

    # ---------------------------------------------------------------- run

    def run(self) -> None:
        """Run the scenario, then heal everything, settle, and check the end state."""
        self.ctl.start()
        self.client.start()
        for node in self.nodes.values():
            node.start_timers()
        if self.cfg.faults_per_s > 0:
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
    """The metadata (reliable, as Raft makes it), reached over the simulated network."""

    sim: Sim
    replicas: tuple[str, ...]
    leader: str = attrs.field(init=False)
    isr: tuple[str, ...] = attrs.field(init=False)
    epoch: int = 0
    version: int = 0
    votes: dict[str, float] = attrs.field(factory=dict)

    def __attrs_post_init__(self) -> None:
        self.leader = self.replicas[0]
        self.isr = self.replicas

    def start(self) -> None:
        self.sim.checker.metadata_changed(self.epoch)
        self._broadcast()
        self.sim.after(self.sim.cfg.meta_interval_s, self._periodic)

    def meta(self) -> Meta:
        return Meta(self.version, self.leader, self.replicas, self.isr, self.epoch)

    def _broadcast(self) -> None:
        for name in [*self.replicas, CLIENT]:
            self.sim.send(CTL, name, self.meta())

    def _periodic(self) -> None:
        self._broadcast()
        self.sim.after(self.sim.cfg.meta_interval_s, self._periodic)

    def _changed(self) -> None:
        self.version += 1
        self.sim.checker.metadata_changed(self.epoch)
        self._broadcast()

    def receive(self, msg: Any) -> None:
        if isinstance(msg, ProposeIsr):
            ok = (
                msg.sender == self.leader
                and msg.epoch == self.epoch
                and self.leader in msg.isr
                and set(msg.isr) <= set(self.replicas)
            )
            if ok and set(msg.isr) != set(self.isr):
                self.isr = tuple(r for r in self.replicas if r in msg.isr)
                self._changed()
            self.sim.send(CTL, msg.sender, IsrReply(msg.rid, ok))
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
        if msg.epoch != self.epoch or msg.sender not in self.isr or msg.sender == self.leader:
            return
        now = self.sim.now
        self.votes[msg.sender] = now
        window = self.sim.cfg.vote_window_s
        recent = [v for v, t in self.votes.items() if now - t <= window and v in self.isr]
        votes = len(recent) + (1 if self._leader_unreachable() else 0)
        if len(self.isr) > 1 and votes >= len(self.isr) // 2 + 1:
            new = next(r for r in self.replicas if r in recent)
            old = self.leader
            self.leader = new
            self.epoch += 1
            self.isr = tuple(r for r in self.isr if r != old)
            self.votes.clear()
            self._changed()


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
            self.sim.send(CLIENT, self.meta.leader, Produce(self.count, value))
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
