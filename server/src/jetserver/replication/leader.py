"""Leader-side replication state of one partition: follower progress, ISR, high watermark.

Pure and sans-I/O: the caller feeds it events (the leader's own appends and flushes,
replica fetches, metadata ISR changes) with the current time from an injected clock, and
asks it what to do (the high watermark, the ISR to propose, whether ALL acks may proceed).
The same object drives the server (``broker/partition.py``) and the seeded simulation.

Rules (spec/cluster.md, "Replication"):

- The leader replicates what it has appended: replica fetches are served up to its LEO
  (its *replicable end*), so followers fsync alongside the leader. The HW counts the
  leader's own flushed offset (below). A failed fsync whose cut takes back records a
  follower was sent (:attr:`LeaderState.served_end`) ends the epoch (:meth:`on_cut`); a
  restart after a crash gets a new epoch from the metadata before it leads.
- A follower's progress is what its fetches report: ``leo`` = the fetch offset, ``flushed``
  = the ``replica_flushed`` field.
- **Caught up.** At a fetch at time ``t`` with offset ``o``, the follower is caught up at
  ``t`` if ``o >=`` the leader's replicable end now, or caught up at its previous fetch time
  if ``o >=`` the replicable end at its previous fetch (Kafka's rule: under steady load a
  follower is never exactly at the end, but it reaches where the leader was one fetch
  ago). A fetch parked at the leader's end keeps its follower caught up until it is
  answered (records came) or its long poll ends, so a long poll longer than the lag bound
  does not make an idle follower lag (Kafka instead requires
  ``replica.fetch.wait.max.ms`` < ``replica.lag.time.max.ms``).
- **Shrink.** An ISR follower not caught up for more than ``replica_lag_max_s`` is dropped.
- **Expand.** A non-ISR replica rejoins when, at a fetch, it has caught up (as above, at
  that fetch or the previous one; a fetch before the metadata removed it does not
  count), its offset is >= the start offset of the leader's current epoch (it has
  reconciled with this leader), and it vouches for the high
  watermark (its flushed offset, or its LEO if durability is ``replicated``, is >= the
  HW): it holds every committed record the way the stream's durability requires.
- **High watermark** = min over the *maximal* ISR (the committed ISR plus the members of a
  proposal in flight) of each follower's ``flushed`` offset (durability ``flushed``) or
  ``leo`` (durability ``replicated``) and of the leader's own flushed offset (the leader
  always fsyncs before it commits); it never decreases. A follower that has not fetched
  yet in this epoch holds it back. Using the maximal ISR means a shrink takes effect only
  once the metadata committed it, so no offset is committed on fewer replicas than the
  metadata's ISR.
- **HW news.** A parked replica fetch is answered at once for records its follower lacks;
  a HW its follower has not been sent answers it only once it has been parked for
  ``hw_news_delay_s`` (:meth:`fetch_has_news`): under load the HW rides with the next
  records, so a message costs each follower one round, not two (records, then the HW).
- **Min ISR.** ALL acks are refused (NOT_ENOUGH_REPLICAS) while the committed ISR has
  fewer than ``min_isr`` members.

Task safety: not thread-safe; one owner (the partition's event loop, or the simulation).
"""

from __future__ import annotations

from collections.abc import Sequence

import attrs

from jetserver.metadata.model import DURABILITIES, DURABILITY_FLUSHED, DURABILITY_WRITTEN
from jetserver.replication.invariants import ReplicaInvariantViolation

UNKNOWN = -1
"""Progress of a follower that has not fetched in this epoch."""
TIMER_SLACK_S = 1e-6
"""A fetch parked this close to :attr:`LeaderPolicy.hw_news_delay_s` counts as parked that
long: a timer set for the delay may fire a clock tick early (asyncio), and a parked time
measured as a difference of clock readings may round below it."""


@attrs.define
class FollowerProgress:
    """What the leader knows about one follower."""

    leo: int = UNKNOWN
    """The follower's log end offset (its last fetch offset)."""
    flushed: int = UNKNOWN
    """Every offset below this is fsynced on the follower (as last reported)."""
    last_fetch_s: float | None = None
    """Clock time of the last fetch (None: none in this epoch)."""
    end_at_last_fetch: int = UNKNOWN
    """The leader's replicable end (its LEO) when that fetch arrived."""
    last_caught_up_s: float = 0.0
    """Last time the follower was caught up (see the module docstring)."""
    hw_sent: int = UNKNOWN
    """The last high watermark sent to the follower."""
    caught_up_at_last_fetch: bool = False
    """Its last fetch offset reached the leader's replicable end at that fetch or at the one
    before."""
    poll_until_s: float = 0.0
    """When its last fetch's long poll ends: the fetch's arrival plus the long poll the
    leader serves it (a fetch with records to send is answered at its arrival)."""


def _known_durability(_: object, __: attrs.Attribute[str], durability: str) -> None:
    if durability not in DURABILITIES:
        raise ValueError(f"unknown durability {durability!r}")


@attrs.frozen
class LeaderPolicy:
    """How a leader commits and keeps its ISR: the stream's durability and min ISR, the
    server's lag bound and HW-news delay. One value per replica, handed whole to each
    :class:`LeaderState` it starts.

    Raises:
        ValueError: unknown durability.
    """

    durability: str = attrs.field(default=DURABILITY_FLUSHED, validator=_known_durability)
    """``flushed``, ``replicated`` or ``written`` (the stream's setting)."""
    min_isr: int = 1
    """Fewest ISR members for ALL acks (the stream's setting)."""
    lag_max_s: float = 10.0
    """Seconds a follower may stay not caught up before it leaves the ISR."""
    hw_news_delay_s: float = 0.0
    """A parked replica fetch with only a new HW for its follower (no records) is answered
    once it has been parked this long (:meth:`LeaderState.fetch_has_news`)."""


@attrs.define
class LeaderState:
    """Replication state of a partition led by ``leader`` in ``leader_epoch``.

    Create it when the leadership starts (:meth:`start`); discard it when the epoch ends.
    """

    leader: str
    """This server's id."""
    leader_epoch: int
    """The epoch this state belongs to."""
    replicas: tuple[str, ...]
    """Every replica, leader included, in metadata order."""
    isr: tuple[str, ...]
    """The ISR as committed in the metadata."""
    policy: LeaderPolicy
    """Durability, min ISR, lag bound, HW-news delay."""
    epoch_start_offset: int
    """The leader's LEO when this epoch started."""
    leo: int
    """The leader's log end offset."""
    flushed: int
    """The leader's flushed offset."""
    hw: int
    """The high watermark (never decreases)."""
    followers: dict[str, FollowerProgress] = attrs.field(factory=dict)
    """Progress of every other replica."""
    pending_isr: tuple[str, ...] | None = None
    """An ISR change proposed to the metadata and not answered yet."""
    unresolved: frozenset[str] = frozenset()
    """Members added by proposals without a definite outcome (refused or timed out): they
    may be in the metadata's ISR, so they keep counting for the HW until an accepted
    proposal or a metadata update says what the ISR is."""
    partition_epoch: int = 0
    """The metadata's partition epoch that :attr:`isr` reflects (ISR proposals are
    compare-and-set on it; an older metadata state never replaces a newer view)."""
    pending_base: int = 0
    """The partition epoch the proposal in flight was computed from."""
    served_end: int = 0
    """Replica fetches were sent records below this offset: those above the leader's
    flushed offset may be taken back by a failed fsync's cut (:meth:`on_cut`)."""
    _maximal: tuple[object, object, object, tuple[str, ...]] | None = attrs.field(
        default=None, init=False, eq=False, repr=False
    )
    """:attr:`maximal_isr` while a change is pending, with the (immutable) ``isr``,
    ``pending_isr`` and ``unresolved`` it was built from: a failover's re-pointed followers
    fetch thousands of times while their leaders' ISR proposals are pending, and each
    fetch's HW asks for it."""

    @classmethod
    def start(
        cls,
        *,
        leader: str,
        leader_epoch: int,
        replicas: Sequence[str],
        isr: Sequence[str],
        policy: LeaderPolicy,
        leo: int,
        flushed: int,
        hw: int,
        now: float,
        partition_epoch: int = 0,
    ) -> LeaderState:
        """The state at the start of a leadership.

        Every follower counts as caught up at ``now`` (it gets the policy's ``lag_max_s``
        to show up).

        Raises:
            ValueError: ``leader`` not among ``replicas``.
        """
        if leader not in replicas:
            raise ValueError(f"leader {leader!r} is not a replica")
        state = cls(
            leader=leader,
            leader_epoch=leader_epoch,
            replicas=tuple(replicas),
            isr=_ordered(replicas, set(isr) | {leader}),
            policy=policy,
            epoch_start_offset=leo,
            leo=leo,
            flushed=min(flushed, leo),
            hw=min(hw, leo),
            followers={r: FollowerProgress(last_caught_up_s=now) for r in replicas if r != leader},
            partition_epoch=partition_epoch,
        )
        state._recompute_hw()
        return state

    # ------------------------------------------------------------------ views

    @property
    def maximal_isr(self) -> tuple[str, ...]:
        """The committed ISR plus the members of a proposal in flight or unresolved."""
        isr, pending, unresolved = self.isr, self.pending_isr, self.unresolved
        if pending is None and not unresolved:
            return isr
        cached = self._maximal
        if (
            cached is not None
            and cached[0] is isr
            and cached[1] is pending
            and cached[2] is unresolved
        ):
            return cached[3]
        maximal = _ordered(self.replicas, set(isr) | set(pending or ()) | unresolved)
        self._maximal = (isr, pending, unresolved, maximal)
        return maximal

    def enough_replicas(self) -> bool:
        """True if ALL acks may be accepted: the committed ISR has ``min_isr`` members."""
        return len(self.isr) >= self.policy.min_isr

    def committed_on_enough(self) -> bool:
        """True if records committed now are on at least ``min_isr`` replicas."""
        return len(self.maximal_isr) >= self.policy.min_isr

    def _value(self, member: str) -> int:
        """The offset ``member`` vouches for (flushed, or a follower's LEO if replicated)."""
        if member == self.leader:
            return self.leo if self.policy.durability == DURABILITY_WRITTEN else self.flushed
        progress = self.followers.get(member)
        if progress is None:
            return UNKNOWN
        return progress.flushed if self.policy.durability == DURABILITY_FLUSHED else progress.leo

    @property
    def replicable_end(self) -> int:
        """Replica fetches are served records below this offset: the leader's LEO. Followers
        append and fsync them while the leader fsyncs its own copy; the HW still counts
        the leader's flushed offset (:meth:`_value`)."""
        return self.leo

    def note_served(self, end: int) -> None:
        """A replica fetch answer carries records below ``end``."""
        if end > self.served_end:
            self.served_end = end

    def _recompute_hw(self) -> bool:
        # The minimum of _value over the ISR, in one loop: three times a message at an RF
        # 3 leader (its flush, each follower's report), a generator and a call a member.
        durability = self.policy.durability
        leader, followers = self.leader, self.followers
        candidate: int | None = None
        for m in self.maximal_isr:
            if m == leader:
                value = self.leo if durability == DURABILITY_WRITTEN else self.flushed
            else:
                progress = followers.get(m)
                if progress is None:
                    value = UNKNOWN
                else:
                    flushed = durability == DURABILITY_FLUSHED
                    value = progress.flushed if flushed else progress.leo
            if candidate is None or value < candidate:
                candidate = value
        assert candidate is not None  # (the leader is always in its ISR)
        if candidate > self.hw:
            if candidate > self.leo:
                raise ReplicaInvariantViolation(
                    f"high watermark {candidate} would pass the leader's log end {self.leo} "
                    f"(epoch {self.leader_epoch}, ISR {self.maximal_isr})"
                )
            self.hw = candidate
            return True
        return False

    # ------------------------------------------------------------------ events

    def on_append(self, leo: int) -> bool:
        """The leader appended records; its LEO is now ``leo``. True if the HW moved (only
        with durability ``written``, where the leader vouches for its LEO)."""
        self.leo = max(self.leo, leo)
        return self.policy.durability == DURABILITY_WRITTEN and self._recompute_hw()

    def on_flush(self, flushed: int) -> bool:
        """The leader fsynced up to ``flushed``; True if the HW moved."""
        self.flushed = max(self.flushed, min(flushed, self.leo))
        return self._recompute_hw()

    def on_cut(self, leo: int) -> bool:
        """An fsync failed and the leader's log was cut back to ``leo``, its last good sync
        (never below the HW). True if a follower may hold records the cut took back (a
        replica fetch was answered with records above ``leo``): this epoch must end, or
        the records appended next at those offsets would diverge from theirs unnoticed."""
        self.leo = leo
        self.flushed = min(self.flushed, leo)
        self.hw = min(self.hw, leo)  # only durability ``written`` commits above flushed
        return self.served_end > leo

    def on_fetch(
        self, follower: str, offset: int, flushed: int, now: float, *, poll_s: float = 0.0
    ) -> bool:
        """A replica fetch from ``follower`` at ``offset`` reporting ``flushed``, which the
        leader may park for up to ``poll_s`` seconds (its long poll) if it has no records
        to send.

        Returns True if the high watermark moved.

        Raises:
            KeyError: ``follower`` is not a follower replica of this partition.
        """
        progress = self.followers[follower]
        if offset >= self.replicable_end:
            progress.last_caught_up_s = now
            progress.caught_up_at_last_fetch = True
        elif progress.last_fetch_s is not None and offset >= progress.end_at_last_fetch:
            # Caught up when the last fetch was answered: at its arrival, or, parked at
            # the end, when records came (at the latest when its long poll ended).
            answered = min(now, progress.poll_until_s)
            progress.last_caught_up_s = max(progress.last_caught_up_s, answered)
            progress.caught_up_at_last_fetch = True
        else:
            progress.caught_up_at_last_fetch = False
        progress.leo = offset
        progress.flushed = min(max(flushed, UNKNOWN), offset)
        progress.last_fetch_s = now
        progress.poll_until_s = now + poll_s if offset >= self.replicable_end else now
        progress.end_at_last_fetch = self.replicable_end
        return self._recompute_hw()

    def on_poll_ended(self, follower: str, now: float) -> None:
        """A fetch from ``follower`` parked at the end was answered at ``now`` (records
        came, a HW, or its long poll ended): it was caught up until then. Alive, it asks
        again at once (:meth:`on_fetch`); gone meanwhile, it is caught up no longer."""
        progress = self.followers.get(follower)
        if progress is not None:
            progress.poll_until_s = min(progress.poll_until_s, now)

    def note_hw_sent(self, follower: str, hw: int) -> None:
        """The fetch answer to ``follower`` carried ``hw``."""
        progress = self.followers.get(follower)
        if progress is not None:
            progress.hw_sent = max(progress.hw_sent, hw)

    def fetch_has_news(self, follower: str, offset: int, leo: int, parked_s: float) -> bool:
        """True if a replica fetch from ``follower`` at ``offset``, parked for ``parked_s``
        seconds (0 on arrival), is answered now (the leader's log ends at ``leo``): it lacks
        records, or it has not been sent the current high watermark and has been parked for
        :attr:`LeaderPolicy.hw_news_delay_s`. Otherwise it parks until one of them holds or its long
        poll ends; :meth:`hw_news_due_s` says when to look again."""
        return offset < leo or (
            parked_s + TIMER_SLACK_S >= self.policy.hw_news_delay_s
            and self.follower_needs_hw(follower)
        )

    def hw_news_due_s(self, follower: str, parked_s: float) -> float | None:
        """Seconds from now until a fetch from ``follower`` parked for ``parked_s`` is
        answered for its HW news alone (0: now), or None if it has none (records or the end
        of its long poll answer it)."""
        if not self.follower_needs_hw(follower):
            return None
        due = self.policy.hw_news_delay_s - parked_s
        return due if due > TIMER_SLACK_S else 0.0

    def follower_needs_hw(self, follower: str) -> bool:
        """True if ``follower`` has not been told the current high watermark."""
        progress = self.followers.get(follower)
        return progress is not None and progress.hw_sent < self.hw

    def set_isr(self, isr: Sequence[str], partition_epoch: int | None = None) -> bool:
        """The metadata committed ``isr`` for this epoch (at ``partition_epoch``, if
        known); True if the HW moved. A state older than the view's is ignored.

        A member the metadata removed must catch up at a new fetch to rejoin (a server
        that left the ISRs as it shut down must not be added back by its last fetch)."""
        if partition_epoch is not None:
            if partition_epoch < self.partition_epoch:
                return False
            self.partition_epoch = partition_epoch
        for member in set(self.isr) - set(isr) - {self.leader}:
            progress = self.followers.get(member)
            if progress is not None:
                progress.caught_up_at_last_fetch = False
        self.isr = _ordered(self.replicas, set(isr) | {self.leader})
        self.unresolved = frozenset()
        if self.pending_isr is not None and set(self.pending_isr) == set(self.isr):
            self.pending_isr = None
        return self._recompute_hw()

    # ------------------------------------------------------------------ ISR changes

    def _rejoins(self, member: str) -> bool:
        progress = self.followers[member]
        return (
            progress.caught_up_at_last_fetch
            and progress.leo >= self.epoch_start_offset
            and self._value(member) >= self.hw
        )

    def _caught_up_until(self, member: str, now: float | None) -> float:
        """The last time ``member`` was caught up, as of ``now`` (None: if nothing changes
        from now on). A fetch that reached the leader's end keeps it caught up while parked
        there: until it is answered (:meth:`on_poll_ended`: records came, or a HW) or its
        long poll ends. A follower gone while parked on an idle partition thus counts
        until its long poll would have ended, as a delayed fetch does in Kafka."""
        progress = self.followers[member]
        if progress.leo < progress.end_at_last_fetch:
            return progress.last_caught_up_s
        parked = progress.poll_until_s if now is None else min(now, progress.poll_until_s)
        return max(progress.last_caught_up_s, parked)

    def _lagging(self, member: str, now: float) -> bool:
        return now - self._caught_up_until(member, now) > self.policy.lag_max_s

    def wanted_isr(self, now: float) -> tuple[str, ...]:
        """The ISR the rules call for now (may equal the committed one)."""
        keep = set()
        for member in self.replicas:
            if member == self.leader:
                keep.add(member)
            elif member in self.isr:
                if not self._lagging(member, now):
                    keep.add(member)
            elif self._rejoins(member):
                keep.add(member)
        return _ordered(self.replicas, keep)

    def next_shrink_s(self, now: float) -> float | None:
        """Seconds until an ISR follower could first count as lagging (0: already may),
        if nothing else changes; None if the ISR has no follower. An ISR check before then
        finds nothing to shrink (expansions come with fetches: see ``wake_isr``)."""
        due = [
            self._caught_up_until(m, None) + self.policy.lag_max_s - now
            for m in self.isr
            if m != self.leader and m in self.followers
        ]
        return max(min(due), 0.0) if due else None

    def isr_proposal(self, now: float) -> tuple[str, ...] | None:
        """The ISR to propose now, or None (no change, or a proposal is in flight).

        The caller proposes it to the metadata and reports the outcome with
        :meth:`proposal_done`; meanwhile the HW is computed over the maximal ISR.
        """
        if self.pending_isr is not None:
            return None
        wanted = self.wanted_isr(now)
        if set(wanted) == set(self.isr) and not self.unresolved:
            return None
        self.pending_isr = wanted
        self.pending_base = self.partition_epoch
        return wanted

    def proposal_done(self, isr: tuple[str, ...], accepted: bool) -> bool:
        """The proposal of ``isr`` was applied (``accepted``), or refused or without outcome
        (not ``accepted``); True if the HW moved.

        After a failed proposal its added members stay in :attr:`unresolved` (they count
        for the HW) until a later proposal is accepted or :meth:`set_isr` brings the
        metadata's ISR; the next :meth:`isr_proposal` proposes again.
        """
        base = self.pending_base
        if self.pending_isr is not None and set(self.pending_isr) == set(isr):
            self.pending_isr = None
        if accepted:
            # Applied as a compare-and-set on ``base``: the metadata's ISR became ``isr`` at
            # partition epoch base + 1 (or stayed ``isr``). Adopt that unless the view
            # already reflects a later metadata state (set_isr came first): the view only
            # moves forward along the metadata's history.
            if self.partition_epoch > base:
                return self._recompute_hw()
            changed = set(isr) != set(self.isr)
            return self.set_isr(isr, base + 1 if changed else base)
        self.unresolved = self.unresolved | (frozenset(isr) - set(self.isr))
        return self._recompute_hw()


def _ordered(replicas: Sequence[str], members: set[str]) -> tuple[str, ...]:
    """``members`` in replica-list order (members outside the list are dropped)."""
    return tuple(r for r in replicas if r in members)
