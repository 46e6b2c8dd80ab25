"""The control plane as the data plane sees it: ISR changes and silent-leader reports.

Replicas (broker/partition.py, jetserver.replication) hold a :class:`Controller` (the
Protocol of spec/cluster.md) and call it; the implementation here turns the calls into
metadata operations:

- :meth:`Controller.propose_isr` — the partition leader proposes UpdateIsr through the
  metadata Raft (``forward=True``: from a follower of the metadata Raft, PySyncObj carries
  the entry to the metadata leader). The ISR changes this server's partitions propose
  together (a dead follower's partitions all shrink within one check period) go in one
  UpdateIsrs entry: the first waits ``ISR_BATCH_GATHER_S`` for others, those proposed while
  a batch is in flight go in the next, up to ``ISR_MAX_BATCH`` each within
  ``ISR_MAX_BATCH_BYTES`` (:func:`isr_batch_size`). The state machine
  checks each change on its own and refuses a stale epoch or a proposer that does not
  lead. Retried with the same op id (applied at most once) within ``ISR_PROPOSE_BOUND_S``.
- :meth:`Controller.report_leader_silent` — sent to the metadata leader
  (:class:`~jetserver.cluster.elections.Elections`, locally or with ReportLeader over the
  client protocol), batched: the first waits ``REPORT_BATCH_GATHER_S`` for others (every
  partition a dead server led here reports it at once), one ReportLeader with ``reports``
  each, up to ``REPORT_MAX_BATCH``; the next batch gathers and goes while earlier ones are
  in flight (up to ``REPORTS_IN_FLIGHT``). One attempt, bounded; callers report again
  while the leader stays silent. A partition whose leader's server is gone (its probe
  refused) is not reported while the metadata leader's takeover elects it from its own
  liveness view (:mod:`.takeover`), as :class:`~.report_hold.ReportHold` decides.

Task safety: one event loop; any number of replicas may call concurrently.
"""

from __future__ import annotations

import logging
import os
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import anyio
import attrs

from jetsdk.codec.error_codes import ErrorCode
from jetsdk.codec.frames import Api
from jetsdk.errors import JetError
from jetserver.cluster.elections import Elections
from jetserver.cluster.entry_batches import batch_size
from jetserver.cluster.peers import PeerPool
from jetserver.cluster.report_hold import ReportHold
from jetserver.cluster.report_parse import MAX_REPORTS
from jetserver.errors import ApiError
from jetserver.logs import fields
from jetserver.metadata.ops import ElectLeader, LeaveIsr, UpdateIsr, UpdateIsrs
from jetserver.raft import (
    MetadataRaft,
    OutcomeUnknown,
    RaftClosed,
    RaftError,
    RaftStatus,
    Unavailable,
)
from jetserver.raft.machine import MAX_ENTRY_BYTES
from jetserver.replication.control import IsrChange

log = logging.getLogger(__name__)

NO_REPORTS_FOR_TESTS = os.environ.get("JET_TEST_NO_LEADER_REPORTS", "") == "1"
"""Test hook: with the environment variable ``JET_TEST_NO_LEADER_REPORTS=1`` this server
sends no silent-leader reports (a leader's renewal request still goes), so that a test can
show the metadata leader moving a gone server's partitions on its own
(:mod:`.takeover`). Read at import; without it nothing is different."""

ISR_PROPOSE_BOUND_S = 10.0
"""Total time :meth:`Controller.propose_isr` keeps retrying."""
ISR_BATCH_GATHER_S = 0.02
"""How long the first ISR change of a batch waits for others to join it (a follower's
death makes every partition it followed here shrink its ISR within one check period)."""
ISR_MAX_BATCH = 5000
"""Most ISR changes in one Raft entry (UpdateIsrs), within :data:`ISR_MAX_BATCH_BYTES`
too: at 10,000 partitions a survivor's 3,334 shrinks of a dead follower in one entry, as
the elections are (:data:`.entry_batches.MAX_BATCH`). Until 2026-11-29 at most 1,000 (which
1,000 changes with 255-character names fit): four entries one after the other, each
waiting for the one before to apply, the metadata Raft taking seconds per entry at load."""
ISR_MAX_BATCH_BYTES = MAX_ENTRY_BYTES * 3 // 4
"""Most encoded bytes of one entry's ISR changes (:func:`isr_change_bytes`, an upper
bound): 3,799 changes of a stream named like ``s12`` with a 32-character id, 1,695 with
255-character names."""
ISR_CHANGE_BYTES = 160
"""An encoded UpdateIsr's bytes besides its names and their quotes (keys, numbers up to
2**63, ``null``\\ s): 219 bytes measured for one with 50 characters of names."""
REPORT_TIMEOUT_S = 3.0
"""Bound on delivering one silent-leader report (retries included)."""
REPORT_BATCH_GATHER_S = 0.02
"""How long the first silent-leader report of a batch waits for others to join it (every
partition a dead server led here reports it at once)."""
REPORT_MAX_BATCH = MAX_REPORTS
"""Most reports in one ReportLeader request."""
REPORTS_IN_FLIGHT = 4
"""Most batches of silent-leader reports delivered at once. One at a time, a dead server's
second thousand leaderships on a survivor were reported only once the first thousand's
elections had been applied (the metadata leader answers a report after its election):
3.6 s later at 5,000 partitions. The metadata leader proposes up to
``elections.MAX_IN_FLIGHT`` election entries at once."""
_BACKOFF_FIRST_S = 0.05
_BACKOFF_MAX_S = 1.0


def isr_change_bytes(op: UpdateIsr) -> int:
    """An upper bound of ``op``'s encoded size in an UpdateIsrs entry."""
    names = op.stream + op.leader + (op.stream_id or "") + "".join(op.isr)
    return ISR_CHANGE_BYTES + 3 * len(op.isr) + len(names.encode())


def isr_batch_size(sizes: Sequence[int]) -> int:
    """How many queued ISR changes (their :func:`isr_change_bytes`, in order) go in the next
    entry: at most :data:`ISR_MAX_BATCH`, within :data:`ISR_MAX_BATCH_BYTES`, at least one."""
    return batch_size(sizes, ISR_MAX_BATCH, ISR_MAX_BATCH_BYTES)


def per_leader(leaders: Iterable[str | None]) -> str:
    """``s1:94,s3:2``: how many reports of a batch name each partition leader."""
    counts = Counter(leader or "?" for leader in leaders)
    return ",".join(f"{server}:{n}" for server, n in sorted(counts.items()))


def backoff_s(attempt: int) -> float:
    """Pause before retry ``attempt`` (1-based): 50 ms doubling up to 1 s."""
    return float(min(_BACKOFF_FIRST_S * (2 ** (attempt - 1)), _BACKOFF_MAX_S))


@attrs.define(eq=False)
class _QueuedIsr:
    """An ISR change waiting for its batch."""

    op: UpdateIsr
    done: anyio.Event = attrs.field(factory=anyio.Event)
    ok: bool = False


@attrs.define(eq=False)
class _QueuedReport:
    """A silent-leader report waiting for its batch."""

    request: dict[str, Any]
    leader: str | None = None
    """The partition leader reported (for the batch's line)."""
    done: anyio.Event = attrs.field(factory=anyio.Event)
    taken: bool = False
    """In a batch (being delivered)."""


@attrs.define(eq=False)
class Controller:
    """:class:`~jetserver.replication.control.ControlPlane` over the metadata Raft and the
    peer connections."""

    server_id: str
    """This server's id (the proposer of ISR changes, the reporter of silent leaders)."""
    raft: MetadataRaft
    """The metadata Raft member."""
    peers: PeerPool
    """Connections to the metadata leader."""
    elections: Elections
    """Used directly when this server is the metadata leader."""
    client_addresses: Callable[[], Mapping[str, str]]
    """Server id -> client address of the registered servers."""
    heard_at: Mapping[str, float] = attrs.field(factory=dict)
    """When each server last answered this server's liveness probes (``anyio`` clock)."""
    is_down: Callable[[str], bool] = attrs.field(default=lambda _server_id: False)
    """This server's liveness view: True if a server is down (refused, or its probes timed
    out for a while; :meth:`jetserver.cluster.liveness.Liveness.is_down`)."""
    is_gone: Callable[[str], bool] = attrs.field(default=lambda _server_id: False)
    """True if this server's last probe of a server was refused (the process is gone:
    :meth:`jetserver.cluster.liveness.Liveness.gone`)."""
    hold: ReportHold | None = None
    """Decides whether a gone server's takeover is under way, when this server does not
    lead the metadata (None: reports about a gone leader go unless this server leads the
    metadata)."""
    server_down_event: Callable[[str], anyio.Event] | None = None
    """An event set once this server's liveness view finds a server down
    (:meth:`jetserver.cluster.liveness.Liveness.down_event`); None: followers watch their
    leaders with timers alone."""
    server_up_event: Callable[[str], anyio.Event] | None = None
    """An event set once this server's liveness view finds a server not down
    (:meth:`jetserver.cluster.liveness.Liveness.up_event`); None: followers of a down
    leader retry on their back-off timer."""
    stopping: bool = False
    """Set when this server begins a graceful stop (before its handoffs): its replicas
    handed a follower role outside the ISR from then on do not fetch
    (``server_stopping_of``), and it reports no silent leader (a reporter can be elected)."""
    isr_bound_s: float = ISR_PROPOSE_BOUND_S
    """See :data:`ISR_PROPOSE_BOUND_S`."""
    isr_changes: int = 0
    """ISR changes applied."""
    isr_entries: int = 0
    """Raft entries that carried them (one per batch)."""
    reports_sent: int = 0
    """Silent-leader reports sent."""
    reports_left_to_takeover: int = 0
    """Silent-leader reports not sent: the metadata leader's takeover elects those
    partitions (:meth:`takeover_due`)."""
    reports_stale: int = 0
    """Silent-leader reports not sent: this server's metadata already has the partition
    at a later leader epoch than the report's."""
    report_batches: int = 0
    """Batches the reports went out in (counted here or one ReportLeader request each)."""
    _report_queue: list[_QueuedReport] = attrs.field(factory=list)
    _report_gathering: bool = False
    _report_gathered: anyio.Event = attrs.field(factory=anyio.Event)
    _report_slots: anyio.CapacityLimiter = attrs.field(
        factory=lambda: anyio.CapacityLimiter(REPORTS_IN_FLIGHT)
    )
    _isr_queue: list[_QueuedIsr] = attrs.field(factory=list)
    _isr_proposing: bool = False
    _isr_round_done: anyio.Event = attrs.field(factory=anyio.Event)

    def server_heard_at(self, server_id: str) -> float | None:
        """When ``server_id`` last answered a liveness probe (None: not yet); followers
        count it as hearing from their leader (spec/cluster.md, "Silent leaders")."""
        return self.heard_at.get(server_id)

    def server_gone(self, server_id: str) -> bool:
        """True if this server's last liveness probe of ``server_id`` was refused: its
        followers report it at once (spec/cluster.md, "Silent leaders")."""
        return self.is_gone(server_id)

    def server_down(self, server_id: str) -> bool:
        """True if this server's liveness probes find ``server_id`` down; a follower reports
        its leader silent only then (spec/cluster.md, "Silent leaders")."""
        return self.is_down(server_id)

    async def propose_isr(
        self,
        stream: str,
        partition: int,
        leader_epoch: int,
        isr: tuple[str, ...],
        *,
        partition_epoch: int | None = None,
    ) -> bool:
        """Propose UpdateIsr for a partition this server leads at ``leader_epoch``, batched
        with the ISR changes of this server's other partitions proposed meanwhile (one
        UpdateIsrs entry, see :meth:`_batched`).

        Returns:
            True once applied; False if the state machine refused it (stale epoch, not the
            leader, a bad ISR), the stream is gone, or no outcome was reached within
            :attr:`isr_bound_s` (it may then still be applied: watch the metadata).
        """
        change = IsrChange(stream, partition, leader_epoch, tuple(isr), partition_epoch)
        return (await self.propose_isrs((change,)))[0]

    async def propose_isrs(self, changes: Sequence[IsrChange]) -> list[bool]:
        """:meth:`propose_isr` for many changes at once (one server's ISR sweep): queued
        together, each change's outcome in order."""
        streams = self.raft.state.streams
        items: list[_QueuedIsr | None] = []
        for c in changes:
            meta = streams.get(c.stream)
            op = None if meta is None else UpdateIsr(
                c.stream, c.partition, self.server_id, c.leader_epoch, c.isr, meta.stream_id,
                c.partition_epoch,
            )  # fmt: skip
            items.append(None if op is None else _QueuedIsr(op))
        queued = [q for q in items if q is not None]
        if queued:
            await self._isr_outcomes(queued)
        return [q is not None and q.ok for q in items]

    async def _isr_outcomes(self, queued: list[_QueuedIsr]) -> None:
        """Queue ``queued`` and take part in proposing the batches until the last of them
        (batches go in queue order) has its outcome."""
        self._isr_queue.extend(queued)
        last = queued[-1]
        try:
            while not last.done.is_set():
                if self._isr_proposing:
                    await self._isr_round_done.wait()
                    continue
                self._isr_proposing = True
                try:
                    await anyio.sleep(ISR_BATCH_GATHER_S)
                    queue = self._isr_queue[: ISR_MAX_BATCH + 1]
                    n = isr_batch_size([isr_change_bytes(q.op) for q in queue])
                    batch, self._isr_queue = self._isr_queue[:n], self._isr_queue[n:]
                    with anyio.CancelScope(shield=True):  # the others wait for this batch
                        await self._propose_isr_batch(batch)
                finally:
                    self._isr_proposing = False
                    done, self._isr_round_done = self._isr_round_done, anyio.Event()
                    done.set()
        finally:
            if not last.done.is_set():  # cancelled before its batches went out
                mine = {id(q) for q in queued if not q.done.is_set()}
                self._isr_queue = [q for q in self._isr_queue if id(q) not in mine]

    async def _propose_isr_batch(self, batch: list[_QueuedIsr]) -> None:
        """Propose ``batch`` (one UpdateIsr, or UpdateIsrs) through the metadata Raft,
        retried with the same op id (applied at most once) within :attr:`isr_bound_s`, and
        hand out each change's outcome."""
        if not batch:
            return
        op: UpdateIsr | UpdateIsrs = (
            batch[0].op if len(batch) == 1 else UpdateIsrs(tuple(q.op for q in batch))
        )
        op_id = f"isr-{uuid.uuid4().hex}"
        deadline = time.monotonic() + self.isr_bound_s
        attempt = 0
        try:
            while True:
                attempt += 1
                remaining = deadline - time.monotonic()
                try:
                    applied = await self.raft.propose(
                        op, op_id=op_id, timeout=max(0.1, remaining), forward=True
                    )
                except RaftClosed:
                    return
                except (Unavailable, OutcomeUnknown) as exc:
                    if time.monotonic() + backoff_s(attempt) >= deadline:
                        log.warning(
                            "ISR change without outcome",
                            extra=fields(changes=len(batch), error=str(exc)),
                        )
                        return
                    await anyio.sleep(backoff_s(attempt))
                    continue
                except RaftError as exc:
                    log.warning(
                        "ISR change not proposed",
                        extra=fields(changes=len(batch), error=str(exc)),
                    )
                    return
                break
            self.isr_entries += 1
            result = applied.result
            results = (result,) if len(batch) == 1 else result.results
            if len(results) != len(batch):  # not expected: count none as applied
                return
            applied_here = 0
            for q, r in zip(batch, results, strict=True):
                q.ok = r.ok
                c = q.op
                if r.ok:
                    self.isr_changes += 1
                    applied_here += 1
                if len(batch) > 1 and not log.isEnabledFor(logging.DEBUG):
                    continue  # one INFO line for the batch, below
                if r.ok:
                    log.log(
                        logging.INFO if len(batch) == 1 else logging.DEBUG,
                        "ISR changed",
                        extra=fields(
                            stream=c.stream,
                            partition=c.partition,
                            leader_epoch=c.leader_epoch,
                            isr=",".join(c.isr),
                        ),
                    )
                else:
                    log.log(
                        logging.INFO if len(batch) == 1 else logging.DEBUG,
                        "ISR change refused",
                        extra=fields(stream=c.stream, partition=c.partition, reason=r.message),
                    )
            if len(batch) > 1:  # a failover's hundreds: one line, each change at DEBUG
                log.info(
                    "ISR changes proposed in one entry",
                    extra=fields(
                        count=len(batch), applied=applied_here, refused=len(batch) - applied_here
                    ),
                )
        finally:
            for q in batch:
                q.done.set()

    async def leave_isr(self, stream: str, partition: int) -> bool:
        """Take this server out of a partition's ISR as a follower whose log was found
        damaged (LeaveIsr; a no-op if it is not there or alone there): an ISR member must
        hold every committed record, since the metadata leader elects ISR members without
        their reports (:mod:`.takeover`). True once applied; never raises."""
        meta = self.raft.state.streams.get(stream)
        if meta is None:
            return False
        op = LeaveIsr(stream, partition, self.server_id, meta.stream_id)
        return await self._propose_own(op, "leave-isr")

    async def _propose_own(self, op: LeaveIsr | ElectLeader, kind: str) -> bool:
        """Propose ``op`` for one of this server's replicas (forwarded to the metadata
        leader), bounded by :data:`ISR_PROPOSE_BOUND_S`; True if applied."""
        try:
            applied = await self.raft.propose(
                op, op_id=f"{kind}-{uuid.uuid4().hex}", timeout=ISR_PROPOSE_BOUND_S, forward=True
            )
        except RaftError as exc:
            log.warning(
                "a damaged replica's proposal not applied",
                extra=fields(stream=op.stream, partition=op.partition, op=kind, error=str(exc)),
            )
            return False
        return applied.result.ok

    async def hand_over(self, stream: str, partition: int, leader_epoch: int) -> bool:
        """This server was named leader at ``leader_epoch`` but does not lead, its log being
        damaged: elect another ISR member (one that answers probes first, in replica order)
        at the next epoch (ElectLeader; the state machine takes this server out of the ISR).
        An ISR member holds every committed record. True once applied; never raises."""
        state = self.raft.state
        a = state.assignment(stream, partition)
        if a is None:
            return False
        others = [r for r in a.replicas if r in a.isr and r != self.server_id]
        if a.leader != self.server_id or a.leader_epoch != leader_epoch or not others:
            return False
        new = next((r for r in others if not self.is_down(r)), others[0])
        op = ElectLeader(stream, partition, new, leader_epoch + 1, state.streams[stream].stream_id)
        return await self._propose_own(op, "hand-over")

    async def report_leader_silent(
        self, stream: str, partition: int, leader_epoch: int, reporter: str
    ) -> None:
        """Report the leader of ``stream``/``partition`` at ``leader_epoch`` silent.

        Not sent once this server is :attr:`stopping`, nor about a partition whose
        leader's server is gone while the metadata leader elects it (:meth:`takeover_due`),
        nor about an epoch older than this server's metadata has (elected since).
        Delivered to the
        metadata leader within :data:`REPORT_TIMEOUT_S`: if no metadata leader is known or
        it does not answer (it may have failed with the partition leader), the report waits
        for the next metadata leader and is sent again. Failures are logged (DEBUG) and swallowed:
        the caller reports again while the leader stays silent.
        """
        if NO_REPORTS_FOR_TESTS and self._led_by_other(stream, partition, reporter):
            return
        a = self.raft.state.assignment(stream, partition)
        if a is not None and a.leader_epoch > leader_epoch:
            # Elected since (the metadata leader's view is at that epoch at least, and
            # answers such a report "not accepted"): the replica gets its new role from
            # the metadata. A failover's old followers, until their burst of role changes
            # applied, reported the elected partitions again: 1,000 on the metadata leader
            # at 3,000 partitions, 4.6 s of its loop's time to answer.
            self.reports_stale += 1
            return
        if self.takeover_due(stream, partition):
            # The metadata leader elects the partitions of a gone server itself
            # (.takeover): the reports (3,334 from each survivor at 10,000 partitions)
            # only kept both loops busy, and the metadata leader answered them once the
            # takeover's elections had applied.
            self.reports_left_to_takeover += 1
            if self.hold is not None and a is not None and a.leader is not None:
                self.hold.counted(a.leader, sent=False)
            return
        if self.stopping:  # a reporter can be elected, and this server is about to go
            log.debug(
                "silent-leader report not sent: this server is stopping",
                extra=fields(stream=stream, partition=partition, leader_epoch=leader_epoch),
            )
            return
        self.reports_sent += 1
        if self.hold is not None and a is not None and a.leader is not None:
            self.hold.counted(a.leader, sent=True)
        request = {
            "stream": stream,
            "partition": partition,
            "leader_epoch": leader_epoch,
            "reporter": reporter,
        }
        item = _QueuedReport(request, a.leader if a is not None else None)
        self._report_queue.append(item)
        try:
            while not item.taken:
                if self._report_gathering:
                    await self._report_gathered.wait()
                    continue
                # Gather a batch; it is delivered while the next one gathers (up to
                # REPORTS_IN_FLIGHT at once).
                self._report_gathering = True
                batch: list[_QueuedReport] = []
                try:
                    await anyio.sleep(REPORT_BATCH_GATHER_S)
                finally:
                    self._report_gathering = False
                    batch = self._report_queue[:REPORT_MAX_BATCH]
                    self._report_queue = self._report_queue[REPORT_MAX_BATCH:]
                    for q in batch:
                        q.taken = True
                    gathered, self._report_gathered = self._report_gathered, anyio.Event()
                    gathered.set()
                    if batch:
                        with anyio.CancelScope(shield=True):  # the others wait for this batch
                            async with self._report_slots:
                                await self._send_reports(batch)
            await item.done.wait()  # set by _send_reports, which is bounded in time
        finally:
            if not item.taken and item in self._report_queue:
                self._report_queue.remove(item)  # cancelled before its batch went out

    def takeover_due(self, stream: str, partition: int) -> bool:
        """True if the metadata leader's takeover elects this partition without reports:
        its leader's server is gone in this server's liveness view and either this server
        leads the metadata, or :attr:`hold` finds that server's takeover under way
        (:mod:`.report_hold`; after it, reports go: that metadata leader's view may not
        find the server gone)."""
        a = self.raft.state.assignment(stream, partition)
        if a is None or a.leader is None or not self.is_gone(a.leader):
            return False
        if self.raft.is_leader:
            return True
        return self.hold is not None and self.hold.held(a.leader)

    def report_hold(self, server_id: str) -> anyio.Event | None:
        """An event set when reports about the partitions ``server_id`` leads are no longer
        held (:mod:`.report_hold`), or None if they are not held now: the followers of a
        gone leader wait on it rather than each reporting every silence period."""
        if self.hold is None:
            return None
        ended = self.hold.ended(server_id)
        if ended is not None:
            self.hold.counted(server_id, sent=False)  # a report held (in the summary line)
        return ended

    def _led_by_other(self, stream: str, partition: int, reporter: str) -> bool:
        a = self.raft.state.assignment(stream, partition)
        return a is None or a.leader != reporter

    async def _send_reports(self, batch: list[_QueuedReport]) -> None:
        """Deliver ``batch`` to the metadata leader within :data:`REPORT_TIMEOUT_S` (see
        :meth:`report_leader_silent`): counted here if this server leads the metadata, else
        one ReportLeader (with ``reports`` when more than one)."""
        if not batch:
            return
        self.report_batches += 1
        error: BaseException | None = None
        started = time.monotonic()
        try:
            with anyio.move_on_after(REPORT_TIMEOUT_S):
                attempt = 0
                while True:
                    attempt += 1
                    leader = self.raft.leader_id
                    try:
                        await self._deliver(leader, [q.request for q in batch])
                        log.info(  # one line for a batch (the replicas log theirs at DEBUG)
                            "silent-leader reports delivered",
                            extra=fields(
                                count=len(batch),
                                leaders=per_leader(q.leader for q in batch),
                                metadata_leader=leader,
                                # the metadata leader answers once the elections applied
                                deliver_s=round(time.monotonic() - started, 3),
                            ),
                        )
                        return
                    except (ApiError, JetError) as exc:
                        error = exc
                    # Wait for another metadata leader (or a short pause) and try again.
                    if not await self._leader_changed(leader, backoff_s(attempt)):
                        break
            log.debug(
                "silent-leader reports not delivered",
                extra=fields(reports=len(batch), error=str(error)),
            )
        finally:
            for q in batch:
                q.done.set()

    async def _deliver(self, leader: str | None, requests: list[dict[str, Any]]) -> None:
        if self.raft.is_leader:
            await self.elections.report_many(
                [(r["stream"], r["partition"], r["leader_epoch"], r["reporter"]) for r in requests]
            )
            return
        address = self.client_addresses().get(leader) if leader else None
        if address is None:
            raise ApiError(ErrorCode.UNAVAILABLE, "no metadata leader known")
        body = requests[0] if len(requests) == 1 else {"reports": requests}
        await self.peers.request_json(address, Api.REPORT_LEADER, body, REPORT_TIMEOUT_S)

    async def _leader_changed(self, old: str | None, limit_s: float) -> bool:
        """Wait up to ``limit_s`` for a metadata leader other than ``old``; False if the
        Raft member is closed."""

        def changed(status: RaftStatus) -> bool:
            return status.leader_id is not None and status.leader_id != old

        with anyio.move_on_after(limit_s):
            try:
                await self.raft.wait_status(changed, timeout=limit_s + 1.0)
            except RaftClosed:
                return False
            except RaftError:
                pass
        return True
