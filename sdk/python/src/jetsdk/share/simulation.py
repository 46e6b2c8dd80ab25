"""A seeded simulation of a share group (a test kit for spec/share-groups.md §9).

N members run the real :class:`~jetsdk.share.member.ShareMember` (and so the real
:class:`~jetsdk.share.state.ShareState`) over one simulated share log and one simulated
stream. The log delays appends (sometimes long), drops some, and sometimes stores a record
whose acknowledgement is lost; the server stamps records with its own clock, which may jump
forward by less than the lease margin. Members have skewed local clocks that drift slowly and
sometimes jump forward; they crash (and restart as new incarnations), and pause for longer than
the lease. Workers ack most messages, nack some (with delays), reject a few, keep some busy
past the lease with ``in_progress``, and some "poison" offsets are always nacked (so they reach
``max_deliveries`` and are dead-lettered). Then the faults stop and every offset must finish.

With ``strict`` (no process or log faults: no crashes, pauses, drops, lost acks, slow appends
or stalled reads) the stronger delivery-count rule of spec §7 is checked too: a message's
count is exactly the number of times it was handed to the application, so acquiring and not
handing out never counts. The stuck-application (``stuck_rate``) and slow-consumer
(``task_time``) scenarios run this way.

The checks (spec §9) run at every hand-out and at the end; a failure raises
:class:`InvariantViolation` whose message starts with the seed. Everything is driven by one
``random.Random(seed)``. Single-threaded; no I/O.
"""

from __future__ import annotations

import heapq
import math
import random
from collections import Counter, defaultdict

import attrs

from jetsdk.share.member import Handout, ShareConfig, ShareMember
from jetsdk.share.records import Claim, Settings, ShareRecord, encode_share_record
from jetsdk.share.state import (
    ACKED,
    ACQUIRED,
    DEAD,
    DEAD_PENDING,
    Acquired,
    Returned,
    ShareState,
)

__all__ = ["InvariantViolation", "SimConfig", "SimResult", "Simulation", "run"]

EPOCH_NS = 1_700_000_000 * 10**9
GROUP = "sim"
STREAM = "jobs"


class InvariantViolation(AssertionError):
    """A property of spec/share-groups.md §9 failed."""


@attrs.frozen
class SimConfig:
    members: int = 4
    partitions: int = 2
    messages: int = 150
    """Per partition."""
    lease: float = 1.0
    max_deliveries: int = 3
    batch: int = 20
    fault_time: float = 12.0
    settle_time: float = 30.0
    step: float = 0.02
    max_append_delay: float = 0.05
    slow_append_rate: float = 0.02
    """Share of appends delayed up to a lease."""
    drop_rate: float = 0.03
    ack_loss_rate: float = 0.03
    crash_rate: float = 0.1
    """Per member per simulated second."""
    pause_rate: float = 0.1
    nack_rate: float = 0.06
    reject_rate: float = 0.02
    long_rate: float = 0.02
    poison: int = 3
    """Offsets per partition always nacked."""
    concurrency: int = 3
    """Tasks a member works on at once."""
    max_read_lag: float = 0.05
    stall_rate: float = 0.1
    """Per member per second: its reads of the log stall for up to two leases."""
    max_skew: float = 5.0
    drift: float = 0.0005
    jump_rate: float = 0.02
    server_jump: float = 0.05
    """Largest forward jump of the server clock (must stay below the lease margin)."""
    trickle: bool = True
    """Produce half of the messages at the start and the rest over time (else all at once)."""
    crash_all_at: float | None = None
    """Crash every member at this time (their replacements start with no clock samples)."""
    task_time: tuple[float, float] = (0.002, 0.05)
    """A task's duration, uniform in this interval, seconds."""
    stuck_rate: float = 0.0
    """Share of tasks on which the application is stuck for ``stuck_time`` (no
    ``in_progress``: the lease runs out while it holds the message)."""
    stuck_time: float = 0.0
    strict: bool = False
    """Check that delivery counts equal hand-outs (needs the process and log faults off)."""
    group_settings: bool = False
    """The log starts with a settings record (``lease``, ``max_deliveries``) and the members
    are configured with a longer lease and a higher limit: the group's must win."""

    @classmethod
    def fault_free(cls, **kw: object) -> SimConfig:
        """No crashes, pauses, drops, lost acks, slow appends or stalls; ``strict`` on."""
        base: dict[str, object] = dict(
            drop_rate=0.0,
            ack_loss_rate=0.0,
            slow_append_rate=0.0,
            crash_rate=0.0,
            pause_rate=0.0,
            stall_rate=0.0,
            long_rate=0.0,
            strict=True,
        )
        base.update(kw)
        return cls(**base)  # type: ignore[arg-type]


@attrs.frozen
class SimResult:
    seed: int
    handouts: int
    acked: int
    dead: int
    crashes: int
    pauses: int
    claims: int
    records: int
    returned: int = 0
    """Offsets given back never handed out (their delivery not counted)."""


@attrs.define(eq=False)
class _Task:
    key: tuple[str, int, int, int]
    offset: int
    done_at: float
    outcome: str
    nack_delay: float
    next_extend: float | None


@attrs.define(eq=False)
class _Member:
    name: str
    core: ShareMember
    skew: float
    rate: float
    read_upto: int = 0
    tasks: list[_Task] = attrs.field(factory=list)
    paused_until: float = 0.0
    paused_at: float = -1.0
    next_flush: float = -math.inf
    read_lag: float = 0.0
    stall_until: float = 0.0
    waiting: bool = False
    """The application has a free slot and nothing to work on (the rate meter's idle)."""


@attrs.define(eq=False)
class _Append:
    member: str
    sent_local: float
    value: bytes
    is_claim: tuple[str, int, int | None] | None


class Simulation:
    """One seeded run (see the module docstring)."""

    def __init__(self, seed: int, config: SimConfig | None = None) -> None:
        self.seed = seed
        self.cfg = config or SimConfig()
        self.rng = random.Random(seed)
        self.now = 0.0
        self.server_offset = 0.0
        self.log: list[tuple[int, bytes, float]] = []  # (timestamp, value, stored at)
        self.ref = ShareState(GROUP)
        self.inflight: list[tuple[float, int, _Append, bool, bool]] = []
        self.acks: list[tuple[float, int, str, float, int]] = []  # acks on their way back
        self._seq = 0
        self._n = 0
        self.members: dict[str, _Member] = {}
        self.dlq: list[tuple[int, int, int, str]] = []  # (partition, offset, count, reason)
        self.acquisitions: Counter[tuple[int, int]] = Counter()
        self.handed: Counter[tuple[int, int]] = Counter()
        self.handed_after_pause: set[str] = set()
        self.crashes = self.pauses = self.claims = self.handouts = self.returned = 0
        self.poison = {
            (p, o)
            for p in range(self.cfg.partitions)
            for o in self.rng.sample(range(self.cfg.messages), self.cfg.poison)
        }
        self.produced = {p: 0 for p in range(self.cfg.partitions)}
        if self.cfg.group_settings:
            settings = Settings(GROUP, "admin", int(self.cfg.lease * 1000), self.cfg.max_deliveries)
            self.log.append((EPOCH_NS, encode_share_record(settings), 0.0))
            self.ref.apply_bytes(0, EPOCH_NS, self.log[0][1])
        for _ in range(self.cfg.members):
            self._start_member()

    def fail(self, text: str) -> InvariantViolation:
        return InvariantViolation(f"seed {self.seed} at t={self.now:.2f}: {text}")

    # -- the world ------------------------------------------------------------------------

    def _server_ns(self) -> int:
        return EPOCH_NS + int((self.now + self.server_offset) * 1e9)

    def _start_member(self) -> None:
        self._n += 1
        name = f"m{self._n}"
        cfg = ShareConfig(
            group=GROUP,
            member=name,
            partitions=tuple((STREAM, p) for p in range(self.cfg.partitions)),
            ack_deadline=self.cfg.lease * (2 if self.cfg.group_settings else 1),
            max_deliveries=self.cfg.max_deliveries + (2 if self.cfg.group_settings else 0),
            batch=self.cfg.batch,
            claim_timeout=self.cfg.lease * 2,
        )
        skew = self.rng.uniform(-self.cfg.max_skew, self.cfg.max_skew)
        rate = 1 + self.rng.uniform(-self.cfg.drift, self.cfg.drift)
        self.members[name] = _Member(name, ShareMember(cfg), skew, rate)

    def _local(self, m: _Member) -> float:
        return self.now * m.rate + m.skew

    def _append(self, m: _Member, record: ShareRecord) -> None:
        faults = self.now < self.cfg.fault_time
        delay = self.rng.uniform(0.001, self.cfg.max_append_delay)
        if faults and self.rng.random() < self.cfg.slow_append_rate:
            delay = self.rng.uniform(0, self.cfg.lease)
        dropped = faults and self.rng.random() < self.cfg.drop_rate
        ack_lost = faults and self.rng.random() < self.cfg.ack_loss_rate
        claim = None
        if isinstance(record, Claim):
            claim = (record.stream, record.partition, record.start)
        item = _Append(m.name, self._local(m), encode_share_record(record), claim)
        self._seq += 1
        heapq.heappush(self.inflight, (self.now + delay, self._seq, item, dropped, ack_lost))

    def _deliver_appends(self) -> None:
        while self.inflight and self.inflight[0][0] <= self.now:
            _, _, item, dropped, ack_lost = heapq.heappop(self.inflight)
            m = self.members.get(item.member)
            if dropped:
                if m is not None and item.is_claim is not None:
                    m.core.claim_failed(*item.is_claim)
                continue
            ts = max(self._server_ns(), self.log[-1][0] if self.log else 0)
            offset = len(self.log)
            self.log.append((ts, item.value, self.now))
            for change in self.ref.apply_bytes(offset, ts, item.value):
                if isinstance(change, Acquired):
                    self.claims += 1
                    for o, _count, dead in change.offsets:
                        if not dead:
                            self.acquisitions[(change.partition, o)] += 1
                elif isinstance(change, Returned):
                    self.returned += len(change.offsets)
                    for o in change.offsets:
                        self.acquisitions[(change.partition, o)] -= 1
            if m is None:
                continue
            if ack_lost:
                if item.is_claim is not None:
                    m.core.claim_failed(*item.is_claim)
            else:
                # The ack comes back a little later: readers may see the record first.
                back = self.now + self.rng.uniform(0, self.cfg.max_append_delay)
                self._seq += 1
                heapq.heappush(self.acks, (back, self._seq, item.member, item.sent_local, ts))
        while self.acks and self.acks[0][0] <= self.now:
            _, _, name, sent_local, ts = heapq.heappop(self.acks)
            member = self.members.get(name)
            if member is not None:
                member.core.on_appended(sent_local, ts, self._local(member))

    def _produce(self) -> None:
        # Half of the messages at the start, the rest over the first half of the fault phase.
        for p in range(self.cfg.partitions):
            frac = 0.5 + 0.5 * min(1.0, self.now / (self.cfg.fault_time / 2))
            if not self.cfg.trickle:
                frac = 1.0
            self.produced[p] = max(self.produced[p], int(self.cfg.messages * frac))

    # -- members --------------------------------------------------------------------------

    def _faults(self, m: _Member) -> bool:
        """Maybe crash or pause ``m``; True if it is gone for this step."""
        c = self.cfg
        if self.now >= c.fault_time:
            return False
        if self.rng.random() < c.crash_rate * c.step:
            self.crashes += 1
            del self.members[m.name]
            self._start_member()
            return True
        if self.rng.random() < c.pause_rate * c.step:
            self.pauses += 1
            m.paused_at = self.now
            m.paused_until = self.now + self.rng.uniform(c.lease * 0.5, c.lease * 3)
            return True
        if self.rng.random() < c.stall_rate * c.step:
            m.stall_until = self.now + self.rng.uniform(0, 2 * c.lease)
        if self.rng.random() < c.step:
            m.read_lag = self.rng.uniform(0, c.max_read_lag)
        if self.rng.random() < c.jump_rate * c.step:
            m.skew += self.rng.uniform(0, 2.0)  # forward jump: estimates only get safer
        return False

    def _read(self, m: _Member, *, everything: bool = False) -> None:
        lag = 0.0 if everything else m.read_lag
        if not everything and self.now < m.stall_until:
            return
        while m.read_upto < len(self.log):
            ts, value, stored = self.log[m.read_upto]
            if stored > self.now - lag:
                return
            m.core.on_record(m.read_upto, ts, value, self._local(m))
            m.read_upto += 1

    def _check_handout(self, m: _Member, h: Handout) -> None:
        stream, p, start, lease = h.lease
        ps = self.ref.partition(stream, p)
        r = ps.ranges.get(start)
        held = None if r is None else r.leases.get(lease)
        if r is None or held is None or held.holder != m.name:
            raise self.fail(f"{m.name} hands out {p}/{h.offset} without holding lease {lease}")
        if r.owners[h.offset - r.start] != lease:
            raise self.fail(f"{m.name} hands out {p}/{h.offset} held by another lease")
        if self._server_ns() >= r.deadline_at(h.offset - r.start):
            raise self.fail(f"{m.name} hands out {p}/{h.offset} after its lease's deadline")
        state = r.states[h.offset - r.start]
        want = DEAD_PENDING if h.dead_pending else ACQUIRED
        if state != want:
            raise self.fail(f"{m.name} hands out {p}/{h.offset} in state {state}")
        if not h.dead_pending:
            key = (p, h.offset)
            self.handed[key] += 1
            if h.delivery_count != self.acquisitions[key]:
                raise self.fail(
                    f"delivery_count {h.delivery_count} of {p}/{h.offset} but "
                    f"{self.acquisitions[key]} acquisitions"
                )
            if self.handed[key] > h.delivery_count:
                raise self.fail(f"{p}/{h.offset} handed out more often than counted")
            if self.cfg.strict and self.handed[key] != h.delivery_count:
                raise self.fail(
                    f"{p}/{h.offset} handed out with delivery_count {h.delivery_count} on its "
                    f"hand-out {self.handed[key]}: a delivery counted that nobody saw"
                )

    def _dead_letter(self, m: _Member, h: Handout) -> None:
        found = any(d[0] == h.partition and d[1] == h.offset for d in self.dlq[h.dlq_from :])
        if not found:
            p, o = h.partition, h.offset
            self.dlq.append((p, o, h.delivery_count, h.reason))
            if self.cfg.strict and h.delivery_count != self.handed[(p, o)]:
                raise self.fail(
                    f"{p}/{o} dead-lettered with count {h.delivery_count}, handed out "
                    f"{self.handed[(p, o)]} times"
                )
        m.core.dead(h.lease, h.offset)

    def _step_member(self, m: _Member) -> None:
        if self.now < m.paused_until:
            return
        if m.paused_at >= 0:
            m.paused_at = -1.0
        if self._faults(m):
            return
        local = self._local(m)
        self._read(m)
        core = m.core
        rng = self.rng
        # Finish tasks.
        for task in list(m.tasks):
            if task.next_extend is not None and local >= task.next_extend:
                core.renew(task.key, task.offset)  # per message (in_progress: the lease)
                task.next_extend = local + self.cfg.lease / 3
            if local < task.done_at:
                continue
            m.tasks.remove(task)
            if task.outcome == "ack":
                core.ack(task.key, task.offset)
            elif task.outcome == "nack":
                core.nack(
                    task.key, task.offset, core.server_now(local) + int(task.nack_delay * 1e9)
                )
            else:
                core.reject(task.key, task.offset, len(self.dlq))
        # Dead letters, then hand out (the meter sees the application wait while it has a
        # free slot and nothing to work on).
        for h in core.take_dead(local):
            self._check_handout(m, h)
            self._dead_letter(m, h)
        free = max(0, self.cfg.concurrency - len(m.tasks))
        given = core.take(local, free)
        if m.waiting and len(given) == free:
            core.meter.done_waiting(local, len(given))
            m.waiting = False
        else:
            core.meter.handed(local, len(given))
            if not m.waiting and len(given) < free:
                core.meter.waiting(local)
                m.waiting = True
        for h in given:
            self._check_handout(m, h)
            self.handouts += 1
            poison = (h.partition, h.offset) in self.poison
            roll = rng.random()
            outcome = "ack"
            if poison or roll < self.cfg.nack_rate:
                outcome = "nack"
            elif roll < self.cfg.nack_rate + self.cfg.reject_rate:
                outcome = "reject"
            long = rng.random() < self.cfg.long_rate
            duration = self.cfg.lease * 1.5 if long else rng.uniform(*self.cfg.task_time)
            if rng.random() < self.cfg.stuck_rate:
                duration = self.cfg.stuck_time
            m.tasks.append(
                _Task(
                    h.lease,
                    h.offset,
                    local + duration,
                    outcome,
                    rng.uniform(0, 0.3),
                    local + self.cfg.lease / 3 if long else None,
                )
            )
        # Flush outcomes and claim.
        if local >= m.next_flush:
            m.next_flush = local + 0.02
            for s in core.settles():
                self._append(m, s)
        hws = {(STREAM, p): n for p, n in self.produced.items()}
        dlq_hw = len(self.dlq)
        wall = EPOCH_NS + int(local * 1e9)
        for c in core.claims(local, hws, dlq_hw=dlq_hw, wall_ns=wall):
            self._append(m, c)

    # -- running and checking -------------------------------------------------------------

    def run(self) -> SimResult:
        c = self.cfg
        steps = int((c.fault_time + c.settle_time) / c.step)
        for _ in range(steps):
            self.now += c.step
            if self.now < c.fault_time and self.rng.random() < 0.5 * c.step:
                self.server_offset += self.rng.uniform(0, c.server_jump)
            self._produce()
            if c.crash_all_at is not None and c.crash_all_at <= self.now < c.crash_all_at + c.step:
                for name in list(self.members):
                    del self.members[name]
                    self.crashes += 1
                    self._start_member()
            self._deliver_appends()
            for m in list(self.members.values()):
                if m.name in self.members:
                    self._step_member(m)
            if self.now > c.fault_time and self._all_finished():
                break
        self._check_end()
        total_acked = sum(ps.acked_total for ps in self.ref.partitions.values())
        total_dead = sum(ps.dead_total for ps in self.ref.partitions.values())
        return SimResult(
            self.seed,
            self.handouts,
            total_acked,
            total_dead,
            self.crashes,
            self.pauses,
            self.claims,
            len(self.log),
            self.returned,
        )

    def _all_finished(self) -> bool:
        return (
            all(
                self.ref.partition(STREAM, p).spso >= c
                for p, c in self.produced.items()
                if c == self.cfg.messages
            )
            and len(self.produced) == self.cfg.partitions
        )

    def _check_end(self) -> None:
        if not self._all_finished():
            left = {p: self.ref.partition(STREAM, p).spso for p in self.produced}
            raise self.fail(f"not every offset finished: SPSO {left} of {self.cfg.messages}")
        dead_letters: dict[tuple[int, int], int] = defaultdict(int)
        for p, o, _count, _reason in self.dlq:
            dead_letters[(p, o)] += 1
        for key, n in dead_letters.items():
            if n != 1:
                raise self.fail(f"{key} is in the dead-letter stream {n} times")
        for key in self.poison:
            if dead_letters.get(key) != 1:
                raise self.fail(f"poison offset {key} was not dead-lettered once")
        total_dead = sum(ps.dead_total for ps in self.ref.partitions.values())
        if total_dead != len(dead_letters):
            raise self.fail(f"{total_dead} dead in the state, {len(dead_letters)} dead letters")
        for (p, o), n in self.acquisitions.items():
            if n > self.cfg.max_deliveries:
                raise self.fail(f"{p}/{o} acquired {n} times > max_deliveries")
        want = self.ref.snapshot()
        for m in self.members.values():
            self._read(m, everything=True)
            if m.core.view.snapshot() != want:
                raise self.fail(f"{m.name}'s view differs from the reference state")
        # A state-level check: nothing is left acquired and the counts add up.
        for p in range(self.cfg.partitions):
            ps = self.ref.partition(STREAM, p)
            if ps.acked_total + ps.dead_total != self.cfg.messages:
                raise self.fail(f"partition {p}: {ps.acked_total} acked + {ps.dead_total} dead")
        _ = (ACKED, DEAD)


def run(seed: int, config: SimConfig | None = None) -> SimResult:
    """Run one seeded simulation; raise :class:`InvariantViolation` if a property fails."""
    return Simulation(seed, config).run()
