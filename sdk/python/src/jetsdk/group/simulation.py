"""A seeded, discrete-event simulation of a consumer group (a test kit for spec/groups.md).

N member slots run :class:`~jetsdk.group.member.GroupMember` over one simulated group-log
partition, and consume simulated data partitions with at-least-once commits. The log delays,
drops and FIFO-orders each member's appends; the server stamps records with its own clock;
members have skewed, slightly fast or slow local clocks. Faults during the first phase:
crashes with restarts (static members keep their instance id), pauses (some longer than the
session timeout), graceful leaves, "zombies" (a paused static member whose replacement starts
meanwhile), stuck revocations (longer than the release timeout) and retention moving the log
start. Then the faults stop, the network heals, and the group must settle.

Everything is driven by one ``random.Random(seed)``: a seed replays a run exactly. The checks
of :mod:`jetsdk.group.invariants` run throughout; :func:`run` returns a summary or raises
:class:`~jetsdk.group.invariants.InvariantViolation` (the message starts with the seed).

Single-threaded; no I/O.
"""

from __future__ import annotations

import bisect
import contextlib
import functools
import heapq
import random
from collections.abc import Callable

import attrs

from jetsdk.group.errors import NotOwner
from jetsdk.group.invariants import (
    CommitChecker,
    ExclusiveProcessing,
    ExpiryBound,
    InvariantViolation,
    ProcessedLedger,
    check_at_least_once,
    check_settled,
)
from jetsdk.group.member import (
    AppendRecord,
    Fenced,
    GroupMember,
    LosePartition,
    MemberConfig,
    RevokePartition,
    StartPartition,
)
from jetsdk.group.records import Checkpoint, GroupRecord, decode_record
from jetsdk.group.state import GroupState
from jetsdk.group.stream_partition import StreamPartition

__all__ = ["SimConfig", "SimResult", "Simulation", "run"]

EPOCH_NS = 1_700_000_000 * 10**9
"""Server clock at simulated time 0."""
GROUP = "sim-group"


@attrs.frozen
class SimConfig:
    """Shape and fault rates of one simulated run (durations in simulated seconds)."""

    members: int = 4
    """Member slots (each runs one process at a time, plus zombies)."""
    static_fraction: float = 0.5
    """Share of slots with a static instance id."""
    streams: tuple[tuple[str, int], ...] = (("a", 6), ("b", 3))
    """Subscribed streams and their partition counts."""
    heterogeneous: bool = False
    """If set, every third slot subscribes to the first stream only."""
    assignor: str = "sticky"
    """Preferred assignor of every member."""
    member: MemberConfig = MemberConfig(  # noqa: RUF009  (frozen, so a shared default is safe)
        session_timeout=1.0,
        heartbeat_interval=0.25,
        release_timeout=1.5,
        checkpoint_interval=2.0,
        lease_margin=0.05,
    )
    """Timings of every member (assignors and instance id are set per process)."""
    max_append_delay: float = 0.03
    """An append reaches the log up to this long after it is sent."""
    max_ack_delay: float = 0.03
    """An acknowledgement comes back up to this long after the append."""
    max_read_delay: float = 0.03
    """A reader sees a record up to this long after it was stored."""
    tick_interval: float = 0.05
    """How often a member processes a batch, then reads the group log."""
    drop_rate: float = 0.02
    """Share of appends lost before the log (during the fault phase)."""
    ack_loss_rate: float = 0.02
    """Share of acknowledgements lost (during the fault phase)."""
    max_clock_skew: float = 5.0
    """Local clocks are off by up to this much from the server's."""
    max_clock_drift: float = 0.002
    """Local clocks run up to this fraction fast or slow (the lease margin must cover it)."""
    produce_rate: float = 15.0
    """Messages per second per data partition, during the fault phase."""
    process_batch: int = 8
    """Messages per partition per batch."""
    commit_interval: float = 0.3
    """How often a member commits its positions."""
    max_drain: float = 0.2
    """Time to finish in-flight work on revocation."""
    stuck_rate: float = 0.05
    """Share of revocations that take longer than the release timeout."""
    fault_phase: float = 6.0
    """Length of the phase with faults and production."""
    settle_phase: float = 6.0
    """Length of the quiet phase the group must settle in."""
    fault_rate: float = 1.0
    """Faults per second during the fault phase."""
    max_pause: float = 2.5
    """Longest pause."""
    max_downtime: float = 1.5
    """Longest time a crashed or departed slot stays down."""
    retention: bool = True
    """Sometimes move the group-log start forward (as retention would)."""


@attrs.frozen
class SimResult:
    """Summary of a run that kept every invariant."""

    seed: int
    """The seed."""
    records: int
    """Group-log records stored."""
    generations: int
    """Final generation."""
    commits: int
    """Commits accepted."""
    processed: int
    """Distinct messages processed."""
    produced: int
    """Messages produced."""
    faults: int
    """Faults injected."""
    expiries_checked: int
    """Crashes held to the expiry bound."""


@attrs.define(eq=False)
class _Consuming:
    position: int
    generation: int
    draining: bool = False


@attrs.define(eq=False)
class _Process:
    pid: str
    slot: int
    member: GroupMember
    skew: float
    rate: float = 1.0
    alive: bool = True
    paused_until: float = 0.0
    pauses: list[tuple[float, float]] = attrs.field(factory=list)
    fenced: bool = False
    started_at: float = 0.0
    ended_at: float | None = None
    consuming: dict[StreamPartition, _Consuming] = attrs.field(factory=dict)
    last_arrival: float = 0.0
    wake_at: float | None = None


class Simulation:
    """One seeded run; see the module docstring. Use :func:`run`."""

    def __init__(self, seed: int, config: SimConfig) -> None:
        self.seed = seed
        self.cfg = config
        self.rng = random.Random(seed)
        self.now = 0.0
        self._queue: list[tuple[float, int, Callable[[], None]]] = []
        self._seq = 0
        # The group log: parallel lists indexed by offset.
        self.values: list[bytes] = []
        self.records: list[GroupRecord] = []
        self.stamps: list[int] = []
        self.arrivals: list[float] = []
        self.log_start = 0
        self.reference = GroupState(GROUP)
        self.last_ownership_change = 0.0
        # Data partitions and bookkeeping.
        self.produced = {
            StreamPartition(s, i): 0 for s, count in config.streams for i in range(count)
        }
        self.ledger = ProcessedLedger()
        self.commits = CommitChecker(self.ledger)
        self.exclusive = ExclusiveProcessing()
        self.expiry = ExpiryBound(
            config.member.session_timeout,
            config.member.heartbeat_interval,
            config.max_append_delay,
        )
        self.drops: list[float] = []
        self.slots: list[_Process | None] = [None] * config.members
        self.processes: list[_Process] = []
        self.incarnations = [0] * config.members
        self.faults = 0
        self.static = [
            i < round(config.members * config.static_fraction) for i in range(config.members)
        ]

    # ------------------------------------------------------------------ event loop

    def at(self, when: float, fn: Callable[[], None]) -> None:
        self._seq += 1
        heapq.heappush(self._queue, (when, self._seq, fn))

    def in_process(self, proc: _Process, when: float, fn: Callable[[], None]) -> None:
        """Run ``fn`` at ``when`` if ``proc`` is alive then, later if it is paused."""

        def wrapper() -> None:
            if not proc.alive:
                return
            if self.now < proc.paused_until:
                self.at(proc.paused_until, wrapper)
                return
            fn()

        self.at(when, wrapper)

    def run(self) -> SimResult:
        cfg = self.cfg
        for slot in range(cfg.members):
            self.at(self.rng.uniform(0, 0.5), functools.partial(self.start_process, slot))
        for p in self.produced:
            self.at(self.rng.expovariate(cfg.produce_rate), functools.partial(self.produce, p))
        self.at(self.rng.expovariate(cfg.fault_rate), self.fault)
        self.at(cfg.fault_phase, self.end_faults)
        end = cfg.fault_phase + cfg.settle_phase
        while self._queue and self._queue[0][0] <= end:
            when, _, fn = heapq.heappop(self._queue)
            self.now = max(self.now, when)
            fn()
        self.now = end
        self.final_checks()
        return SimResult(
            seed=self.seed,
            records=len(self.values),
            generations=self.reference.generation,
            commits=self.commits.accepted,
            processed=self.ledger.count(),
            produced=sum(self.produced.values()),
            faults=self.faults,
            expiries_checked=self.expiry.checked,
        )

    # ------------------------------------------------------------------ the group log

    def store(self, value: bytes) -> tuple[int, int]:
        offset = len(self.values)
        stamp = EPOCH_NS + int(self.now * 1e9)
        if self.stamps:
            stamp = max(stamp, self.stamps[-1])
        self.values.append(value)
        self.stamps.append(stamp)
        self.arrivals.append(self.now)
        record = decode_record(value)
        self.records.append(record)
        changes = self.reference.apply(record, offset=offset, timestamp=stamp)
        self.commits.observe(changes, at=self.now)
        self.expiry.observe(changes, self.reference, at=self.now)
        if any(type(c).__name__ in _OWNERSHIP_CHANGES for c in changes):
            self.last_ownership_change = self.now
        return offset, stamp

    def send(self, proc: _Process, action: AppendRecord) -> None:
        cfg, rng = self.cfg, self.rng
        value, sent_local = action.value, self.local(proc)
        faulty = self.now < cfg.fault_phase  # the network heals when the faults stop
        if faulty and rng.random() < cfg.drop_rate:
            self.drops.append(self.now)
            return
        arrival = max(self.now + rng.uniform(0, cfg.max_append_delay), proc.last_arrival)
        proc.last_arrival = arrival

        def stored() -> None:
            _, stamp = self.store(value)
            if not faulty or rng.random() >= cfg.ack_loss_rate:
                self.in_process(
                    proc,
                    self.now + rng.uniform(0, cfg.max_ack_delay),
                    lambda: proc.member.on_appended(sent_local, stamp),
                )

        self.at(arrival, stored)

    def maybe_truncate(self) -> None:
        """Retention: move the log start up to the newest checkpoint's coverage."""
        for offset in range(len(self.values) - 1, self.log_start - 1, -1):
            record = self.records[offset]
            if isinstance(record, Checkpoint):
                new_start = self.rng.randint(self.log_start, max(self.log_start, record.as_of + 1))
                self.log_start = max(self.log_start, new_start)
                return

    # ------------------------------------------------------------------ processes

    def local(self, proc: _Process) -> float:
        return self.now * proc.rate + proc.skew

    def start_process(self, slot: int) -> None:
        cfg, rng = self.cfg, self.rng
        self.incarnations[slot] += 1
        pid = f"m{slot}.{self.incarnations[slot]}"
        streams = cfg.streams[:1] if cfg.heterogeneous and slot % 3 == 2 else cfg.streams
        names = ["sticky", "range", "roundrobin"]
        names.remove(cfg.assignor)
        config = attrs.evolve(
            cfg.member,
            assignors=(cfg.assignor, *names),
            instance_id=f"i{slot}" if self.static[slot] else None,
        )
        start = self.log_start
        if rng.random() < 0.5:
            # Start near the end, as a driver would with ListOffsets by timestamp.
            since = self.now - 2 * cfg.member.checkpoint_interval
            start = max(start, bisect.bisect_left(self.arrivals, since))
        member = GroupMember(
            GROUP, pid, dict(streams), config, log_start=self.log_start, start=start
        )
        skew = rng.uniform(-cfg.max_clock_skew, cfg.max_clock_skew)
        rate = 1.0 + rng.uniform(-cfg.max_clock_drift, cfg.max_clock_drift)
        proc = _Process(pid, slot, member, skew=skew, rate=rate, started_at=self.now)
        self.slots[slot] = proc
        self.processes.append(proc)
        member.join(self.local(proc))
        self.step(proc)
        self.in_process(proc, self.now + rng.uniform(0, cfg.tick_interval), lambda: self.tick(proc))
        self.in_process(
            proc, self.now + rng.uniform(0, cfg.commit_interval), lambda: self.commit(proc)
        )

    def read(self, proc: _Process, *, delay: float | None = None) -> None:
        cfg = self.cfg
        if delay is None:
            delay = self.rng.uniform(0, cfg.max_read_delay)
        hw = bisect.bisect_right(self.arrivals, self.now - delay)
        member = proc.member
        for _ in range(1000):  # bounded: each round feeds records or moves back once
            if member.next_fetch_offset < self.log_start:
                member.reset_log(self.log_start)
            first = member.next_fetch_offset
            for offset in range(first, hw):
                # Decoded once at store time (the reference decodes the bytes).
                member.on_decoded_record(offset, self.stamps[offset], self.records[offset])
            member.caught_up(hw)
            if member.next_fetch_offset >= hw and member.view is not None:
                break
        self.step(proc)

    def tick(self, proc: _Process) -> None:
        # Process before reading: after a pause, a real consumer first finishes the batch it
        # holds, with a stale view of the group. Only the lease protects that batch.
        self.process(proc)
        self.read(proc)
        self.in_process(proc, self.now + self.cfg.tick_interval, lambda: self.tick(proc))

    def step(self, proc: _Process) -> None:
        member = proc.member
        for action in member.poll(self.local(proc)):
            if isinstance(action, AppendRecord):
                self.send(proc, action)
            elif isinstance(action, StartPartition):
                offset = 0 if action.offset is None else action.offset
                proc.consuming[action.partition] = _Consuming(offset, action.generation)
            elif isinstance(action, RevokePartition):
                self.revoke(proc, action)
            elif isinstance(action, LosePartition):
                proc.consuming.pop(action.partition, None)
            elif isinstance(action, Fenced):
                proc.fenced = True
                proc.ended_at = self.now
        if proc.fenced and not member.owned():
            self.stop(proc)
            return
        wake = member.next_wakeup()
        if wake is not None:
            when = max(self.now, (wake - proc.skew) / proc.rate)
            if proc.wake_at is None or when < proc.wake_at or proc.wake_at <= self.now:
                proc.wake_at = when
                self.in_process(proc, when + 1e-6, lambda: self.step(proc))

    def revoke(self, proc: _Process, action: RevokePartition) -> None:
        cfg, rng = self.cfg, self.rng
        entry = proc.consuming.get(action.partition)
        if entry is None:
            return
        entry.draining = True
        drain = rng.uniform(0, cfg.max_drain)
        if rng.random() < cfg.stuck_rate:
            drain = cfg.member.release_timeout * rng.uniform(1.0, 1.5)

        def done() -> None:
            current = proc.consuming.get(action.partition)
            if current is entry:
                del proc.consuming[action.partition]
                proc.member.release(action.partition, entry.position)
                self.step(proc)

        self.in_process(proc, self.now + drain, done)

    def process(self, proc: _Process) -> None:
        cfg = self.cfg
        now_local = self.local(proc)
        for p, entry in sorted(proc.consuming.items()):
            if not proc.member.may_process(p, now_local):
                continue
            for _ in range(cfg.process_batch):
                if entry.position >= self.produced[p]:
                    break
                self.ledger.add(p, entry.position)
                self.exclusive.observe(p, proc.pid, entry.generation, self.now)
                entry.position += 1

    def commit(self, proc: _Process) -> None:
        for p, entry in sorted(proc.consuming.items()):
            with contextlib.suppress(NotOwner):
                proc.member.commit(p, entry.position)
        self.step(proc)
        self.in_process(proc, self.now + self.cfg.commit_interval, lambda: self.commit(proc))

    # ------------------------------------------------------------------ load and faults

    def produce(self, p: StreamPartition) -> None:
        if self.now >= self.cfg.fault_phase:
            return
        self.produced[p] += 1
        self.at(self.now + self.rng.expovariate(self.cfg.produce_rate), lambda: self.produce(p))

    def fault(self) -> None:
        cfg, rng = self.cfg, self.rng
        if self.now >= cfg.fault_phase:
            return
        self.at(self.now + rng.expovariate(cfg.fault_rate), self.fault)
        candidates = [p for p in self.slots if p is not None and p.alive]
        candidates = [p for p in candidates if self.now >= p.paused_until]
        if not candidates:
            return
        proc = rng.choice(candidates)
        self.faults += 1
        kind = rng.random()
        if kind < 0.35:
            self.crash(proc)
        elif kind < 0.65:
            self.pause(proc, rng.uniform(0.05, cfg.max_pause))
        elif kind < 0.8:
            proc.member.leave({p: c.position for p, c in proc.consuming.items()})
            self.step(proc)
            self.stop(proc)
            self.restart_later(proc.slot)
        elif kind < 0.9 and self.static[proc.slot]:
            # A zombie: paused for long; its replacement starts meanwhile.
            self.pause(
                proc,
                rng.uniform(
                    cfg.member.session_timeout / 2, cfg.max_pause + cfg.member.session_timeout
                ),
            )
            self.start_process(proc.slot)
        elif cfg.retention:
            self.maybe_truncate()

    def stop(self, proc: _Process) -> None:
        proc.alive = False
        if proc.ended_at is None:
            proc.ended_at = self.now
        if self.slots[proc.slot] is proc:
            # Another live process of the slot (the one that fenced this one) takes its place.
            others = [p for p in self.processes if p.slot == proc.slot and p.alive and not p.fenced]
            self.slots[proc.slot] = others[-1] if others else None

    def crash(self, proc: _Process) -> None:
        self.stop(proc)
        if self.reference.member(proc.pid) is not None:
            self.expiry.crashed(proc.pid, self.now)
        self.restart_later(proc.slot)

    def pause(self, proc: _Process, length: float) -> None:
        proc.paused_until = self.now + length
        proc.pauses.append((self.now, proc.paused_until))

    def restart_later(self, slot: int) -> None:
        def restart() -> None:
            if self.slots[slot] is None:
                self.start_process(slot)

        delay = self.rng.uniform(0, self.cfg.max_downtime)
        self.at(min(self.now + delay, self.cfg.fault_phase), restart)

    def end_faults(self) -> None:
        for slot, proc in enumerate(self.slots):
            if proc is None:
                self.start_process(slot)

    # ------------------------------------------------------------------ checks

    def heartbeats_flowed(self, member: str) -> bool:
        """True if another process ran unpaused, with no drops, across the crash's window."""
        window = self.expiry.deadline_window(member)
        if window is None:
            return False
        start, end = window
        if any(start <= t <= end for t in self.drops):
            return False
        for proc in self.processes:
            if proc.pid == member or proc.started_at > start:
                continue
            if proc.ended_at is not None and proc.ended_at < end:
                continue
            if all(b <= start or a >= end for a, b in proc.pauses):
                return True
        return False

    def final_checks(self) -> None:
        self.exclusive.check()
        check_at_least_once(self.produced, self.ledger)
        quiet = self.now - self.last_ownership_change
        needed = 2 * self.cfg.tick_interval + self.cfg.max_read_delay
        if quiet < needed:
            raise InvariantViolation(f"ownership still changing {quiet:.3f}s before the end")
        running = [p for p in self.processes if p.alive]
        live = {p.pid: set(p.consuming) for p in running}
        views: dict[str, GroupState] = {}
        for proc in running:
            self.read(proc, delay=0.0)
            view = proc.member.view
            if view is not None:
                views[proc.pid] = view
        check_settled(self.reference, live, views)
        crashed = [p.pid for p in self.processes if p.ended_at is not None]
        self.expiry.check({m: self.heartbeats_flowed(m) for m in crashed})


_OWNERSHIP_CHANGES = {
    "PartitionAcquired",
    "PartitionReleased",
    "ReleaseRequested",
    "ReleaseCancelled",
    "GenerationChanged",
}


def run(seed: int, config: SimConfig | None = None) -> SimResult:
    """Run one seeded simulation; raise InvariantViolation (message starts with the seed)."""
    sim = Simulation(seed, config or SimConfig())
    try:
        return sim.run()
    except InvariantViolation as exc:
        raise InvariantViolation(f"seed={seed}: {exc}") from exc
