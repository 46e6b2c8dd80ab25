"""One simulated replica: leader, follower or idle, per the metadata it received.

Part of the seeded replication simulation (:mod:`.simulation`). It drives the server's pure
replication core (LeaderState, truncation_point, follower_hw, SilenceDetector) with the
same protocol as the server: OffsetForLeaderEpoch, then long-poll fetches served up to the
leader's flushed offset, HW piggybacked, ISR proposals to the controller, silence reports.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import attrs

from jetserver.replication import LeaderState, SilenceDetector, follower_hw, truncation_point

from .invariants import Rec
from .sim_model import (
    CLIENT,
    CTL,
    NOT_ENOUGH_REPLICAS,
    NOT_LEADER,
    OUT_OF_RANGE,
    EpochQuery,
    EpochReply,
    Fetch,
    FetchReply,
    IsrReply,
    Meta,
    Produce,
    ProduceReply,
    ProposeIsr,
    Silent,
    SimLog,
)

if TYPE_CHECKING:
    from .simulation import Sim


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
