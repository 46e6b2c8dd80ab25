"""One share-group member's decisions (spec/share-groups.md §5), pure and clock-free.

:class:`ShareMember` keeps the member's view (:class:`ShareState`), the leases it won, what it
may still hand out, and the outcomes (ack, nack, reject, dead, in progress) waiting to be sent
as settle records. A driver feeds it share-log records, append acknowledgements and the local
time, sends the claims and settles it returns, fetches the records of acquired offsets, writes
dead letters, and hands messages to the application. The async driver is
:class:`jetsdk.consumer.share_consumer.ShareConsumer`; the seeded simulation drives it too.

Not thread-safe: one driver owns one.
"""

from __future__ import annotations

import math
import zlib
from collections import deque
from collections.abc import Iterable

import attrs

from jetsdk.group.lease import ServerClockBound
from jetsdk.share.holdings import (
    Handout,
    HeldLease,
    InFlight,
    LeaseKey,
    LostOutcome,
    Outcomes,
    ShareConfig,
)
from jetsdk.share.pace import RateMeter
from jetsdk.share.records import Claim, Settle, runs_of
from jetsdk.share.state import (
    DEAD_PENDING,
    Acquired,
    ClaimLost,
    Fenced,
    Range,
    Returned,
    ShareState,
)

__all__ = [
    "LOOK_AHEAD",
    "TRIP_SAMPLES",
    "Handout",
    "HeldLease",
    "LeaseKey",
    "LostOutcome",
    "ShareConfig",
    "ShareMember",
]

TRIP_SAMPLES = 16
"""Append round trips remembered for the stop margin (and claim cycles for the look-ahead)."""
LOOK_AHEAD = 4.0
"""Claim cycles of work the member acquires ahead of its application at its measured rate
(spec §5, "Pacing"): a claim, its win read back and the records loaded take about one cycle,
so an application that takes messages fast is not starved between leases."""


@attrs.define(eq=False)
class ShareMember:
    """One member's view and decisions (see the module docstring)."""

    config: ShareConfig
    view: ShareState = attrs.field(init=False)
    clock: ServerClockBound = attrs.field(factory=ServerClockBound, init=False)
    held: dict[LeaseKey, HeldLease] = attrs.field(factory=dict, init=False)
    claiming: list[InFlight] = attrs.field(factory=list, init=False)
    """Claims sent and not yet seen in the log, in send order (forgotten after
    ``claim_timeout``)."""
    _trips: deque[float] = attrs.field(factory=lambda: deque(maxlen=TRIP_SAMPLES), init=False)
    _cycles: deque[float] = attrs.field(factory=lambda: deque(maxlen=TRIP_SAMPLES), init=False)
    """Claim cycles: local time from sending a claim to applying its win."""
    meter: RateMeter = attrs.field(init=False)
    """The application's measured rate (the driver reports its waits and hand-outs)."""
    _outcomes: dict[LeaseKey, Outcomes] = attrs.field(factory=dict, init=False)
    _turn: int = attrs.field(default=0, init=False)
    _rejecting: dict[LeaseKey, set[int]] = attrs.field(factory=dict, init=False)
    stopped_leases: int = attrs.field(default=0, init=False)
    """Leases whose waiting offsets were given back at their stop point (not handed out in
    time)."""
    lost: list[LostOutcome] = attrs.field(factory=list, init=False)
    """Outcomes of this member the log ignored (the driver reports and clears them)."""
    returned_total: int = attrs.field(default=0, init=False)
    """Offsets given back never handed out (at a stop point, paced out, or on close)."""

    def __attrs_post_init__(self) -> None:
        self.view = ShareState(self.config.group)
        self.meter = RateMeter(max(0.5, self.config.ack_deadline / 3))
        self._turn = zlib.crc32(self.config.member.encode()) % max(1, len(self.config.partitions))

    # -- inputs ---------------------------------------------------------------------------

    def on_record(
        self, offset: int, timestamp: int, value: bytes | memoryview, now: float | None = None
    ) -> list[Acquired]:
        """Apply one share-log record (read at local time ``now``, if given: a won claim's
        cycle then sizes the look-ahead); return the leases this member just won."""
        won: list[Acquired] = []
        for change in self.view.apply_bytes(offset, timestamp, value):
            if change.member != self.config.member or isinstance(change, Returned):
                continue
            if isinstance(change, Fenced):
                self._fenced(change)
                continue
            start = change.claimed_start if isinstance(change, Acquired) else change.start
            sent = self._forget_claim(change.stream, change.partition, start)
            if isinstance(change, ClaimLost):
                continue
            if sent is not None and now is not None:
                self._cycles.append(max(0.0, now - sent))
            won.append(change)
            key = (change.stream, change.partition, change.start, change.lease)
            r = self.view.partition(change.stream, change.partition).ranges[change.start]
            waiting: list[Handout] = []
            dead: list[Handout] = []
            for o, count, is_dead in change.offsets:
                item = Handout(
                    change.stream,
                    change.partition,
                    o,
                    count,
                    key,
                    is_dead,
                    r.dlq_from.get(o, 0),
                    r.reasons.get(o, "max_deliveries") if is_dead else "",
                )
                (dead if is_dead else waiting).append(item)
            self.held[key] = HeldLease(key, change.deadline, waiting, dead)
        return won

    def _fenced(self, change: Fenced) -> None:
        s = change.settle
        lost = self.lost
        for kind, runs in (("ack", s.acked), ("reject", s.rejected)):
            for a, b in runs:
                lost.extend(LostOutcome(s.stream, s.partition, o, kind) for o in range(a, b))
        lost.extend(LostOutcome(s.stream, s.partition, o, "nack") for o, _ in s.released)
        key = (s.stream, s.partition, s.start, s.lease)
        self._rejecting.pop(key, None)

    def on_appended(self, sent_at: float, timestamp_ns: int, acked_at: float | None = None) -> None:
        """An append sent at local ``sent_at`` was stored with server time ``timestamp_ns``
        (and acknowledged at local ``acked_at``: its round trip sizes the stop margin)."""
        self.clock.observe(sent_at, timestamp_ns)
        if acked_at is not None:
            self._trips.append(max(0.0, acked_at - sent_at))

    @property
    def ack_deadline(self) -> float:
        """The lease length, seconds: the group's settings record's, else the config's."""
        s = self.view.settings
        return self.config.ack_deadline if s is None else s.lease_ms / 1000

    @property
    def max_deliveries(self) -> int:
        """The delivery limit: the group's settings record's, else the config's."""
        s = self.view.settings
        return self.config.max_deliveries if s is None else s.max_deliveries

    def stop_margin(self) -> float:
        """How long before a lease's (local) deadline the member stops handing out and gives
        back what is left: the configured margin, or twice the slowest of its last
        :data:`TRIP_SAMPLES` append round trips if longer (so the ``returned`` settle is
        stored before the deadline), at most half the lease."""
        c = self.config
        trip = 2 * max(self._trips) if self._trips else 0.0
        deadline = self.ack_deadline
        base = c.margin if c.margin is not None else min(1.0, deadline / 10)
        return min(deadline / 2, max(base, trip))

    def server_now(self, now: float) -> int:
        """Estimate of the server clock (ns) at local time ``now`` (an upper bound)."""
        bound = self.clock.offset or 0.0
        return int((now + bound) * 1e9)

    # -- holding --------------------------------------------------------------------------

    def refresh(self, now: float) -> None:
        """Forget leases the view says are gone; give back (``returned``) what can no longer
        be handed out in time, at the stop point or earlier at the application's measured
        rate (spec §5, "Pacing"); queue the dead letters of rejected offsets once the view
        shows them dead_pending. :meth:`claims` calls it; a driver calls it every few tens of
        milliseconds."""
        for key in list(self._rejecting):
            stream, partition, start, _lease = key
            h = self.held.get(key)
            if h is None or not self.view.holds(*key, member=self.config.member):
                del self._rejecting[key]
                continue
            r = self.view.partition(stream, partition).ranges[start]
            offsets = self._rejecting[key]
            for o in sorted(offsets):
                if r.states[o - r.start] == DEAD_PENDING:
                    offsets.discard(o)
                    count = r.counts[o - r.start]
                    reason = r.reasons.get(o, "rejected")
                    dlq_from = r.dlq_from.get(o, 0)
                    h.dead.append(Handout(stream, partition, o, count, key, True, dlq_from, reason))
            if not offsets:
                del self._rejecting[key]
        for key in list(self.held):
            h = self.held[key]
            deadline = self.view.deadline_of(key[0], key[1], key[2], key[3])
            if deadline is None or not self.view.holds(*key, member=self.config.member):
                if not h.out:
                    del self.held[key]
                h.waiting.clear()
                h.dead.clear()
                continue
            h.deadline = deadline
            # Without a clock sample yet (the reader saw the claim before its append's ack
            # came back) nothing is handed out, and nothing is given back either.
            late = self.clock.offset is not None and not self._in_time(h, now)
            if (h.waiting or h.dead) and late:
                self.stopped_leases += 1
                h.dead.clear()  # the next holder writes them
                self._give_back(h, 0)
        self._pace(now)

    def _give_back(self, h: HeldLease, keep: int) -> None:
        """Return the waiting offsets of ``h`` after the first ``keep`` (settle ``returned``:
        never handed out, so this delivery does not count, spec §7)."""
        back = h.waiting[keep:]
        if back:
            del h.waiting[keep:]
            self._outcome(h.key).returned.update(item.offset for item in back)
            self.returned_total += len(back)

    def _pace(self, now: float) -> None:
        """Give back what the application cannot be handed before the stop point at its
        measured rate (with :attr:`ShareConfig.shed_slack`); ahead of a message are those of
        earlier leases, in hand-out order."""
        rate = self.meter.rate(now)
        if rate is None or self.clock.offset is None:
            return
        ahead = 0
        for h in self.held.values():
            n = len(h.waiting)
            if n == 0:
                continue
            local = self.clock.local_deadline(h.deadline)
            if local is None:
                continue
            left = local - self.stop_margin() - now
            fits = max(0, math.floor(left * rate * self.config.shed_slack) - ahead)
            if n > fits:
                self._give_back(h, fits)
                n = fits
            ahead += n

    def _in_time(self, h: HeldLease, now: float) -> bool:
        local = self.clock.local_deadline(h.deadline)
        if local is None:
            return False
        return now < local - self.stop_margin()

    def may_hold(self, key: LeaseKey, now: float) -> bool:
        """Whether the member may still hand out offsets of lease ``key`` at local ``now``."""
        h = self.held.get(key)
        return (
            h is not None
            and self.view.holds(*key, member=self.config.member)
            and self._in_time(h, now)
        )

    def take(self, now: float, limit: int) -> list[Handout]:
        """Up to ``limit`` messages to hand to the application now (in lease then offset
        order), only of leases still in time. Each one counts as a delivery: the driver
        must hand it to the application (or nack it)."""
        out: list[Handout] = []
        for h in self.held.values():
            if len(out) >= limit:
                break
            if not h.waiting or not self._in_time(h, now):
                continue
            n = min(limit - len(out), len(h.waiting))
            batch = h.waiting[:n]
            del h.waiting[:n]
            h.out.update(item.offset for item in batch)
            out.extend(batch)
        return out

    def take_dead(self, now: float) -> list[Handout]:
        """The dead letters this member must write now (``dead_pending`` offsets it holds)."""
        out: list[Handout] = []
        for h in self.held.values():
            if h.dead and self._in_time(h, now):
                out.extend(h.dead)
                h.dead.clear()
        return out

    def waiting_count(self) -> int:
        """Messages acquired and not yet handed out."""
        return sum(len(h.waiting) for h in self.held.values())

    def capacity(self, now: float) -> int:
        """How many messages this member may have acquired ahead of the application: what
        it can be handed in a fresh lease less the stop margin and as much again for the
        claim's and the records' trip, at its measured rate (one ``batch`` while the rate is
        unknown), at most ``batch * max_held``, and at most what it takes in
        :data:`LOOK_AHEAD` claim cycles (the slowest of the last :data:`TRIP_SAMPLES`) but
        not less than one ``batch`` for that. Below one message per lease it is 1 while
        the application waits for a message and 0 while it does not (it is stuck: what it
        would acquire it could not be handed)."""
        c = self.config
        rate = self.meter.rate(now)
        if rate is None:
            return c.batch
        deadline = self.ack_deadline
        usable = max(deadline * 0.1, deadline - 2 * self.stop_margin())
        fits = math.floor(rate * usable)
        if fits < 1:
            return 1 if self.meter.is_waiting else 0
        most = c.batch * c.max_held
        if self._cycles:
            most = min(most, max(c.batch, math.ceil(rate * LOOK_AHEAD * max(self._cycles))))
        return min(most, fits)

    # -- outcomes -------------------------------------------------------------------------

    def _outcome(self, key: LeaseKey) -> Outcomes:
        o = self._outcomes.get(key)
        if o is None:
            o = self._outcomes[key] = Outcomes()
        return o

    def _done(self, key: LeaseKey, offset: int) -> None:
        h = self.held.get(key)
        if h is not None:
            h.out.discard(offset)

    def ack(self, key: LeaseKey, offset: int) -> None:
        self._outcome(key).acked.add(offset)
        self._done(key, offset)

    def nack(self, key: LeaseKey, offset: int, not_before: int) -> None:
        self._outcome(key).released[offset] = max(0, not_before)
        self._done(key, offset)

    def reject(self, key: LeaseKey, offset: int, dlq_hw: int | None) -> None:
        """Reject: the offset becomes dead_pending for this member (it then writes the dead
        letter and calls :meth:`dead`)."""
        out = self._outcome(key)
        out.rejected.add(offset)
        self._rejecting.setdefault(key, set()).add(offset)
        if dlq_hw is not None:
            out.dlq_hw = dlq_hw if out.dlq_hw is None else min(out.dlq_hw, dlq_hw)

    def dead(self, key: LeaseKey, offset: int) -> None:
        """The dead letter of ``offset`` is written (or was found)."""
        self._outcome(key).dead.add(offset)
        self._done(key, offset)

    def in_progress(self, key: LeaseKey) -> None:
        """Restart the deadline of the whole lease ``key`` (settle ``extend``)."""
        self._outcome(key).extend = True

    def renew(self, key: LeaseKey, offset: int) -> None:
        """Restart the deadline of ``offset`` only (settle ``renew``: per message)."""
        self._outcome(key).renew.add(offset)

    def release_all(self) -> None:
        """On close: give back every acquired offset not yet handed out (``returned``: its
        count unchanged) and release those handed out and not settled (a nack: they were
        seen), so the next member can claim them at once."""
        for key, h in self.held.items():
            self._give_back(h, 0)
            h.dead.clear()
            out = self._outcome(key)
            for offset in h.out:
                if offset not in out.acked and offset not in out.rejected:
                    out.released.setdefault(offset, 0)
            h.out.clear()

    def pending_outcomes(self) -> int:
        return sum(o.size() + int(o.extend) for o in self._outcomes.values())

    def settles(self) -> list[Settle]:
        """Settle records for every queued outcome (the queue is emptied)."""
        out: list[Settle] = []
        c = self.config
        for key, o in self._outcomes.items():
            if o.empty():
                continue
            stream, partition, start, lease = key
            out.append(
                Settle(
                    group=c.group,
                    member=c.member,
                    stream=stream,
                    partition=partition,
                    start=start,
                    lease=lease,
                    acked=tuple(runs_of(o.acked)),
                    released=tuple(sorted(o.released.items())),
                    returned=tuple(runs_of(o.returned)),
                    renew=tuple(runs_of(o.renew)),
                    rejected=tuple(runs_of(o.rejected)),
                    dead=tuple(runs_of(o.dead)),
                    extend=o.extend,
                    dlq_hw=o.dlq_hw,
                )
            )
        self._outcomes.clear()
        return out

    # -- claiming -------------------------------------------------------------------------

    def _claim_time(self, now: float, wall_ns: int | None) -> int:
        if self.clock.offset is None and wall_ns is not None:
            return wall_ns
        return self.server_now(now)

    def needs_dlq_hw(
        self, stream: str, partition: int, now: float, wall_ns: int | None = None
    ) -> bool:
        """Whether a claim on this partition now could dead-letter something (so the driver
        should learn the dead-letter end offset first)."""
        t = self._claim_time(now, wall_ns)
        maxd = self.max_deliveries
        for r in self.view.claimable(stream, partition, t):
            for i in range(r.end - r.start):
                if r.available(i, t) and r.counts[i] >= maxd:
                    return True
        return False

    def claims(
        self,
        now: float,
        hws: dict[tuple[str, int], int],
        *,
        dlq_hw: int | None = None,
        wall_ns: int | None = None,
    ) -> list[Claim]:
        """Claims to send now. ``hws``: the consumed partitions' high watermarks the driver
        knows. The member claims only while its claims in flight plus its leases with offsets
        still waiting are fewer than ``max_held``, and only as much as :meth:`capacity`
        leaves room for (what is waiting plus what is being claimed), in claims of at least
        a quarter of a batch (or of the capacity, if smaller). A fair share: claims at SPEO
        take at most half of what is not acquired yet below the high watermarks plus what
        the member holds not handed out (and its claims in flight) less that (the other
        members get the rest), and a member holding nothing one batch (or all, if fewer)
        at least. ``wall_ns``: the local wall
        clock, the server-time estimate used before any append was acknowledged (a claim is
        checked against the log's own time, so a wrong estimate only costs a lost claim)."""
        c = self.config
        self.claiming = [f for f in self.claiming if now - f.sent <= c.claim_timeout]
        self.refresh(now)
        busy = sum(1 for h in self.held.values() if h.waiting) + len(self.claiming)
        capacity = self.capacity(now)
        mine = self.waiting_count() + sum(f.size for f in self.claiming)
        room = capacity - mine
        least = max(1, min(c.batch, capacity) // 4)
        # A fair share of the offsets not acquired yet (claims at SPEO only): hold at most
        # half of those plus what this member holds, so other members get the rest; a member
        # holding nothing may take a batch (or all, if fewer).
        unclaimed = self._unclaimed(hws)
        fresh = (unclaimed + mine) // 2 - mine
        if mine == 0:
            fresh = max(fresh, min(c.batch, unclaimed))
        t = self._claim_time(now, wall_ns)
        out: list[Claim] = []
        n = len(c.partitions)
        open_partitions = [c.partitions[(self._turn + k) % n] for k in range(n)]
        self._turn = (self._turn + 1) % max(1, n)
        # Round-robin passes, one claim per partition per pass. Without room for messages,
        # ranges with dead letters to write are still claimed (size 0: those only).
        while busy < c.max_held and open_partitions:
            for p in list(open_partitions):
                if busy >= c.max_held:
                    break
                size = min(c.batch, room) if room >= least else 0
                at_speo = min(size, fresh) if fresh >= least or mine == 0 else 0
                claim = self._claim_for(p, t, hws.get(p), dlq_hw, size, at_speo)
                if claim is None:
                    open_partitions.remove(p)
                    continue
                out.append(claim)
                size = claim.size or 0
                self.claiming.append(InFlight(p[0], p[1], claim.start, size, now))
                busy += 1
                room -= size
                if claim.start is None:
                    fresh -= size
        return out

    def _unclaimed(self, hws: dict[tuple[str, int], int]) -> int:
        """Offsets below the high watermarks and at or above SPEO that no claim of this
        member in flight asks for (what the group has not acquired yet, as far as it
        knows)."""
        total = 0
        for key in self.config.partitions:
            hw = hws.get(key)
            if hw is None:
                continue
            pending = sum(
                f.size
                for f in self.claiming
                if f.start is None and f.stream == key[0] and f.partition == key[1]
            )
            total += max(0, hw - self.view.partition(*key).speo - pending)
        return total

    def _dead_work(self, r: Range, t: int) -> bool:
        """Whether a claim of ``r`` at ``t`` would take a dead letter to write."""
        maxd = self.max_deliveries
        return any(
            r.available(i, t) and (r.states[i] == DEAD_PENDING or r.counts[i] >= maxd)
            for i in range(r.end - r.start)
        )

    def _claim_for(
        self,
        key: tuple[str, int],
        t: int,
        hw: int | None,
        dlq_hw: int | None,
        size: int,
        fresh: int,
    ) -> Claim | None:
        """A claim of up to ``size`` offsets of an existing range with offsets available at
        ``t``, else of the next ``fresh`` offsets at SPEO (start null: no race on the start;
        spec §3.1). ``size`` 0: only a range with dead letters to write."""
        c = self.config
        maxd = self.max_deliveries
        lease_ms = max(1, int(self.ack_deadline * 1000))
        stream, p = key
        mine = [f for f in self.claiming if f.stream == stream and f.partition == p]
        for r in self.view.claimable(stream, p, t):
            if any(f.start == r.start for f in mine):
                continue
            if size == 0 and not self._dead_work(r, t):
                continue
            size = min(size, r.end - r.start)
            return Claim(c.group, c.member, stream, p, r.start, r.end, lease_ms, maxd, dlq_hw, size)
        pending = sum(f.size for f in mine if f.start is None)
        if fresh <= 0 or hw is None or hw <= self.view.partition(stream, p).speo + pending:
            return None
        return Claim(c.group, c.member, stream, p, None, hw, lease_ms, maxd, dlq_hw, fresh)

    def claim_failed(self, stream: str, partition: int, start: int | None) -> None:
        """A claim's append failed (not stored), or the log showed it: forget it."""
        self._forget_claim(stream, partition, start)

    def _forget_claim(self, stream: str, partition: int, start: int | None) -> float | None:
        """Forget the oldest claim in flight with this start; when it was sent (None: none)."""
        for i, f in enumerate(self.claiming):
            if f.stream == stream and f.partition == partition and f.start == start:
                del self.claiming[i]
                return f.sent
        return None

    def held_keys(self) -> Iterable[LeaseKey]:
        return self.held.keys()
