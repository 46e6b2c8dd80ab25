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

from jetserver.replication import LeaderState, SilenceDetector, follower_hw, truncation_point
from jetserver.storage import EpochEntry, LeaderEpochCache

from .invariants import Checker, Rec

CTL = "ctl"
CLIENT = "client"
NOT_LEADER = "NOT_LEADER"
OUT_OF_RANGE = "OUT_OF_RANGE"
NOT_ENOUGH_REPLICAS = "NOT_ENOUGH_REPLICAS"


@attrs.frozen
class SimConfig:
    """One simulated scenario (times in virtual seconds)."""

    replicas: int = 3
    min_isr: int = 2
    durability: str = "flushed"
    duration_s: float = 6.0
    settle_s: float = 4.0
    loss: float = 0.02
    delay_min_s: float = 0.0005
    delay_max_s: float = 0.006
    faults_per_s: float = 1.0
    power_loss: bool = True
    produce_interval_s: float = 0.01
    fsync_min_s: float = 0.0005
    fsync_max_s: float = 0.004
    lag_max_s: float = 0.6
    silence_s: float = 0.25
    fetch_max_wait_s: float = 0.1
    request_timeout_s: float = 0.2
    fetch_max_records: int = 50
    isr_check_s: float = 0.05
    vote_window_s: float = 1.0
    meta_interval_s: float = 0.2
    checkpoint_interval_s: float = 0.3
    retry_s: float = 0.02


# ------------------------------------------------------------------------ messages


@attrs.frozen
class Meta:
    version: int
    leader: str
    replicas: tuple[str, ...]
    isr: tuple[str, ...]
    epoch: int


@attrs.frozen
class Fetch:
    rid: int
    sender: str
    offset: int
    flushed: int
    epoch: int


@attrs.frozen
class FetchReply:
    rid: int
    error: str | None
    records: tuple[Rec, ...] = ()
    hw: int = -1


@attrs.frozen
class EpochQuery:
    rid: int
    sender: str
    epoch: int
    current_epoch: int


@attrs.frozen
class EpochReply:
    rid: int
    error: str | None
    epoch: int = -1
    end: int = -1


@attrs.frozen
class ProposeIsr:
    rid: int
    sender: str
    epoch: int
    isr: tuple[str, ...]


@attrs.frozen
class IsrReply:
    rid: int
    accepted: bool


@attrs.frozen
class Silent:
    sender: str
    epoch: int


@attrs.frozen
class Produce:
    rid: int
    value: str


@attrs.frozen
class ProduceReply:
    rid: int
    error: str | None
    offset: int = -1


# ------------------------------------------------------------------------ the log


@attrs.define
class SimLog:
    """An in-memory partition log with the storage engine's epoch cache and crash model."""

    records: list[Rec] = attrs.field(factory=list)
    flushed: int = 0
    hw: int = 0
    hw_checkpoint: int = 0
    generation: int = 0
    epochs: LeaderEpochCache = attrs.field(init=False)

    def __attrs_post_init__(self) -> None:
        self.epochs = LeaderEpochCache(None, lambda: len(self.records))

    @property
    def leo(self) -> int:
        return len(self.records)

    def append(self, recs: list[Rec]) -> None:
        for rec in recs:
            assert rec.offset == len(self.records), (rec, len(self.records))
            if rec.epoch != self.epochs.latest_epoch:
                self.epochs.assign(rec.epoch, rec.offset)
            self.records.append(rec)

    def truncate_to(self, offset: int) -> None:
        # Like the server's follower: Log.truncate_to, then drop epoch entries at or past
        # the offset even when no record is cut (an epoch this replica led without
        # appending anything leaves an entry at its LEO).
        self.epochs.truncate_from_end(offset)
        if offset >= self.leo:
            return
        del self.records[offset:]
        self.hw = min(self.hw, offset)
        self.flushed = min(self.flushed, offset)
        self.generation += 1
        self.epochs.truncate_from_end(offset)

    def crash(self, rng: random.Random, power_loss: bool) -> None:
        keep = self.leo
        if power_loss:
            keep = self.flushed + rng.randint(0, self.leo - self.flushed)
        del self.records[keep:]
        self.generation += 1
        entries: list[EpochEntry] = []
        for rec in self.records:
            if not entries or entries[-1].epoch != rec.epoch:
                entries.append(EpochEntry(rec.epoch, rec.offset))
        self.epochs = LeaderEpochCache(None, lambda: len(self.records), entries)
        # Reopen: the active segment is fsynced, the HW comes from its checkpoint.
        self.flushed = self.leo
        self.hw = min(self.hw_checkpoint, self.leo)


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


@attrs.define(eq=False)
class Node:
    """One replica: leader, follower or idle, per the metadata it received."""

    name: str
    sim: Sim
    log: SimLog = attrs.field(factory=SimLog)
    alive: bool = True
    incarnation: int = 0
    frozen_until: float = 0.0
    meta: Meta | None = None
    role: str | None = None
    epoch: int = -1
    token: int = 0
    state: LeaderState | None = None
    acks: list[tuple[int, int]] = attrs.field(factory=list)  # (offset, rid)
    parked: list[Fetch] = attrs.field(factory=list)
    flushing: bool = False
    rid: int = 0
    inflight: int | None = None
    phase: str | None = None
    silence: SilenceDetector | None = None
    proposal_rid: int | None = None
    proposal: tuple[str, ...] = ()
    leader_hw: int = -1

    # -- views for the checkers --------------------------------------------------------

    @property
    def records(self) -> list[Rec]:
        return self.log.records

    @property
    def hw(self) -> int:
        return self.log.hw

    # -- plumbing ------------------------------------------------------------------------

    def _guard(self, fn: Callable[[], None], token: bool = True) -> Callable[[], None]:
        """Run ``fn`` later only if this life (and, with ``token``, this role) is current;
        a paused node runs it when it resumes."""
        inc, tok = self.incarnation, self.token

        def run() -> None:
            if not self.alive or self.incarnation != inc or (token and self.token != tok):
                return
            if self.frozen_until > self.sim.now:
                self.sim.at(self.frozen_until, run)
                return
            fn()

        return run

    def after(self, delay: float, fn: Callable[[], None], token: bool = True) -> None:
        self.sim.after(delay, self._guard(fn, token))

    def deliver(self, msg: Any) -> None:
        self._guard(lambda: self.receive(msg), token=False)()

    def send(self, dst: str, msg: Any) -> None:
        self.sim.send(self.name, dst, msg)

    def set_hw(self, new: int) -> None:
        old = self.log.hw
        if new != old:
            self.sim.checker.hw_moved(self, old, new)
            self.log.hw = new

    def start_timers(self) -> None:
        self.after(self.sim.cfg.checkpoint_interval_s, self._checkpoint, token=False)

    def _checkpoint(self) -> None:
        self.log.hw_checkpoint = self.log.hw
        self.after(self.sim.cfg.checkpoint_interval_s, self._checkpoint, token=False)

    # -- life ----------------------------------------------------------------------------

    def crash(self, power_loss: bool) -> None:
        self.alive = False
        self.incarnation += 1
        self.role, self.state, self.meta, self.epoch = None, None, None, -1
        self.acks, self.parked, self.flushing, self.inflight = [], [], False, None
        self.log.crash(self.sim.rng, power_loss)

    def restart(self) -> None:
        if self.alive:
            return
        self.alive = True
        self.incarnation += 1
        self.frozen_until = 0.0
        self.sim.checker.check_log(self)
        self.start_timers()

    # -- metadata ------------------------------------------------------------------------

    def receive(self, msg: Any) -> None:
        if isinstance(msg, Meta):
            self.apply_meta(msg)
        elif isinstance(msg, Fetch):
            self.on_fetch(msg)
        elif isinstance(msg, FetchReply):
            self.on_fetch_reply(msg)
        elif isinstance(msg, EpochQuery):
            self.on_epoch_query(msg)
        elif isinstance(msg, EpochReply):
            self.on_epoch_reply(msg)
        elif isinstance(msg, Produce):
            self.on_produce(msg)
        elif isinstance(msg, IsrReply):
            self.on_isr_reply(msg)

    def apply_meta(self, meta: Meta) -> None:
        if self.meta is not None and meta.version <= self.meta.version:
            return
        old = self.meta
        self.meta = meta
        if meta.leader == self.name:
            if self.role != "leader" or self.epoch != meta.epoch:
                self.become_leader(meta)
            else:
                assert self.state is not None
                if self.state.set_isr(meta.isr):
                    self.hw_advanced()
        elif self.name in meta.replicas:
            changed = old is None or old.leader != meta.leader or old.epoch != meta.epoch
            if self.role != "follower" or changed or self.epoch != meta.epoch:
                self.become_follower(meta)
        else:
            self._reset_role(None, -1)

    def _reset_role(self, role: str | None, epoch: int) -> None:
        self.token += 1
        self.role, self.epoch = role, epoch
        self.state, self.acks, self.parked = None, [], []
        self.inflight, self.phase, self.silence, self.proposal_rid = None, None, None, None

    # -- leader --------------------------------------------------------------------------

    def become_leader(self, meta: Meta) -> None:
        self._reset_role("leader", meta.epoch)
        self.sim.checker.leading(self.name, meta.epoch)
        log = self.log
        log.epochs.assign(meta.epoch, log.leo)
        self.state = LeaderState.start(
            leader=self.name,
            leader_epoch=meta.epoch,
            replicas=meta.replicas,
            isr=meta.isr,
            durability=self.sim.cfg.durability,
            min_isr=self.sim.cfg.min_isr,
            lag_max_s=self.sim.cfg.lag_max_s,
            leo=log.leo,
            flushed=log.flushed,
            hw=log.hw,
            now=self.sim.now,
        )
        self.set_hw(self.state.hw)
        self.maybe_flush()
        self.after(self.sim.cfg.isr_check_s, self._isr_loop)

    def _isr_loop(self) -> None:
        self.maybe_propose()
        self.after(self.sim.cfg.isr_check_s, self._isr_loop)

    def maybe_propose(self) -> None:
        assert self.state is not None
        proposal = self.state.isr_proposal(self.sim.now)
        if proposal is None:
            return
        self.rid += 1
        rid = self.proposal_rid = self.rid
        self.proposal = proposal
        self.send(CTL, ProposeIsr(rid, self.name, self.epoch, proposal))

        def timeout() -> None:
            if self.proposal_rid == rid and self.state is not None:
                self.proposal_rid = None
                if self.state.proposal_done(proposal, accepted=False):
                    self.hw_advanced()

        self.after(self.sim.cfg.request_timeout_s * 3, timeout)

    def on_isr_reply(self, msg: IsrReply) -> None:
        if self.role != "leader" or msg.rid != self.proposal_rid or self.state is None:
            return
        self.proposal_rid = None
        if self.state.proposal_done(self.proposal, msg.accepted):
            self.hw_advanced()

    def on_produce(self, msg: Produce) -> None:
        if self.role != "leader" or self.state is None:
            self.send(CLIENT, ProduceReply(msg.rid, NOT_LEADER))
            return
        if not self.state.enough_replicas():
            self.send(CLIENT, ProduceReply(msg.rid, NOT_ENOUGH_REPLICAS))
            return
        offset = self.log.leo
        self.log.append([Rec(offset, self.epoch, msg.value)])
        self.state.on_append(self.log.leo)
        self.acks.append((offset, msg.rid))
        self.maybe_flush()

    def maybe_flush(self) -> None:
        if self.flushing or self.log.flushed >= self.log.leo:
            return
        self.flushing = True
        target, generation = self.log.leo, self.log.generation
        delay = self.sim.rng.uniform(self.sim.cfg.fsync_min_s, self.sim.cfg.fsync_max_s)

        def done() -> None:
            self.flushing = False
            if self.log.generation == generation:
                self.log.flushed = max(self.log.flushed, target)
            self.flushed_changed()
            self.maybe_flush()

        self.after(delay, done, token=False)

    def flushed_changed(self) -> None:
        if self.role == "leader" and self.state is not None:
            if self.state.on_flush(self.log.flushed):
                self.hw_advanced()
            self.answer_parked()
        elif self.role == "follower":
            self.follower_flushed()

    def hw_advanced(self) -> None:
        assert self.state is not None
        self.set_hw(self.state.hw)
        keep = []
        for offset, rid in self.acks:
            if offset < self.state.hw:
                ok = self.state.committed_on_enough()
                self.send(CLIENT, ProduceReply(rid, None if ok else NOT_ENOUGH_REPLICAS, offset))
            else:
                keep.append((offset, rid))
        self.acks = keep
        self.answer_parked()

    def on_fetch(self, msg: Fetch) -> None:
        if self.role != "leader" or self.state is None or msg.epoch != self.epoch:
            self.send(msg.sender, FetchReply(msg.rid, NOT_LEADER))
            return
        if msg.offset > self.log.leo or msg.sender not in self.state.followers:
            self.send(msg.sender, FetchReply(msg.rid, OUT_OF_RANGE))
            return
        if self.state.on_fetch(msg.sender, msg.offset, msg.flushed, self.sim.now):
            self.hw_advanced()
        self.maybe_propose()
        if msg.offset >= self.log.flushed and not self.state.follower_needs_hw(msg.sender):
            self.parked.append(msg)
            self.after(self.sim.cfg.fetch_max_wait_s, lambda: self._expire(msg))
            return
        self._answer(msg)

    def _expire(self, msg: Fetch) -> None:
        if msg in self.parked:
            self.parked.remove(msg)
            self._answer(msg)

    def answer_parked(self) -> None:
        if self.state is None:
            return
        ready = [
            m
            for m in self.parked
            if m.offset < self.log.flushed or self.state.follower_needs_hw(m.sender)
        ]
        for m in ready:
            self.parked.remove(m)
            self._answer(m)

    def _answer(self, msg: Fetch) -> None:
        assert self.state is not None
        end = min(self.log.flushed, msg.offset + self.sim.cfg.fetch_max_records)
        records = tuple(self.log.records[msg.offset : max(end, msg.offset)])
        self.state.note_hw_sent(msg.sender, self.state.hw)
        self.send(msg.sender, FetchReply(msg.rid, None, records, self.state.hw))

    def on_epoch_query(self, msg: EpochQuery) -> None:
        if self.role != "leader" or msg.current_epoch != self.epoch:
            self.send(msg.sender, EpochReply(msg.rid, NOT_LEADER))
            return
        epoch, end = self.log.epochs.epoch_and_end_offset_for(msg.epoch)
        self.send(msg.sender, EpochReply(msg.rid, None, epoch, end))

    # -- follower ------------------------------------------------------------------------

    def become_follower(self, meta: Meta) -> None:
        self._reset_role("follower", meta.epoch)
        self.silence = SilenceDetector(self.sim.cfg.silence_s, self.sim.now)
        self.after(self.sim.cfg.silence_s / 4, self._silence_loop)
        self.reconcile()

    def _leader(self) -> str:
        assert self.meta is not None
        return self.meta.leader

    def _request(self, msg_fn: Callable[[int], Any]) -> None:
        self.rid += 1
        rid = self.inflight = self.rid
        self.send(self._leader(), msg_fn(rid))

        def timeout() -> None:
            if self.inflight == rid:
                self.inflight = None
                self.retry()

        self.after(self.sim.cfg.request_timeout_s, timeout)

    def retry(self) -> None:
        if self.phase == "reconcile":
            self.after(self.sim.cfg.retry_s, self.reconcile)
        else:
            self.after(self.sim.cfg.retry_s, self.fetch)

    def reconcile(self) -> None:
        self.phase = "reconcile"
        latest = self.log.epochs.latest_epoch
        if latest < 0:
            self.fetch()
            return
        self._request(lambda rid: EpochQuery(rid, self.name, latest, self.epoch))

    def on_epoch_reply(self, msg: EpochReply) -> None:
        if self.role != "follower" or msg.rid != self.inflight or self.phase != "reconcile":
            return
        self.inflight = None
        assert self.silence is not None
        self.silence.heard(self.sim.now)
        if msg.error is not None:
            self.retry()
            return
        t = truncation_point(
            local_epoch_end=self.log.epochs.epoch_and_end_offset_for,
            local_leo=self.log.leo,
            local_hw=self.log.hw,
            leader_epoch=msg.epoch,
            leader_end_offset=msg.end,
        )
        if t.offset < self.log.leo:
            self.sim.checker.truncating(self, t.offset)
        self.log.truncate_to(t.offset)
        if t.done:
            self.fetch()
        else:
            self.reconcile()

    def fetch(self) -> None:
        self.phase = "fetch"
        log = self.log
        self._request(lambda rid: Fetch(rid, self.name, log.leo, log.flushed, self.epoch))

    def on_fetch_reply(self, msg: FetchReply) -> None:
        if self.role != "follower" or msg.rid != self.inflight or self.phase != "fetch":
            return
        self.inflight = None
        assert self.silence is not None
        self.silence.heard(self.sim.now)
        if msg.error == OUT_OF_RANGE:
            self.reconcile()
            return
        if msg.error is not None:
            self.retry()
            return
        if msg.records and msg.records[0].offset != self.log.leo:
            self.fetch()
            return
        self.log.append(list(msg.records))
        self.leader_hw = msg.hw
        if self.sim.cfg.durability == "flushed" and self.log.flushed < self.log.leo:
            self.phase = "flushing"
            self.maybe_flush()
        else:
            self.maybe_flush()
            self._update_hw()
            self.fetch()

    def follower_flushed(self) -> None:
        if self.phase == "flushing" and self.log.flushed >= self.log.leo:
            self._update_hw()
            self.fetch()
        elif self.phase == "fetch":
            self._update_hw()

    def _update_hw(self) -> None:
        new = follower_hw(
            self.log.hw,
            self.leader_hw,
            leo=self.log.leo,
            flushed=self.log.flushed,
            durability=self.sim.cfg.durability,
        )
        self.set_hw(new)

    def _silence_loop(self) -> None:
        assert self.silence is not None
        if self.silence.should_report(self.sim.now):
            self.send(CTL, Silent(self.name, self.epoch))
        self.after(self.sim.cfg.silence_s / 4, self._silence_loop)


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
