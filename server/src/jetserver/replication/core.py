"""A partition replica's decisions as a pure state machine (spec/cluster.md, "Replication").

:class:`ReplicaCore` holds what a replica decides with: its role, the assignment it
applied, the :class:`~jetserver.replication.LeaderState` while it leads, the ALL acks
waiting for the high watermark, and what recovery found wrong with its log. Events go in
as method calls (an assignment, a flush, a replica fetch, an ISR proposal's outcome, a
failed fsync's cut); what to do comes out as a :class:`Plan` or an :class:`Outcome`: the
HW to set, the acks to send (with their error codes), whom to wake. It reads no clock, does
no I/O and awaits nothing.

The server's partition replica (``broker/roles.py``, ``broker/commit.py``) is a thin
driver around it: it subscribes to NATS, runs the fetcher, fsyncs and publishes acks as the
core says. The seeded replication simulation (``tests/replication``) drives the same core
with the real metadata operations, so what it checks is what the server runs.

The pending-ack type is the driver's own (the server keeps the ack to send, the simulation
a request id); the core only reads its ``offset``.
"""

from __future__ import annotations

import collections
import enum
from collections.abc import Sequence
from typing import Generic, Protocol, TypeVar

import attrs

from jetsdk.codec.error_codes import ErrorCode
from jetsdk.codec.stream_settings import MAX_DURATION_S
from jetserver.config.validators import at_most
from jetserver.metadata.model import DURABILITY_WRITTEN, PartitionAssignment
from jetserver.replication.invariants import ReplicaInvariantViolation
from jetserver.replication.leader import LeaderPolicy, LeaderState
from jetserver.replication.producers import ProducerTable

ROLE_SINGLE = "single"
"""A server without a cluster: it leads, committed means flushed."""
ROLE_LEADER = "leader"
ROLE_FOLLOWER = "follower"
ROLE_NONE = "none"


class Pending(Protocol):
    """An ALL ack waiting for the HW to pass its record."""

    @property
    def offset(self) -> int: ...


P = TypeVar("P", bound=Pending)


class Plan(enum.Enum):
    """What an assignment asks of the replica (:meth:`ReplicaCore.assign`)."""

    KEEP = "keep"
    """Nothing changes (the same leader, epoch and address to follow)."""
    ADOPT_ISR = "adopt_isr"
    """Still leading in the same epoch: adopt the new ISR (:meth:`ReplicaCore.adopt_isr`)."""
    LEAD = "lead"
    """Lead a new epoch: end the role, prepare the log, then :meth:`ReplicaCore.lead`."""
    STEP_ASIDE = "step_aside"
    """Named leader, but recovery found damaged records while another ISR member can
    lead: end the role and wait for that member to take over, then follow it."""
    FENCED = "fenced"
    """Named leader in an epoch this replica gave up after a failed fsync
    (:meth:`ReplicaCore.cut`): stay out of any role until the metadata names it (or
    another member) in a later epoch."""
    FOLLOW = "follow"
    """Follow a (new) leader: end the role, then :meth:`ReplicaCore.follow`."""
    NONE = "none"
    """Not a replica any more: end the role."""


@attrs.define
class Outcome(Generic[P]):
    """What the driver does after an event."""

    hw: int | None = None
    """Set the log's high watermark to this (it is higher than the current one)."""
    acks: list[tuple[P, ErrorCode, str]] = attrs.field(factory=list)
    """Pending ALL acks to send now, with their error (``ErrorCode.NONE``: success)."""
    wake_replicas: bool = False
    """Parked replica fetches may have news (records flushed or a new HW)."""
    wake_isr: bool = False
    """Propose an ISR change now (a follower may have caught up)."""
    leadership_ended: bool = False
    """This replica stopped leading (requests waiting for it can be answered now)."""
    renew_epoch: int | None = None
    """The leader epoch this replica just gave up (a failed fsync's cut took back records a
    follower was sent): ask the metadata to renew the leadership in the next epoch."""


@attrs.define(eq=False)
class ReplicaCore(Generic[P]):
    """The decisions of one partition replica (see the module docstring).

    Thread-safety: none; the driver calls it from one thread (the event loop).
    """

    me: str
    """This server's id."""
    clustered: bool
    """False for a server alone: it leads from the start and needs no assignment."""
    policy: LeaderPolicy = attrs.field(factory=LeaderPolicy)
    """Durability and min ISR (the stream's), lag bound and HW-news delay (the server's)."""
    duplicate_window_s: float = attrs.field(default=120.0, validator=at_most(MAX_DURATION_S))
    """How long a plain message's ``Nats-Msg-Id`` is remembered (the stream's setting;
    bounded so that the sequencer's ``int(window * 1e9)`` cannot overflow)."""
    damaged: bool = False
    """The log may lack records it had (recovery or the scrub cut records below what was
    committed) until it caught up with a leader once."""
    found_damage: bool = False
    """Recovery or the scrub found damaged records (not only a torn tail, the normal
    outcome of a crash): with :attr:`damaged`, this replica does not lead while another
    ISR member can."""
    role: str = attrs.field(init=False)
    """``single``, ``leader``, ``follower`` or ``none``."""
    assignment: PartitionAssignment | None = None
    """The last assignment applied (None: none yet, or a server alone)."""
    leader_state: LeaderState | None = None
    """The replication state while leading (None otherwise)."""
    following: tuple[str, int, str] | None = None
    """(leader, epoch, address) while following."""
    pending: collections.deque[P] | None = None
    """ALL acks waiting for the HW, in offset order unless :attr:`pending_unordered`
    (made on first use: an idle partition holds no deque, 760 bytes each, issue 34)."""
    pending_unordered: bool = False
    """An ack was queued below an earlier one (a duplicate of an earlier record)."""
    producers: ProducerTable = attrs.field(factory=ProducerTable)
    """Recent idempotent producers' sequences (duplicates are answered
    DUPLICATE_SEQUENCE): rebuilt from the log tail when a leadership starts, forgotten
    above a cut."""
    fenced_epoch: int | None = None
    """The last leader epoch this replica gave up after a failed fsync (:meth:`cut`): it
    never leads that epoch, or an older one, again."""
    epoch_taken: int = -1
    """The newest leader epoch this replica took a role in (led or followed): an older one
    is never taken after it (an invariant, :meth:`_take_epoch`)."""

    def __attrs_post_init__(self) -> None:
        self.role = ROLE_NONE if self.clustered else ROLE_SINGLE

    # ------------------------------------------------------------------ views

    @property
    def leading(self) -> bool:
        """True if records may be appended here (leader or single)."""
        return self.role in (ROLE_LEADER, ROLE_SINGLE)

    def serves_consumers(self) -> bool:
        """True if consumers may fetch here: this replica leads, or follows while in the
        ISR (read replicas: records below its own HW)."""
        if self.leading:
            return True
        a = self.assignment
        return self.role == ROLE_FOLLOWER and a is not None and self.me in a.isr

    def enough_replicas(self) -> bool:
        """True if ALL acks may be accepted now."""
        state = self.leader_state
        return state is None or state.enough_replicas()

    def isr_text(self) -> str:
        """Why ALL acks are refused (for error messages)."""
        isr = self.leader_state.isr if self.leader_state is not None else ()
        return f"ISR {list(isr)} is below min_isr {self.policy.min_isr}"

    def corrupt(self) -> bool:
        """True while this replica should not lead if another ISR member can."""
        return self.damaged and self.found_damage

    # ------------------------------------------------------------------ assignments

    def assign(self, a: PartitionAssignment, address: str) -> Plan:
        """Record ``a`` (the partition's current assignment; ``address`` is its leader's)
        and say what it asks of this replica."""
        previous, self.assignment = self.assignment, a
        me = self.me
        if a.leader == me:
            if self.fenced_epoch is not None and a.leader_epoch <= self.fenced_epoch:
                return Plan.FENCED
            state = self.leader_state
            if state is not None and state.leader_epoch == a.leader_epoch:
                return Plan.ADOPT_ISR
            if self.corrupt() and any(r != me for r in a.isr):
                return Plan.STEP_ASIDE
            return Plan.LEAD
        if me in a.replicas:
            if previous is not None and self.following == (a.leader, a.leader_epoch, address):
                return Plan.KEEP
            return Plan.FOLLOW
        return Plan.NONE

    def end_role(self, next_role: str) -> Outcome[P]:
        """Stop the current role: leaving a leadership fails its pending ALL acks with
        NOT_LEADER (the record may or may not be committed: idempotent producers retry)."""
        out: Outcome[P] = Outcome(wake_replicas=True)
        self.role = next_role
        self.following = None
        if self.leader_state is not None:
            self.leader_state = None
            out.acks = self._take_all(
                ErrorCode.NOT_LEADER, "leadership moved; the message may or may not be stored"
            )
            out.leadership_ended = True
        return out

    def lead(
        self,
        a: PartitionAssignment,
        *,
        leo: int,
        flushed: int,
        hw: int,
        now: float,
        producers: ProducerTable | None = None,
    ) -> Outcome[P]:
        """Start leading epoch ``a.leader_epoch`` (after :meth:`end_role`, once the log is
        prepared: the epoch's start recorded; ``producers``: the producer table rebuilt
        from the log tail, None to keep the current one)."""
        self._take_epoch(a, "lead")
        if producers is not None:
            self.producers = producers
        self.leader_state = LeaderState.start(
            leader=self.me,
            leader_epoch=a.leader_epoch,
            replicas=a.replicas,
            isr=a.isr,
            policy=self.policy,
            leo=leo,
            flushed=flushed,
            hw=hw,
            now=now,
            partition_epoch=a.partition_epoch,
        )
        self.role = ROLE_LEADER
        return self._advance(hw)

    def adopt_isr(self, a: PartitionAssignment, hw: int) -> Outcome[P]:
        """Same epoch, new ISR from the metadata (an older partition epoch is ignored)."""
        state = self.leader_state
        if state is None or not state.set_isr(a.isr, a.partition_epoch):
            return Outcome()
        return self._advance(hw)

    def follow(self, a: PartitionAssignment, address: str) -> None:
        """Start following ``a.leader`` at ``address`` (after :meth:`end_role`)."""
        self._take_epoch(a, "follow")
        self.role = ROLE_FOLLOWER
        self.following = (a.leader or "", a.leader_epoch, address)

    def caught_up(self) -> None:
        """The follower fetched everything its leader had once: the log is whole again."""
        self.damaged = False

    def _take_epoch(self, a: PartitionAssignment, role: str) -> None:
        """Leader epochs only go forward on a replica (its metadata is applied in order)."""
        if a.leader_epoch < self.epoch_taken:
            raise ReplicaInvariantViolation(
                f"asked to {role} in leader epoch {a.leader_epoch} after taking a role in "
                f"epoch {self.epoch_taken}"
            )
        self.epoch_taken = a.leader_epoch

    # ------------------------------------------------------------------ leader and single

    def add_pending(self, p: P) -> None:
        """Queue an ALL ack until the HW passes ``p.offset``."""
        pending = self.pending
        if pending is None:
            pending = self.pending = collections.deque()
        elif pending and p.offset < pending[-1].offset:
            self.pending_unordered = True
        pending.append(p)

    def appended(self, leo: int, hw: int) -> Outcome[P] | None:
        """Records were appended; the log ends at ``leo`` (its HW is ``hw``). With
        durability ``written`` they are committed now (the outcome says so); otherwise
        None: a flush commits them."""
        state = self.leader_state
        if state is not None:
            if state.on_append(leo):
                return self._advance(hw)
            return None
        if self.policy.durability == DURABILITY_WRITTEN and self.role == ROLE_SINGLE and leo > hw:
            out: Outcome[P] = Outcome(hw=leo)
            if self.pending:  # (else none to take: no call per message)
                out.acks = self._take_below(leo, True)
            return out
        return None

    def flushed(self, flushed: int, *, leo: int, hw: int) -> Outcome[P]:
        """The log is fsynced below ``flushed`` (its LEO is ``leo``, its HW ``hw``)."""
        state = self.leader_state
        if state is not None:
            state.on_append(leo)
            if state.on_flush(flushed):
                out = self._advance(hw)
                out.wake_replicas = True
                return out
            return Outcome(wake_replicas=True)
        if self.role != ROLE_SINGLE:
            return Outcome()
        # Not Outcome[P](...): calling a subscripted generic goes through typing's
        # machinery (it tries to set __orig_class__) on every fsync.
        out = Outcome(hw=flushed if flushed > hw else None)
        if self.pending:  # (else none to take: no call per fsync)
            out.acks = self._take_below(max(hw, flushed), True)
        return out

    def cut(self, end: int, message: str) -> Outcome[P]:
        """An fsync failed and the log was cut back to ``end``, its last good sync: the
        ALL acks above it fail with STORAGE_ERROR and ``message`` (the producer sends
        again).

        A leader whose followers were sent records above ``end`` (they are served up to the
        leader's LEO) also gives up its epoch at once: the records it would append next at
        those offsets must not pass for the same history as theirs. Its other pending ALL
        acks fail with NOT_LEADER; the outcome's ``renew_epoch`` asks the driver to have
        the metadata renew the leadership in the next epoch, where the followers'
        reconciliation truncates them to ``end``."""
        state = self.leader_state
        fence = state is not None and state.on_cut(end)
        self.producers.forget_from(end)
        lost = [p for p in self.pending or () if p.offset >= end]
        if lost:
            self.pending = collections.deque(p for p in self.pending or () if p.offset < end)
        acks = [(p, ErrorCode.STORAGE_ERROR, message) for p in lost]
        if state is None or not fence:
            return Outcome(acks=acks)
        out = self.end_role(ROLE_NONE)
        out.acks = acks + out.acks
        self.fenced_epoch = out.renew_epoch = state.leader_epoch
        return out

    def fail_all(self, code: ErrorCode, message: str) -> Outcome[P]:
        """Fail every pending ALL ack (a failed flush, a stop)."""
        return Outcome(acks=self._take_all(code, message))

    def replica_fetched(
        self, follower: str, offset: int, flushed: int, now: float, *, hw: int, poll_s: float = 0.0
    ) -> Outcome[P]:
        """Leader: a replica fetch from ``follower`` at ``offset`` reporting ``flushed``,
        parked for up to ``poll_s`` if it has no records to send."""
        state = self.leader_state
        if state is None:
            return Outcome()
        moved = state.on_fetch(follower, offset, flushed, now, poll_s=poll_s)
        out = self._advance(hw) if moved else Outcome()  # not Outcome[P](): see flushed
        if follower not in state.isr and state.pending_isr is None:
            out.wake_isr = True  # maybe caught up: propose the expansion now
        return out

    def isr_proposal(self, now: float) -> tuple[tuple[str, ...], int] | None:
        """Leader: the ISR to propose now and the partition epoch it is based on, or None."""
        state = self.leader_state
        if state is None:
            return None
        proposal = state.isr_proposal(now)
        if proposal is None:
            return None
        return proposal, state.pending_base

    def isr_check_wait_s(self, now: float, interval_s: float) -> float:
        """Leader: how long the ISR check may sleep unless woken (a fetch that may expand
        the ISR wakes it): ``interval_s`` while a proposal is in flight or unresolved,
        else until an ISR follower could first lag (at least ``interval_s``, at most the
        lag bound). An idle leader thus checks about once per lag bound instead of every
        ``interval_s`` (thousands of partitions: thousands of wake-ups a second)."""
        state = self.leader_state
        if state is None or state.pending_isr is not None or state.unresolved:
            return interval_s
        due = state.next_shrink_s(now)
        if due is None:
            return max(interval_s, state.policy.lag_max_s)
        return max(interval_s, min(due, state.policy.lag_max_s))

    def proposal_done(
        self, state: LeaderState, proposal: tuple[str, ...], accepted: bool, *, hw: int
    ) -> Outcome[P]:
        """The ISR proposal made under ``state`` was answered (or timed out: not accepted)."""
        if self.leader_state is not state or not state.proposal_done(proposal, accepted):
            return Outcome()
        return self._advance(hw)

    def _advance(self, hw: int) -> Outcome[P]:
        """Leader: the HW of the leader state, and the acks it committed."""
        state = self.leader_state
        if state is None:
            return Outcome()
        out: Outcome[P] = Outcome(wake_replicas=True)
        if state.hw > hw:
            out.hw = hw = state.hw
        out.acks = self._take_below(hw, state.committed_on_enough())
        return out

    def _take_below(self, hw: int, enough: bool) -> list[tuple[P, ErrorCode, str]]:
        """Remove the pending acks below ``hw``: successes, or NOT_ENOUGH_REPLICAS unless
        ``enough``."""
        pending = self.pending
        if not pending:
            return []
        done: list[P] = []
        while pending and pending[0].offset < hw:
            done.append(pending.popleft())
        if self.pending_unordered:
            keep: collections.deque[P] = collections.deque()
            for p in pending:
                (done if p.offset < hw else keep).append(p)
            self.pending = keep
            self.pending_unordered = _unordered(keep)
        if enough:
            return [(p, ErrorCode.NONE, "") for p in done]
        text = (
            "committed on fewer than min_isr replicas (the ISR shrank before the record "
            f"committed); it may not survive a failure. {self.isr_text()}"
        )
        return [(p, ErrorCode.NOT_ENOUGH_REPLICAS, text) for p in done]

    def _take_all(self, code: ErrorCode, message: str) -> list[tuple[P, ErrorCode, str]]:
        out = [(p, code, message) for p in self.pending or ()]
        self.pending = None
        self.pending_unordered = False
        return out


def _unordered(items: Sequence[Pending] | collections.deque[P]) -> bool:
    previous = -1
    for p in items:
        if p.offset < previous:
            return True
        previous = p.offset
    return False
