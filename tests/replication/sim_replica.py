"""One simulated replica: the server's replica core around an in-memory log.

Part of the seeded replication simulation (:mod:`.simulation`). Every decision of the
replica is the server's own :class:`~jetserver.replication.core.ReplicaCore` (the role an
assignment asks for, the leader state, the HW, the ALL acks, the ISR proposals, the cut
after a failed fsync) fed with the real metadata (:mod:`jetserver.metadata.ops` applied by
the controller); the follower's reconciliation uses the server's pure rules
(truncation_point, answer_cannot_cut, follower_hw, SilenceDetector). This module is only
the wiring: the simulated network, timers and log, with the same protocol as the server:
registration at every start, OffsetForLeaderEpoch, then long-poll fetches served up to the
leader's LEO (woken by its appends, before its fsync), HW piggybacked, a leader that gave
up its epoch after a failed fsync asking the controller to renew it, ISR proposals
compare-and-set on the partition epoch, silence reports, and on a graceful stop the handoff
and LeaveIsr planned by :mod:`jetserver.cluster.handoff` from the node's own (maybe stale)
view.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import attrs

from jetsdk.codec.error_codes import ErrorCode
from jetserver.cluster.handoff import plan_handoffs, plan_isr_exits
from jetserver.metadata.ops import RegisterServer
from jetserver.replication import LeaderPolicy, SilenceDetector, follower_hw, truncation_point
from jetserver.replication.core import (
    ROLE_FOLLOWER,
    ROLE_LEADER,
    ROLE_NONE,
    Outcome,
    Plan,
    ReplicaCore,
)
from jetserver.replication.epochs import answer_cannot_cut

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
    Propose,
    ProposeIsr,
    Registered,
    Silent,
    SimLog,
    SimPending,
)

if TYPE_CHECKING:
    from .simulation import Sim


@attrs.define(eq=False)
class Node:
    """One replica process: its log survives crashes; everything else is per life."""

    name: str
    sim: Sim
    log: SimLog = attrs.field(factory=SimLog)
    alive: bool = True
    incarnation: int = 0
    registered: bool = True
    stopping: bool = False
    frozen_until: float = 0.0
    meta: Meta | None = None
    core: ReplicaCore[SimPending] = attrs.field(init=False)
    epoch: int = -1
    token: int = 0
    parked: dict[Fetch, float] = attrs.field(factory=dict)
    """Parked replica fetches and when each parked."""
    flushing: bool = False
    rid: int = 0
    inflight: int | None = None
    phase: str | None = None
    silence: SilenceDetector | None = None
    proposal_rid: int | None = None
    leader_hw: int = -1
    ask_leader: bool = False
    """The last fetch was past the leader's LEO: the next reconciliation asks it."""
    answer_isr: Callable[[bool], None] | None = None
    fail_next_fsync: bool = False
    """Settles the ISR proposal in flight (with its leader state and proposal)."""

    def __attrs_post_init__(self) -> None:
        self.core = self._new_core()

    def _new_core(self) -> ReplicaCore[SimPending]:
        cfg = self.sim.cfg
        return ReplicaCore(
            me=self.name,
            clustered=True,
            policy=LeaderPolicy(
                durability=cfg.durability,
                min_isr=cfg.min_isr,
                lag_max_s=cfg.lag_max_s,
                hw_news_delay_s=cfg.hw_news_delay_s,
            ),
        )

    # -- views for the checkers --------------------------------------------------------

    @property
    def records(self) -> list[Rec]:
        return self.log.records

    @property
    def hw(self) -> int:
        return self.log.hw

    @property
    def role(self) -> str:
        return self.core.role

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

    def carry_out(self, out: Outcome[SimPending]) -> None:
        """Do what the core decided (as broker/commit.py ``_carry_out`` does)."""
        if out.hw is not None and out.hw > self.log.hw:
            self.set_hw(out.hw)
        for p, code, _text in out.acks:
            error = None if code == ErrorCode.NONE else code.name
            self.send(CLIENT, ProduceReply(p.rid, error, p.offset))
        if out.wake_replicas:
            self.answer_parked()
        if out.wake_isr:
            self.maybe_propose()

    # -- life ----------------------------------------------------------------------------

    def crash(self, power_loss: bool) -> None:
        self.alive = False
        self.incarnation += 1
        self._drop_life()
        self.log.crash(self.sim.rng, power_loss)

    def _drop_life(self) -> None:
        self.core = self._new_core()
        self.meta, self.epoch = None, -1
        self.parked, self.flushing, self.inflight = {}, False, None
        self.stopping = False

    def restart(self, clean: bool = False) -> None:
        """Start again; register (a new incarnation; ``clean``: the last stop was
        graceful) before applying any assignment, as the server does."""
        if self.alive:
            return
        self.alive = True
        self.incarnation += 1
        self.frozen_until = 0.0
        self.registered = False
        self.sim.checker.check_log(self)
        self.start_timers()
        self._register(clean)

    def _register(self, clean: bool) -> None:
        if self.registered:
            return
        self.rid += 1
        op = RegisterServer(
            self.name, f"{self.name}:1", f"{self.name}:2", f"i{self.incarnation}", clean
        )
        self.send(CTL, Propose(self.name, op, self.rid))
        self.after(self.sim.cfg.register_retry_s, lambda: self._register(clean), token=False)

    def stop(self, restart_after: float) -> None:
        """A graceful stop (SIGTERM), planned from this node's own view of the metadata:
        hand its leaderships over, wait (bounded), close the replica (flush, checkpoint),
        leave the ISRs, exit; start again ``restart_after`` later."""
        if not self.alive or self.stopping:
            return
        self.stopping = True
        if self.meta is not None:
            # The stop's probe (Liveness.answering): the servers that run (one stopping
            # too still answers until its own handoff is done).
            live = {n for n, node in self.sim.nodes.items() if node.alive}
            for op in plan_handoffs(self.meta.state, self.name, live).elections:
                self.send(CTL, Propose(self.name, op))

        def close() -> None:
            self.carry_out(self.core.end_role(ROLE_NONE))
            self._reset_role()
            self.log.flushed = self.log.leo  # the final flush
            self.log.hw_checkpoint = self.log.hw
            if self.meta is not None:
                for op in plan_isr_exits(self.meta.state, self.name):
                    self.send(CTL, Propose(self.name, op))
            self.after(self.sim.cfg.delay_max_s * 4, exit_, token=False)

        def exit_() -> None:
            self.alive = False
            self.incarnation += 1
            self._drop_life()
            self.log.crash(self.sim.rng, power_loss=False)
            self.sim.after(restart_after, lambda: self.restart(clean=True))

        self.after(self.sim.cfg.handoff_s, close, token=False)

    # -- metadata ------------------------------------------------------------------------

    def receive(self, msg: Any) -> None:
        handler = _RECEIVERS.get(type(msg))
        if handler is not None:
            handler(self, msg)

    def on_registered(self, _msg: Registered) -> None:
        self.registered = True

    def apply_meta(self, meta: Meta) -> None:
        if not self.registered or self.stopping:
            return
        if self.meta is not None and meta.version <= self.meta.version:
            return
        self.meta = meta
        a = meta.a
        core = self.core
        plan = core.assign(a, a.leader)
        if plan is Plan.KEEP:
            return
        if plan is Plan.ADOPT_ISR:
            self.carry_out(core.adopt_isr(a, self.log.hw))
            return
        next_role = ROLE_FOLLOWER if plan is Plan.FOLLOW else ROLE_NONE
        self.carry_out(core.end_role(next_role))
        self._reset_role()
        if plan is Plan.LEAD:
            self.become_leader(meta)
        elif plan is Plan.FOLLOW:
            core.follow(a, a.leader)
            self.become_follower(meta)

    def _reset_role(self) -> None:
        self.token += 1
        self.epoch = -1
        self.parked = {}
        self.inflight, self.phase, self.silence, self.proposal_rid = None, None, None, None

    # -- leader --------------------------------------------------------------------------

    def become_leader(self, meta: Meta) -> None:
        a = meta.a
        self.epoch = a.leader_epoch
        self.sim.checker.leading(self.name, a.leader_epoch)
        log = self.log
        log.epochs.assign(a.leader_epoch, log.leo)
        out = self.core.lead(a, leo=log.leo, flushed=log.flushed, hw=log.hw, now=self.sim.now)
        self.carry_out(out)
        self.maybe_flush()
        self.after(self.sim.cfg.isr_check_s, self._isr_loop)

    def _isr_loop(self) -> None:
        self.maybe_propose()
        self.after(self.sim.cfg.isr_check_s, self._isr_loop)

    def maybe_propose(self) -> None:
        core = self.core
        state = core.leader_state
        if state is None or self.proposal_rid is not None:
            return
        wanted = core.isr_proposal(self.sim.now)
        if wanted is None:
            return
        proposal, base = wanted
        self.rid += 1
        rid = self.proposal_rid = self.rid
        self.send(CTL, ProposeIsr(rid, self.name, self.epoch, proposal, base))

        def answered(accepted: bool) -> None:
            self.proposal_rid = None
            self.carry_out(core.proposal_done(state, proposal, accepted, hw=self.log.hw))

        self.answer_isr = answered

        def timeout() -> None:
            if self.proposal_rid == rid:
                answered(False)

        self.after(self.sim.cfg.request_timeout_s * 3, timeout)

    def on_isr_reply(self, msg: IsrReply) -> None:
        if msg.rid != self.proposal_rid or self.answer_isr is None:
            return
        self.answer_isr(msg.accepted)

    def on_produce(self, msg: Produce) -> None:
        core = self.core
        if core.role != ROLE_LEADER or self.stopping:
            self.send(CLIENT, ProduceReply(msg.rid, NOT_LEADER))
            return
        if not core.enough_replicas():
            self.send(CLIENT, ProduceReply(msg.rid, NOT_ENOUGH_REPLICAS))
            return
        offset = self.log.leo
        self.log.append([Rec(offset, self.epoch, msg.value)])
        core.add_pending(SimPending(offset, msg.rid))
        committed = core.appended(self.log.leo, self.log.hw)
        if committed is not None:
            self.carry_out(committed)
        self.answer_parked()  # before the fsync, as the server does
        self.maybe_flush()

    def maybe_flush(self) -> None:
        if self.flushing or self.log.flushed >= self.log.leo:
            return
        self.flushing = True
        target, generation = self.log.leo, self.log.generation
        cfg = self.sim.cfg
        delay = self.sim.rng.uniform(cfg.fsync_min_s, cfg.fsync_max_s)
        fails = self.fail_next_fsync or (
            cfg.fsync_fail > 0 and self.sim.rng.random() < cfg.fsync_fail
        )
        self.fail_next_fsync = False

        def done() -> None:
            self.flushing = False
            if fails:
                self.sync_failed()
            elif self.log.generation == generation:
                self.log.flushed = max(self.log.flushed, target)
                self.flushed_changed()
            self.maybe_flush()

        self.after(delay, done, token=False)

    def sync_failed(self) -> None:
        """An fsync failed: the unsynced records are gone from the disk; cut the log back
        to its last good sync (Log.recover_unsynced) and tell the core."""
        log = self.log
        end = log.flushed
        self.sim.faults.append(f"{self.sim.now:.3f} fsync failed on {self.name} at {end}")
        if end < log.leo:
            self.sim.checker.truncating(self, end)
        log.truncate_to(end)
        out = self.core.cut(end, "fsync failed")
        self.carry_out(out)
        if out.renew_epoch is not None:
            self.sim.faults.append(f"{self.sim.now:.3f} {self.name} gave up epoch {self.epoch}")
            self._renew(out.renew_epoch)
        if self.core.role == ROLE_FOLLOWER and self.phase == "flushing":
            self.fetch()

    def _renew(self, epoch: int) -> None:
        """Ask the controller to renew the leadership given up in ``epoch`` (as
        ReplicaRoles.renew_leadership does) until the metadata moved past it (this life
        only: ``after`` drops it at a crash)."""
        a = self.meta.a if self.meta is not None else None
        if a is None or a.leader_epoch > epoch or a.leader != self.name:
            return
        self.send(CTL, Silent(self.name, epoch))
        self.after(self.sim.cfg.silence_s / 4, lambda: self._renew(epoch), token=False)

    def flushed_changed(self) -> None:
        core = self.core
        if core.role == ROLE_LEADER:
            self.carry_out(core.flushed(self.log.flushed, leo=self.log.leo, hw=self.log.hw))
        elif core.role == ROLE_FOLLOWER:
            self.follower_flushed()

    def on_fetch(self, msg: Fetch) -> None:
        state = self.core.leader_state
        if state is None or msg.epoch != self.epoch:
            self.send(msg.sender, FetchReply(msg.rid, NOT_LEADER))
            return
        if msg.offset > self.log.leo or msg.sender not in state.followers:
            self.send(msg.sender, FetchReply(msg.rid, OUT_OF_RANGE))
            return
        self.carry_out(
            self.core.replica_fetched(
                msg.sender, msg.offset, msg.flushed, self.sim.now, hw=self.log.hw
            )
        )
        self.maybe_propose()
        if not state.fetch_has_news(msg.sender, msg.offset, self.log.leo, 0.0):
            self.parked[msg] = self.sim.now
            self.after(self.sim.cfg.fetch_max_wait_s, lambda: self._expire(msg))
            self._hw_news_timer(msg, 0.0)
            return
        self._answer(msg)

    def _expire(self, msg: Fetch) -> None:
        if self.parked.pop(msg, None) is not None:
            self._answer(msg)

    def _hw_news_timer(self, msg: Fetch, parked_s: float) -> None:
        """The leader's parked-fetch timer (broker/replica_wait.py ``ParkedFetch``): a
        fetch with HW news alone is looked at again when its delay is over."""
        state = self.core.leader_state
        due = state.hw_news_due_s(msg.sender, parked_s) if state is not None else None
        if due is not None:
            self.after(due, self.answer_parked)

    def answer_parked(self) -> None:
        state = self.core.leader_state
        if state is None:
            return
        now = self.sim.now
        for m, since in list(self.parked.items()):
            if state.fetch_has_news(m.sender, m.offset, self.log.leo, now - since):
                del self.parked[m]
                self._answer(m)
            else:
                self._hw_news_timer(m, now - since)

    def _answer(self, msg: Fetch) -> None:
        state = self.core.leader_state
        if state is None:
            return
        end = min(self.log.leo, msg.offset + self.sim.cfg.fetch_max_records)
        records = tuple(self.log.records[msg.offset : max(end, msg.offset)])
        if records:
            state.note_served(end)
        state.note_hw_sent(msg.sender, state.hw)
        self.send(msg.sender, FetchReply(msg.rid, None, records, state.hw))

    def on_epoch_query(self, msg: EpochQuery) -> None:
        if self.core.role != ROLE_LEADER or msg.current_epoch != self.epoch:
            self.send(msg.sender, EpochReply(msg.rid, NOT_LEADER))
            return
        epoch, end = self.log.epochs.epoch_and_end_offset_for(msg.epoch)
        self.send(msg.sender, EpochReply(msg.rid, None, epoch, end))

    # -- follower ------------------------------------------------------------------------

    def become_follower(self, meta: Meta) -> None:
        self.epoch = meta.a.leader_epoch
        self.silence = SilenceDetector(self.sim.cfg.silence_s, self.sim.now)
        self.after(self.sim.cfg.silence_s / 4, self._silence_loop)
        self.reconcile()

    def _leader(self) -> str:
        assert self.meta is not None
        return self.meta.a.leader

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
        log, latest = self.log, self.log.epochs.latest_epoch
        anyway, self.ask_leader = self.ask_leader, False
        if latest < 0 or (
            not anyway
            and answer_cannot_cut(
                log_start=0, leo=log.leo, latest_epoch=latest, following=self.epoch
            )
        ):
            log.truncate_to(log.leo)  # drops an epoch entry at the LEO (led, nothing appended)
            self.fetch()
            return
        self._request(lambda rid: EpochQuery(rid, self.name, latest, self.epoch))

    def _awaited(self, rid: int, phase: str) -> bool:
        """True for the answer to the request in flight of ``phase`` while still a follower
        (the leader is heard from, nothing is in flight any more); False: a stale one."""
        if self.core.role != ROLE_FOLLOWER or rid != self.inflight or self.phase != phase:
            return False
        self.inflight = None
        assert self.silence is not None
        self.silence.heard(self.sim.now)
        return True

    def on_epoch_reply(self, msg: EpochReply) -> None:
        if not self._awaited(msg.rid, "reconcile"):
            return
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
        if not self._awaited(msg.rid, "fetch"):
            return
        if msg.error == OUT_OF_RANGE:
            self.ask_leader = True
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


_RECEIVERS: dict[type, Callable[[Node, Any], None]] = {
    Meta: Node.apply_meta,
    Registered: Node.on_registered,
    Fetch: Node.on_fetch,
    FetchReply: Node.on_fetch_reply,
    EpochQuery: Node.on_epoch_query,
    EpochReply: Node.on_epoch_reply,
    Produce: Node.on_produce,
    IsrReply: Node.on_isr_reply,
}
"""A replica's handler of each message type (the others it ignores)."""
