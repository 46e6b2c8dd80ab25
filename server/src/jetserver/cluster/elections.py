"""Partition leader election on the metadata leader, from followers' silent-leader reports.

A gone server's partitions (its process is dead: probes refused) are elected without
reports, from this server's liveness view (:mod:`.takeover`, :meth:`Elections.propose_now`);
the reports remain the path when a leader's server is up but silent. A follower replica
whose partition leader stops answering reports it (ReportLeader, api 9) to the metadata
leader. The metadata leader counts, per partition and leader epoch:

- one vote per ISR member other than the leader that reported within
  ``window_s`` (default 5 s);
- one vote for the leader itself when this server's liveness probes find the leader's
  server not answering at all (the leader is silent to the metadata leader too).

When the votes reach a majority of the ISR (``len(isr) // 2 + 1``) it waits, for at
most ``collect_s`` (default 1 s) after the majority, until every ISR member other than the
leader that this server's liveness view finds alive has reported too, then proposes
ElectLeader at epoch + 1 (the state machine drops the old leader from the ISR). The new
leader is one of the reporters (a reporter is alive and vouches for its records), taken in
turn by partition number (``reporters[partition % len(reporters)]``, reporters in replica
order), so that a dead server's partitions are spread over the survivors. An ISR member
holds every committed record: a follower whose log was found damaged leaves the ISR
(:meth:`.Controller.leave_isr`), and one that has not yet only delays its partitions'
elections by ``collect_s``. Reports are kept in memory only: after a metadata leader
change the followers' repeated reports rebuild the count within one report period.

A partition whose ISR holds only the leader is never moved (no unclean election: the
other replicas may lack committed records).

:func:`votes_needed`, :func:`choose_leader` and :func:`awaited` are pure and unit-tested.

Task safety: one event loop; elections of one partition are serialized.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Collection
from typing import Any

import anyio
import attrs

from jetsdk.codec.error_codes import ErrorCode
from jetserver.cluster.entry_batches import batch_size, election_bytes
from jetserver.errors import ApiError, partition_not_found, stream_not_found
from jetserver.logs import fields
from jetserver.metadata.model import PartitionAssignment
from jetserver.metadata.ops import ElectLeader, ElectLeaders, OpResult
from jetserver.raft import MetadataRaft, NotLeader, RaftError

log = logging.getLogger(__name__)

ELECTION_PROPOSE_TIMEOUT_S = 3.0
"""Bound on proposing one batch of elections."""
BATCH_GATHER_S = 0.02
"""How long the first election of a batch waits for others to join it (the reports of a
dead server's partitions arrive together); again while others keep joining, up to
:data:`BATCH_GATHER_MAX_S`."""
BATCH_GATHER_MAX_S = 0.3
"""Longest a batch gathers while elections keep joining it (reports at 10,000 partitions
come in requests of 1,000, tens of milliseconds apart)."""
LOGGED_BATCH = 10
"""Elections of a batch up to this size are logged one by one at INFO (larger: DEBUG)."""
MAX_IN_FLIGHT = 4
"""Most election entries proposed and not yet applied at once."""
UNREPORTED_AFTER_S = 30.0
"""A partition whose leader's server is down here and about which no report arrived for
this long is logged (:meth:`Elections.watch_unreported`)."""
UNREPORTED_CHECK_S = 5.0
"""How often the metadata leader looks for such partitions."""
COLLECT_S = 1.0
"""Longest wait, once a partition's reports reach a majority, for the reports of its other
live ISR members (:func:`awaited`), so that the new leader can be taken among all of them
(the survivors of a server that stopped answering find it down within one probe period of
each other); a member that never reports delays the election this long."""


def votes_needed(isr: Collection[str]) -> int:
    """Votes that move the leadership of a partition with this ISR: a majority of it."""
    return len(isr) // 2 + 1


def choose_leader(
    assignment: PartitionAssignment, reporters: Collection[str], leader_down: bool
) -> str | None:
    """The new leader if the reports (and the leader's own silence) reach a majority.

    Args:
        assignment: the partition's current assignment.
        reporters: servers that reported the leader silent within the window.
        leader_down: the leader's server does not answer this server's probes.

    Returns:
        None if the votes do not reach a majority of the ISR; else one of the valid
        reporters (ISR members other than the leader, in replica order), taken in turn by
        partition number: ``valid[partition % len(valid)]``. Placement gives every partition
        a server leads the same follower order, so "the first reporter" put all of a dead
        server's leaderships (and role changes) on one survivor.
    """
    valid = [r for r in assignment.replicas if r in reporters and r in assignment.isr]
    valid = [r for r in valid if r != assignment.leader]
    votes = len(valid) + (1 if leader_down else 0)
    if not valid or votes < votes_needed(assignment.isr):
        return None
    return valid[assignment.partition % len(valid)]


def awaited(
    assignment: PartitionAssignment, reporters: Collection[str], is_down: Callable[[str], bool]
) -> list[str]:
    """ISR members other than the leader that have not reported and that the liveness view
    does not find down: an election that already has a majority waits (up to
    :data:`COLLECT_S`) for their reports, so that it can pick among every live reporter."""
    return [
        r
        for r in assignment.isr
        if r != assignment.leader and r not in reporters and not is_down(r)
    ]


@attrs.define(eq=False)
class _Reports:
    epoch: int
    first_at: float = 0.0
    """When the first report of this epoch was counted (the clock of :class:`Elections`;
    a stale report that arrives after the partition moved makes the next epoch's record
    without counting)."""
    at: dict[str, float] = attrs.field(factory=dict)
    lock: anyio.Lock = attrs.field(factory=lambda: anyio.Lock(fast_acquire=True))
    """Taken without a loop turn when free: a failover's thousands of reports each gave
    the busy loop a whole pass here (anyio's checkpoint on every acquire; 52 of 89 samples
    in ``report``, py-spy of a metadata leader at 3,000 partitions)."""
    complete: anyio.Event = attrs.field(factory=anyio.Event)
    """Set when every live ISR member has reported (the collection may end)."""
    majority_at: float | None = None
    """When the reports first reached a majority (the collection's start)."""
    electing: _Queued | None = None
    """This epoch's election once queued (its report may be cancelled while it is in a
    batch being proposed: the next report waits for its outcome instead of electing)."""


@attrs.define(eq=False)
class _Queued:
    """An election waiting for its batch."""

    op: ElectLeader
    reported_at: float
    """When the partition's first report of this epoch arrived."""
    size: int = 0
    """:func:`election_bytes` of ``op``."""
    done: anyio.Event = attrs.field(factory=anyio.Event)
    taken: bool = False
    """In a batch being proposed."""
    batch_size: int = 0
    """Elections in that batch."""
    result: OpResult | None = None
    error: ApiError | None = None


@attrs.define(eq=False)
class Elections:
    """The metadata leader's side of partition leader failover."""

    raft: MetadataRaft
    """The metadata Raft member (elections are proposed only while it leads)."""
    is_down: Callable[[str], bool]
    """Liveness: True if a server does not answer this server's probes."""
    window_s: float = 5.0
    """How long a report counts."""
    collect_s: float = COLLECT_S
    """Longest wait for the other live ISR members' reports once a majority reported."""
    clock: Callable[[], float] = time.monotonic
    """Monotonic clock (injected in tests)."""
    _reports: dict[tuple[str, int], _Reports] = attrs.field(factory=dict)
    elections: int = 0
    """Leader elections proposed and applied by this server."""
    entries: int = 0
    """Raft entries that carried them (one per batch)."""
    _heard: dict[tuple[str, int], float] = attrs.field(factory=dict)
    """When a report about each partition last arrived (any epoch, any reporter)."""
    _unreported_since: dict[tuple[str, int], float] = attrs.field(factory=dict)
    _queue: list[_Queued] = attrs.field(factory=list)
    _gathering: bool = False
    _taken: anyio.Event = attrs.field(factory=anyio.Event)
    _in_flight: anyio.CapacityLimiter = attrs.field(
        factory=lambda: anyio.CapacityLimiter(MAX_IN_FLIGHT)
    )

    async def report(
        self, stream: str, partition: int, leader_epoch: int, reporter: str
    ) -> dict[str, Any]:
        """Count a report; elect a new leader if it completes a majority (ReportLeader),
        once every live ISR member reported or :attr:`collect_s` after the majority. A
        report from the leader itself renews its leadership in the next epoch (it gave up
        its epoch after a failed fsync).

        Returns:
            ``{"accepted", "leader", "leader_epoch"}`` (spec/protocol.md, api 9).

        Raises:
            ApiError: NOT_LEADER (not the metadata leader), STREAM_NOT_FOUND,
                PARTITION_NOT_FOUND, INVALID_ARGUMENT; a RaftError code if the election
                could not be proposed.
        """
        if not self.raft.is_leader:
            raise ApiError(
                ErrorCode.NOT_LEADER,
                "not the metadata leader",
                {"leader": self.raft.leader_id},
            )
        key = (stream, partition)
        current = self._assignment(stream, partition)
        self._heard[key] = self.clock()
        reports = self._reports.get(key)
        if reports is None or reports.epoch != current.leader_epoch:
            reports = self._reports[key] = _Reports(current.leader_epoch)
        counted = collected = False
        complete, wait_s = reports.complete, 0.0
        while True:
            async with reports.lock:
                current = self._assignment(stream, partition)  # may have moved while waiting
                if leader_epoch != current.leader_epoch or reporter not in current.isr:
                    # Accepted if it was counted before the partition moved (while waiting).
                    return _answer(counted, current)
                electing = reports.electing
                if electing is not None and not electing.done.is_set():
                    if not counted:
                        reports.at[reporter] = self.clock()
                        counted = True
                    # Proposed for a report that was cancelled meanwhile (a delivery cut by
                    # its bound): its outcome decides. Deciding again proposed duplicates:
                    # at 10,000 partitions 573 of an entry's 1,000 elections were refused.
                    await electing.done.wait()  # set by _propose, whose proposal is bounded
                    continue
                if reporter == current.leader:
                    # The leader itself: it gave up this epoch after a failed fsync whose cut
                    # took back records its followers were sent, and leads on in the next one.
                    return await self._elect(stream, partition, current, reporter, self.clock())
                now = self.clock()
                if not counted:
                    if not reports.at:
                        reports.first_at = now
                    reports.at[reporter] = now
                    counted = True
                recent = {r for r, t in reports.at.items() if now - t <= self.window_s}
                reports.at = {r: t for r, t in reports.at.items() if r in recent}
                down = self.is_down(current.leader)
                new_leader = choose_leader(current, recent, down)
                if log.isEnabledFor(logging.DEBUG):  # thousands a second in a failover at scale
                    log.debug(
                        "partition leader reported silent",
                        extra=fields(
                            stream=stream,
                            partition=partition,
                            leader=current.leader,
                            leader_epoch=current.leader_epoch,
                            reporter=reporter,
                            reporters=",".join(sorted(recent)),
                            leader_down=down,
                            isr=",".join(current.isr),
                            collected=collected,
                        ),
                    )
                if new_leader is None:
                    return _answer(True, current)
                if reports.majority_at is None:
                    reports.majority_at = now
                waited_s = now - reports.majority_at
                if not awaited(current, recent, self.is_down):
                    reports.complete.set()  # the reporters waiting for this one decide too
                elif not collected and waited_s < self.collect_s:
                    complete = reports.complete
                    wait_s = self.collect_s - waited_s
                    new_leader = None
                if new_leader is not None:
                    return await self._elect(
                        stream, partition, current, new_leader, reports.first_at, reports
                    )
            # A majority reported, and live ISR members have not yet: wait for them (not
            # holding the lock: their reports take it), then decide with who reported.
            with anyio.move_on_after(wait_s):
                await complete.wait()
            collected = True

    async def propose_now(self, ops: Collection[ElectLeader]) -> list[ElectLeader]:
        """Propose ``ops`` (decided without reports, :mod:`.takeover`) now in batched entries;
        reports of their partitions wait for them, and a report's election already on its
        way is left to itself. Returns the elections applied."""
        now, items = self.clock(), []
        for op in ops:
            key, epoch = (op.stream, op.partition), op.leader_epoch - 1
            reports = self._reports.get(key)
            if reports is None or reports.epoch != epoch:
                reports = self._reports[key] = _Reports(epoch, first_at=now)
            if reports.electing is None or reports.electing.done.is_set():
                reports.electing = _Queued(op, now, election_bytes(op), taken=True)
                items.append(reports.electing)
        batches = []  # up to MAX_IN_FLIGHT proposed at once (_in_flight)
        while items:
            n = batch_size([q.size for q in items])
            batches.append(items[:n])
            items = items[n:]

        async def one(batch: list[_Queued]) -> None:
            for q in batch:
                q.batch_size = len(batch)
            await self._propose(batch)

        with anyio.CancelScope(shield=True):  # reports wait for these; proposals are bounded
            async with anyio.create_task_group() as tg:
                for batch in batches[1:]:
                    tg.start_soon(one, batch)
                if batches:  # the first in this task: no pass of the loop before it goes
                    await one(batches[0])
        applied = [q.op for b in batches for q in b if q.result is not None and q.result.ok]
        for op in applied:
            self._reports.pop((op.stream, op.partition), None)
        self.elections += len(applied)
        return applied

    def unreported(self) -> list[tuple[str, int]]:
        """Partitions whose leader's server is down in this server's liveness view, with
        another ISR member that could take over, about which no report arrived within
        :attr:`window_s`: their followers should be reporting them (spec/cluster.md,
        "Partition leader election"; issue 34: 31 of 20,000 kept a dead leader)."""
        now = self.clock()
        found = []
        down: dict[str, bool] = {}  # one liveness look-up per server, not per partition
        for name, meta in self.raft.state.streams.items():
            for a in meta.partitions:
                if a.leader is None or len(a.isr) < 2:
                    continue
                if a.leader not in down:
                    down[a.leader] = self.is_down(a.leader)
                if not down[a.leader]:
                    continue
                heard = self._heard.get((name, a.partition))
                if heard is None or now - heard > self.window_s:
                    found.append((name, a.partition))
        return found

    async def watch_unreported(self) -> None:
        """While this server leads the metadata, log (WARNING, one line) the partitions
        :meth:`unreported` for :data:`UNREPORTED_AFTER_S` or more, every
        :data:`UNREPORTED_CHECK_S` (until cancelled)."""
        while True:
            await anyio.sleep(UNREPORTED_CHECK_S)
            if not self.raft.is_leader:
                self._unreported_since.clear()
                continue
            now = self.clock()
            found = self.unreported()
            self._unreported_since = {k: self._unreported_since.get(k, now) for k in found}
            stale = sorted(
                k for k, t in self._unreported_since.items() if now - t >= UNREPORTED_AFTER_S
            )
            if stale:
                log.warning(
                    "partitions whose leader's server is down and that no follower reports",
                    extra=fields(
                        count=len(stale),
                        first=",".join(f"{n}/{p}" for n, p in stale[:5]),
                        for_s=round(max(now - self._unreported_since[k] for k in stale), 1),
                    ),
                )

    async def report_many(
        self, reports: Collection[tuple[str, int, int, str]]
    ) -> list[dict[str, Any]]:
        """Several reports (ReportLeader with ``reports``), counted at once, each as
        :meth:`report`; each one's answer, in order: its ``{"accepted", "leader",
        "leader_epoch"}`` or ``{"error_code", "message"}``.

        Raises:
            ApiError: NOT_LEADER (not the metadata leader).
        """
        if not self.raft.is_leader:
            raise ApiError(
                ErrorCode.NOT_LEADER,
                "not the metadata leader",
                {"leader": self.raft.leader_id},
            )
        answers: list[dict[str, Any]] = [{} for _ in reports]

        async def one(i: int, report: tuple[str, int, int, str]) -> None:
            try:
                answers[i] = await self.report(*report)
            except ApiError as exc:
                answers[i] = {"error_code": int(exc.code), "message": exc.message}

        async with anyio.create_task_group() as tg:
            for i, report in enumerate(reports):
                tg.start_soon(one, i, report)
        return answers

    async def _elect(
        self,
        stream: str,
        partition: int,
        current: PartitionAssignment,
        new_leader: str,
        reported_at: float,
        reports: _Reports | None = None,
    ) -> dict[str, Any]:
        meta = self.raft.state.streams[stream]
        op = ElectLeader(stream, partition, new_leader, current.leader_epoch + 1, meta.stream_id)
        result, batch_size = await self._batched(op, reported_at, reports)
        after = self._assignment(stream, partition)
        if not result.ok:
            log.info(
                "leader election refused",
                extra=fields(stream=stream, partition=partition, reason=result.message),
            )
            return _answer(True, after)
        self._reports.pop((stream, partition), None)
        self.elections += 1
        log.log(
            # One line per election at INFO unless it came in a big batch (thousands in a
            # failover at scale); the batch's own line says how many.
            logging.INFO if batch_size <= LOGGED_BATCH else logging.DEBUG,
            "partition leader elected",
            extra=fields(
                stream=stream,
                partition=partition,
                old_leader=current.leader,
                leader=new_leader,
                leader_epoch=op.leader_epoch,
            ),
        )
        return _answer(True, after)

    async def _batched(
        self, op: ElectLeader, reported_at: float, reports: _Reports | None = None
    ) -> tuple[OpResult, int]:
        """Propose ``op`` with the elections queued meanwhile, in one Raft entry (at most
        MAX_BATCH, within MAX_BATCH_BYTES); its own result and the size of its batch.

        The first caller that finds no batch gathering gathers one (for BATCH_GATHER_S, and
        again while others join, see :meth:`_gather`) and proposes it; elections queued
        meanwhile go in the next batch, which does not wait for this one to be applied: up
        to MAX_IN_FLIGHT entries
        are proposed at once (one waiting for the other's commit and apply made a dead
        server's 3,334 elections at 10,000 partitions take several Raft round trips in a
        row). Elections of one partition never overlap (its reports are serialized).

        Raises:
            ApiError: NOT_LEADER (not the metadata leader any more) or the RaftError's code.
        """
        item = _Queued(op, reported_at, election_bytes(op))
        self._queue.append(item)
        if reports is not None:
            reports.electing = item
        try:
            while not item.taken:
                if self._gathering:
                    await self._taken.wait()
                    continue
                self._gathering = True
                batch: list[_Queued] = []
                try:
                    await self._gather()
                finally:
                    self._gathering = False
                    n = batch_size([q.size for q in self._queue])
                    batch, self._queue = self._queue[:n], self._queue[n:]
                    for q in batch:
                        q.taken = True
                        q.batch_size = len(batch)
                    taken, self._taken = self._taken, anyio.Event()
                    taken.set()
                    if batch:
                        with anyio.CancelScope(shield=True):  # the others wait for this batch
                            await self._propose(batch)
        finally:
            if not item.taken and item in self._queue:
                # Cancelled before its batch: the caller releases the partition's lock, and
                # the next report decides again (proposed as well, this one made duplicate
                # elections: 999 refused in one entry at 3,000 partitions).
                self._queue.remove(item)
                if reports is not None and reports.electing is item:
                    reports.electing = None
        await item.done.wait()  # set by _propose, whose proposal is bounded
        if item.error is not None:
            raise item.error
        assert item.result is not None
        return item.result, item.batch_size

    async def _gather(self) -> None:
        """Wait :data:`BATCH_GATHER_S`, and again while elections joined the queue during
        the last wait and it does not fill a batch, up to :data:`BATCH_GATHER_MAX_S`."""
        started = time.monotonic()
        seen = -1
        while len(self._queue) != seen and time.monotonic() - started < BATCH_GATHER_MAX_S:
            seen = len(self._queue)
            if batch_size([q.size for q in self._queue]) < seen:
                return  # a full batch already
            await anyio.sleep(BATCH_GATHER_S)

    async def _propose(self, batch: list[_Queued]) -> None:
        """Propose ``batch`` (one ElectLeader, or ElectLeaders) within :data:`MAX_IN_FLIGHT`
        and hand out the results (every item's ``done`` is set on return, whatever happens).
        A free place is taken without a pass of the event loop (``async with`` the limiter
        takes one: a failover's takeover waited there behind the replicas the death woke)."""
        held = False
        try:
            try:
                self._in_flight.acquire_nowait()
            except anyio.WouldBlock:
                await self._in_flight.acquire()
            held = True
            await self._propose_batch(batch)
        finally:
            if held:
                self._in_flight.release()
            for q in batch:
                if not q.done.is_set():
                    q.error = q.error or ApiError(ErrorCode.UNKNOWN, "election not proposed")
                    q.done.set()

    async def _propose_batch(self, batch: list[_Queued]) -> None:
        op: ElectLeader | ElectLeaders = (
            batch[0].op if len(batch) == 1 else ElectLeaders(tuple(q.op for q in batch))
        )
        started = time.monotonic()
        # From the first report of the batch's longest-waiting partition to the proposal:
        # the collection of the other reports and the queue behind earlier batches.
        reported_s = self.clock() - min(q.reported_at for q in batch)
        try:
            applied = await self.raft.propose(
                op, op_id=f"elect-{uuid.uuid4().hex}", timeout=ELECTION_PROPOSE_TIMEOUT_S
            )
        except NotLeader as exc:
            error = ApiError(exc.code, str(exc), {"leader": exc.leader_id})
            for q in batch:
                q.error = error
                q.done.set()
            return
        except RaftError as exc:
            log.info(  # one line per entry (a new metadata leader: whether its first time out)
                "leader elections not applied",
                extra=fields(
                    count=len(batch),
                    error=str(exc),
                    propose_s=round(time.monotonic() - started, 3),
                ),
            )
            error = ApiError(exc.code, f"leader election not applied: {exc}")
            for q in batch:
                q.error = error
                q.done.set()
            return
        self.entries += 1
        result = applied.result
        results = (result,) if len(batch) == 1 else result.results
        if len(results) != len(batch):  # not expected: say nothing was decided
            unknown = OpResult(ErrorCode.UNKNOWN, "the election's outcome is not known")
            results = (unknown,) * len(batch)
        if len(batch) > 1:
            log.info(
                "leader elections proposed in one entry",
                extra=fields(
                    count=len(batch),
                    applied=sum(1 for r in results if r.ok),
                    since_report_s=round(reported_s, 3),
                    propose_s=round(time.monotonic() - started, 3),
                ),
            )
        for q, r in zip(batch, results, strict=True):
            q.result = r
            q.done.set()

    def _assignment(self, stream: str, partition: int) -> PartitionAssignment:
        meta = self.raft.state.streams.get(stream)
        if meta is None:
            raise stream_not_found(stream)
        if not 0 <= partition < len(meta.partitions):
            raise partition_not_found(stream, partition, len(meta.partitions))
        return meta.partitions[partition]


def _answer(accepted: bool, a: PartitionAssignment) -> dict[str, Any]:
    return {"accepted": accepted, "leader": a.leader, "leader_epoch": a.leader_epoch}
