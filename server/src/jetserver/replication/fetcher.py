"""The follower's fetch loop: reconcile by leader epoch, then fetch from the leader.

One :class:`FollowerFetcher` runs per follower replica and leader epoch (the partition
starts a new one when the leader or the epoch changes). Through the
:class:`~jetserver.replication.session.FetchSession` to the leader's server (one connection
and one long poll for every partition this server follows there) it:

1. **Reconciles** (KIP-101): ``OffsetForLeaderEpoch(latest local epoch)``, truncate to
   :func:`~jetserver.replication.truncation_point`, again until done
   (:mod:`~jetserver.replication.reconcile`); not asked when no answer could cut a record:
   a log without records, or already in the epoch it follows.
2. **Fetches** in a loop: ``(replica_id, offset = LEO, replica_flushed, leader_epoch)`` in
   the session's ReplicaFetch (a long poll); appends the records as they are
   (``Log.append_raw``, CRC-checked); with durability ``flushed`` fsyncs them (group
   commit) before the next fetch so that fetch reports them flushed; with ``replicated``
   the next fetch reports them at once and the partition's flusher fsyncs them. The HW
   carried by each answer becomes the follower's HW (:func:`~jetserver.replication.follower_hw`).
3. **Watches the leader**: no answer for ``leader_silence_s`` — neither to its fetches nor
   to this server's liveness probes of the leader's server — while those probes find the
   leader's server down (refused, or timing out for ``DOWN_AFTER_S``) → report the leader
   silent to the controller, again every period while it lasts; a refused probe (the
   process is gone) is reported at once, without waiting for ``leader_silence_s``; two
   fetches in a row unanswered within their long poll plus ``request_slack_s`` while the
   session's other requests were answered (this partition is stuck at a live leader) are
   reported at once (left out of requests sent without a long poll, which the leader
   answers for every partition: a request answered early for other partitions' news, or a
   loaded leader answering late, does not count); a whole session request unanswered is
   the leader's server's silence,
   which the liveness view decides. Only while this replica holds every record it knows to
   be committed (a replica that lost data must not be elected). Probes and session answers
   keep an idle partition's leader heard.

``OFFSET_OUT_OF_RANGE``: below the leader's log start (retention moved it) the log restarts
empty at the leader's log start; above the leader's LEO the follower reconciles again.
``NOT_LEADER`` (the leader moved or the epochs disagree): wait and retry; the partition
hands over a new assignment when the metadata changes.

Task safety: one task in the partition's task group, the log's only writer while the
partition follows. A role change calls :meth:`FollowerFetcher.stop` and waits only for a
write in progress (:meth:`FollowerFetcher.writes_done`), not for the task's end: from
``stop`` on, it writes nothing, sets no HW and reports no silence (a failover's new leaders
waited 0.7-1.8 s for a thousand cancelled fetchers' tasks to end on a busy loop).
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import anyio
import attrs

from jetsdk.codec.epoch_messages import OffsetForLeaderEpochRequest, OffsetForLeaderEpochResponse
from jetsdk.codec.error_codes import ErrorCode
from jetsdk.codec.errors import CodecError
from jetsdk.codec.frames import Api
from jetsdk.codec.replica_fetch import ReplicaFetchPartition
from jetsdk.errors import (
    JetConnectionError,
    JetError,
    NotLeader,
    PartitionNotFound,
    PartitionOffline,
    StreamNotFound,
    Timeout,
    Unavailable,
)
from jetserver.infra import hops
from jetserver.logs import fields
from jetserver.replication.config import ReplicationConfig
from jetserver.replication.control import ControlPlane, report_hold_of, server_gone_of
from jetserver.replication.follower import NotLeaderRun, SilenceDetector, follower_hw
from jetserver.replication.interruptions import Interruptions
from jetserver.replication.invariants import ReplicaInvariantViolation
from jetserver.replication.reconcile import reconcile
from jetserver.replication.session import FetchSession, LeftOut
from jetserver.security.peer import PLAIN, PeerSecurity
from jetserver.storage import Log, StorageError
from jetserver.storage.fsync_runner import INLINE_MAX_BYTES, FsyncRunner

log = logging.getLogger(__name__)

FETCH_TIMEOUTS_REPORTED = 2
"""Replica fetches in a row unanswered within their long poll plus ``request_slack_s``,
each left out of the answer to a request without a long poll
(:class:`~jetserver.replication.session.LeftOut`), that report the leader silent even
while its server answers liveness probes."""


DOWN_RECHECK_S = 0.25
"""While its leader is silent but its server not (yet) down here, look again this often."""

T = TypeVar("T")


class _Restart(Exception):
    """Start over: reconcile again (after a pause)."""


class _Stopped(Exception):
    """:meth:`FollowerFetcher.stop` was called: end without touching the log again."""


LEADER_ANSWERS: tuple[type[JetError], ...] = (
    NotLeader,
    Unavailable,
    PartitionOffline,
    PartitionNotFound,
    StreamNotFound,
)
"""Errors the leader's server answers while it cannot serve this fetch yet (it has not
opened the partition, or leads another epoch): they count as hearing from it, and the
fetcher retries after a pause."""


@attrs.define(eq=False)
class FollowerFetcher:
    """Replicates one partition from its leader (see the module docstring)."""

    stream: str
    """Stream name."""
    partition: int
    """Partition number."""
    server_id: str
    """This server's id (the reporter of a silent leader)."""
    replica_id: int
    """This server's index in the partition's replica list (sent as ``replica_id``)."""
    leader: str
    """The leader's server id."""
    leader_address: str
    """The leader's client ``host:port`` ("" if unknown: wait for a new assignment)."""
    leader_epoch: int
    """The epoch this fetcher follows."""
    log: Log
    """The partition log."""
    durability: str
    """``flushed`` or ``replicated``."""
    config: ReplicationConfig
    """Fetch sizes, timeouts, silence bound."""
    on_hw: Callable[[int], Awaitable[None]]
    """Called with the new HW when it moves (the partition sets it and wakes readers)."""
    request_flush: Callable[[], None]
    """Asks the partition's flusher to fsync soon (durability ``replicated``)."""
    controller: ControlPlane | None = None
    """Where silent leaders are reported (None: not reported)."""
    committed_floor: int = 0
    """Offsets below this were committed before (the checkpointed HW at open): until the
    log holds them again, this replica does not report a silent leader."""
    damaged: bool = False
    """The log lost records this process cannot vouch for (recovery cut or fenced data,
    or the scrub at open truncated it): until it has caught up with the leader once, this
    replica does not report a silent leader."""
    on_whole: Callable[[], None] | None = None
    """Called when a damaged replica has caught up with its leader."""
    clock: Callable[[], float] = time.monotonic
    """Monotonic seconds (asyncio's loop clock; not anyio's: a getpid per fetch answer)."""
    security: PeerSecurity = PLAIN
    """TLS and the internal token for the connection to the leader (a session of its own,
    when ``session`` is None)."""
    session: FetchSession | None = None
    """The fetch session to the leader's server, shared with the other partitions this
    server follows there (None: :meth:`run` runs one of its own)."""
    fsyncs: FsyncRunner = attrs.field(factory=FsyncRunner)
    """Where the fsyncs of fetched records run (the server's, shared by its partitions)."""
    server_heard: Callable[[str], float | None] | None = None
    """When a server last answered this server's liveness probes (``clock`` time; None:
    no probes); the leader's counts as hearing from the leader."""
    server_down: Callable[[str], bool] | None = None
    """This server's liveness view (None: no probes): a silence is reported only while the
    leader's server is down in it (refused, or probes timing out for a while), so that a
    busy server is not reported by every partition it leads (spec/cluster.md)."""
    server_up_event: Callable[[str], anyio.Event] | None = None
    """An event set once this server's liveness view finds a server not down (None: not
    known): a follower whose leader's server is down waits on it after a lost connection
    instead of retrying on a timer (:meth:`_pause_after`)."""
    server_down_event: Callable[[str], anyio.Event] | None = None
    """An event set once this server's liveness view finds a server down (None: not
    known): while the leader's server is not down, the silence watch waits on it instead of
    waking every silence period (thousands of followers: thousands of wake-ups a second)."""
    not_leader: NotLeaderRun = attrs.field(factory=NotLeaderRun)
    """When a leader answering NOT_LEADER in its own epoch is reported silent."""
    fetches: int = 0
    """Fetch answers received."""
    records_bytes: int = 0
    """Record bytes appended."""
    truncations: int = 0
    """Truncations made by reconciliation."""
    _silence: SilenceDetector | None = None
    interruptions: Interruptions = attrs.field(
        init=False, default=attrs.Factory(lambda self: Interruptions(self.config), takes_self=True)
    )
    """The current series of failed fetches (pauses, log levels)."""
    _timeouts: int = 0
    _ask_leader: bool = False
    """The last fetch found this log past the leader's LEO: reconcile by asking."""
    _leader_hw: int = -1
    _stopped: bool = False
    _writing: int = 0
    """Log writes in progress (a worker-thread call may outlive the task's cancellation)."""
    _writes_ended: anyio.Event | None = None

    @property
    def stopped(self) -> bool:
        """:meth:`stop` was called."""
        return self._stopped

    def stop(self) -> None:
        """The role ended: from now on this fetcher writes nothing to the log, sets no HW
        and reports nothing (each checks this before it starts). A write already in
        progress ends first: :meth:`writes_done`. The task ends by itself: its fetch
        waiting in the session is dropped (a pause or a request of another kind ends
        first), not cancelled (anyio delivers a cancellation again on every loop pass
        until its task ends: a thousand at a failover cost more than the role changes)."""
        self._stopped = True
        if self.session is not None:
            self.session.drop(self.stream, self.partition)

    @property
    def ends_when_stopped(self) -> bool:
        """:meth:`stop` ends the task by itself (soon): False for a fetcher without a
        leader address, which waits to be cancelled."""
        return bool(self.leader_address)

    async def writes_done(self) -> None:
        """Return once no log write of this fetcher is in progress (at once, usually)."""
        while self._writing:
            if self._writes_ended is None:
                self._writes_ended = anyio.Event()
            await self._writes_ended.wait()

    async def _write(self, call: Callable[..., Awaitable[T]], *args: Any) -> T:
        """``await call(*args)`` (a log write) unless stopped, counted in :attr:`_writing`.

        Raises:
            _Stopped: :meth:`stop` was called before it started.
        """
        if self._stopped:
            raise _Stopped
        self._writing += 1
        try:
            return await call(*args)
        finally:
            self._writing -= 1
            if not self._writing and self._writes_ended is not None:
                self._writes_ended.set()
                self._writes_ended = None

    async def _in_thread(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` (a log write) in a worker thread, unless stopped (:meth:`_write`)."""
        return await self._write(anyio.to_thread.run_sync, fn, *args)

    def _have(self) -> int:
        log_ = self.log
        return log_.flushed_offset if self.durability == "flushed" else log_.log_end_offset

    @property
    def whole(self) -> bool:
        """True if this replica holds every record it knows to be committed (fsynced, or
        written if durability is ``replicated``), and has no unrepaired damage."""
        have = self._have()
        return not self.damaged and have >= self.committed_floor and have >= self._leader_hw

    async def run(self) -> None:
        """Replicate until cancelled (or stopped: :meth:`stop`)."""
        self._silence = SilenceDetector(self.config.leader_silence_s, self.clock())
        async with anyio.create_task_group() as tg:
            if self.session is None and self.leader_address:
                self.session = FetchSession(self.leader_address, self.config, self.security)
                self.session.users += 1
                tg.start_soon(self.session.run)
            tg.start_soon(self._watch_leader)
            with contextlib.suppress(_Stopped):
                await self._replicate()
            tg.cancel_scope.cancel()

    async def _watch_leader(self) -> None:
        silence = self._silence
        assert silence is not None
        while True:
            if self.server_down_event is not None and self.server_down is not None:
                # Reports go out only while the leader's server is down: wait for that.
                await self.server_down_event(self.leader).wait()
                self._heard_from_server()
                gone = server_gone_of(self.controller)
                held = report_hold_of(self.controller)
                ended = held(self.leader) if held is not None and gone is not None else None
                if ended is not None:
                    # Its takeover is under way (report_hold): one event for every partition
                    # it leads here, not a wake-up and a report each per period.
                    await ended.wait()
                    self._heard_from_server()
                    continue
                if gone is not None and gone(self.leader) and silence.leader_down(self.clock()):
                    # Its probe was refused: the process is gone. Report now rather than
                    # leader_silence_s after the last answer (1-1.5 s of every failover). A
                    # server whose probes only time out keeps the silence rule: a busy one
                    # may still answer this partition's fetches.
                    # At DEBUG: the controller logs one line per batch of reports.
                    await self._report("leader's server down", repeated=True)
                    continue
            await anyio.sleep(max(silence.next_check_s(self.clock()), 0.01))
            self._heard_from_server()
            if silence.next_check_s(self.clock()) > 0:
                continue  # heard meanwhile
            if self.server_down is not None and not self.server_down(self.leader):
                # Its server answers probes or has been slow only briefly: a busy leader,
                # not a dead one. Look again soon: the liveness view may find it down at
                # its next probe (waiting a whole silence period more delayed failovers).
                await anyio.sleep(DOWN_RECHECK_S)
                continue
            first = silence.last_report_s is None
            if not silence.should_report(self.clock()):
                continue
            await self._report("leader silent", repeated=not first)

    def _heard_from_server(self) -> None:
        """Count answers to this server's liveness probes or to the session (its parked
        partitions are answered with it) as hearing from the leader."""
        if (silence := self._silence) is None:
            return
        ago, at = (self.session.heard_s_ago() if self.session else None), self.server_heard
        for t in (at and at(self.leader), None if ago is None else self.clock() - ago):
            if t is not None and t > silence.last_heard_s:
                silence.heard(t)

    async def _report(self, why: str, *, repeated: bool = False) -> None:
        """Report the leader silent (if this replica is whole), logged at DEBUG: the
        controller logs one line per batch, with the count per leader server (thousands of
        partitions report at once, and repeat theirs every period)."""
        if self._stopped:  # the role ended: its next one decides
            return
        if not self.whole:
            log.warning(
                f"{why}; not reporting it: this replica lacks committed records",
                extra=self._fields(flushed=self.log.flushed_offset),
            )
            return
        if log.isEnabledFor(logging.DEBUG):  # thousands at once: no fields built for nothing
            log.debug(f"{why}; reporting it", extra=self._fields(repeated=repeated))
        if self.controller is not None:
            c, epoch = self.controller, self.leader_epoch
            await c.report_leader_silent(self.stream, self.partition, epoch, self.server_id)

    # ------------------------------------------------------------------ main loop

    async def _replicate(self) -> None:
        reconciled = False
        while not self._stopped:
            session = self.session
            if not self.leader_address or session is None:
                await anyio.sleep_forever()  # a new assignment will bring the address
                return
            try:
                if not reconciled:
                    await self._reconcile(session)
                    reconciled = True
                await self._fetch_loop(session)
            except LEADER_ANSWERS as exc:
                reconciled = False
                self._heard()  # it answered: not silent
                if not isinstance(exc, NotLeader):  # UNAVAILABLE & co: taking its role
                    self.not_leader.answered()
                elif self.not_leader.not_leader(self.clock(), self.config.leader_silence_s):
                    await self._report("leader answers NOT_LEADER in its own epoch")
                await self._pause_after(exc)
            except _Restart as exc:
                reconciled = False
                await self._pause_after(exc)
            except Timeout as exc:
                # A fetch unanswered in time: same leader, same epoch, its log only grew
                # meanwhile, so fetching on needs no new reconciliation (a changed epoch is
                # answered NOT_LEADER). Reconciling again after every session timeout made
                # each partition followed there send an OffsetForLeaderEpoch at once.
                if self.log.sync_failure is not None:
                    reconciled = False
                    await self._recover_unsynced(exc)
                await self._pause_after(exc, quiet=True)
            except (JetError, CodecError, StorageError, OSError) as exc:
                reconciled = False
                if self.log.sync_failure is not None:
                    await self._recover_unsynced(exc)
                await self._pause_after(exc)

    async def _pause_after(self, exc: Exception, *, quiet: bool = False) -> None:
        """Log an interruption (:class:`Interruptions` decides the level; INFO goes through
        the session's tally: a line per cause per interval) and back off. The connection
        lost while the liveness view finds the leader's server down: wait until it answers
        probes again, up to ``leader_silence_s`` and at least the back-off (a kill -9 left
        thousands of followers of the dead leader retrying together)."""
        if self._stopped:
            raise _Stopped  # the role ended (its fetch was dropped): nothing to retry
        level, pause = self.interruptions.failed(exc, anyio.current_time(), quiet=quiet)
        tally = self.session.interrupted if self.session is not None else None
        if level > logging.DEBUG and tally is not None:
            tally.event(type(exc).__name__, lambda: self._fields(error=repr(exc)))
        elif log.isEnabledFor(level):
            log.log(level, "replication interrupted", extra=self._fields(error=repr(exc)))
        up, down = self.server_up_event, self.server_down
        if (
            isinstance(exc, JetConnectionError)
            and up is not None
            and down is not None
            and down(self.leader)
        ):
            with anyio.move_on_after(max(pause, self.config.leader_silence_s)):
                await up(self.leader).wait()
            return
        await anyio.sleep(pause)

    async def _recover_unsynced(self, exc: Exception) -> None:
        """An fsync failed: cut the log back to its last good sync (what the failed fsync
        covered may be missing from the disk). The leader never counted those records as
        flushed here, so the next fetch asks for them again."""
        log_ = self.log
        leo = log_.log_end_offset
        try:
            end = await self._in_thread(log_.recover_unsynced)
        except StorageError as again:
            log.critical(
                "fsync failed and the log cannot be cut back to disk",
                extra=self._fields(error=repr(again), first_error=repr(exc)),
            )
            raise
        log.error(
            "fsync failed: cut the log back to its last good sync; fetching the rest again",
            extra=self._fields(error=repr(exc), leo_was=leo, leo=end),
        )

    async def _json(self, session: FetchSession, api: int, obj: dict[str, Any]) -> dict[str, Any]:
        answer = await session.request_json(api, obj, self.config.request_slack_s)
        self._heard()
        self.not_leader.answered()
        return answer

    def _heard(self) -> None:
        if self._silence is not None:
            self._silence.heard(self.clock())

    async def _reconcile(self, session: FetchSession) -> None:
        """Truncate the log where it diverges from the leader's (KIP-101)."""

        async def ask(latest: int) -> tuple[int, int]:
            req = OffsetForLeaderEpochRequest(
                self.stream,
                self.partition,
                leader_epoch=latest,
                current_leader_epoch=self.leader_epoch,
                replica_id=self.replica_id,
            )
            answer = OffsetForLeaderEpochResponse.from_json(
                await self._json(session, Api.OFFSET_FOR_LEADER_EPOCH, req.to_json())
            )
            return answer.leader_epoch, answer.end_offset

        anyway, self._ask_leader = self._ask_leader, False
        following, cut = self.leader_epoch, self._truncate
        if not await reconcile(
            self.log, following=following, ask=ask, truncate=cut, ask_anyway=anyway
        ):
            raise _Restart("reconciliation did not converge")

    async def _truncate(self, offset: int) -> None:
        log_ = self.log
        if offset < log_.log_end_offset:
            if offset < log_.high_watermark:
                log.error(
                    "truncating below the high watermark",
                    extra=self._fields(offset=offset, hw=log_.high_watermark),
                )
            log.info(
                "truncating to the divergence point",
                extra=self._fields(offset=offset, leo=log_.log_end_offset),
            )
            self.truncations += 1
            await self._in_thread(log_.truncate_to, offset)
        # An epoch this replica led without appending anything leaves an entry at its LEO.
        await self._in_thread(log_.epochs.truncate_from_end, offset)

    async def _fetch_loop(self, session: FetchSession) -> None:
        cfg = self.config
        log_ = self.log
        while not self._stopped:
            if self.durability == "flushed" and log_.flushed_offset < log_.log_end_offset:
                # Records an earlier fetch appended but a role change stopped before its
                # fsync (a leader change mid-fetch): fsync them now, or this fetch, and every
                # later one while nothing new arrives, would report them unflushed and the
                # leader's HW would wait for them forever.
                await self._in_thread(log_.flush)
            part = ReplicaFetchPartition(
                stream=self.stream,
                partition=self.partition,
                offset=log_.log_end_offset,
                replica_id=self.replica_id,
                replica_flushed=log_.flushed_offset,
                leader_epoch=self.leader_epoch,
                max_bytes=cfg.fetch_max_bytes,
            )
            if hops.ENABLED:
                hops.mark("repl.ask")
            try:
                header = await session.fetch(part, cfg.fetch_max_wait_s + cfg.request_slack_s)
            except LeftOut:
                # The leader's server answered a request carrying this partition without a
                # long poll, without it: twice in a row, it is stuck there.
                self._timeouts += 1
                if self._timeouts >= FETCH_TIMEOUTS_REPORTED:
                    await self._report("replica fetch unanswered")
                raise
            # Any other Timeout: the session's requests went unanswered (its server is
            # silent or slow, which the liveness view decides: _watch_leader), or were
            # answered early for other partitions' news or late by a loaded leader. Every
            # partition followed there reporting at once (thousands) made a merely busy
            # server lose its leaderships: at 5,000 partitions on a loaded 2-core machine,
            # "any answer to the session meanwhile" reported live leaders by the hundred.
            self._heard()
            self._timeouts = 0
            self.not_leader.answered()
            self.fetches += 1
            records = header.records
            if header.error_code == ErrorCode.OFFSET_OUT_OF_RANGE:
                await self._out_of_range(header.log_start, header.leo)
                continue
            if header.error_code != ErrorCode.NONE:
                raise _Restart(f"fetch answered error {header.error_code}")
            self._leader_hw = max(self._leader_hw, header.hw)
            if len(records):
                if hops.ENABLED:
                    hops.mark("repl.fetched")
                data = records  # appended as it arrived: a view of the answer, no copy
                if self.durability == "flushed":
                    # Both in one go, on the loop or in one worker-thread round trip (the
                    # next fetch reports them).
                    await self._write(self.fsyncs.append_and_flush, log_, data)
                    if hops.ENABLED:
                        hops.mark("repl.flushed")
                else:  # small: on the loop, reported at once (not after a thread's 2 wake-ups)
                    if len(data) > INLINE_MAX_BYTES or self._stopped:
                        await self._in_thread(log_.append_raw, data)  # (or raises _Stopped)
                    else:
                        log_.append_raw(data)
                    self.request_flush()
                self.records_bytes += len(data)
            # Reset once stored: a refused append (a disk below its floor) backs off.
            self.interruptions.answered()
            new = follower_hw(
                log_.high_watermark,
                header.hw,
                leo=log_.log_end_offset,
                flushed=log_.flushed_offset,
                durability=self.durability,
            )
            if new > log_.high_watermark:
                if new > log_.log_end_offset:
                    raise ReplicaInvariantViolation(
                        f"a follower would adopt high watermark {new} past its log end "
                        f"{log_.log_end_offset}"
                    )
                await self._write(self.on_hw, new)
            if header.log_start > log_.log_start_offset:
                # The leader's log start moved (a purge, or its retention): records below
                # it are gone from the partition, so this replica drops them too.
                start = min(header.log_start, log_.log_end_offset)
                await self._in_thread(log_.advance_start, start)
            # An answer without records: this replica holds everything the leader has,
            # so every committed record.
            if (
                self.damaged
                and not len(records)
                and self._have() >= max(header.hw, self.committed_floor)
            ):
                if self._stopped:
                    raise _Stopped
                self.damaged = False
                log.info("damaged replica caught up with its leader", extra=self._fields())
                if self.on_whole is not None:
                    self.on_whole()

    async def _out_of_range(self, leader_log_start: int, leader_leo: int) -> None:
        log_ = self.log
        if log_.log_end_offset < leader_log_start:
            log.warning(
                "behind the leader's log start: restarting the log there",
                extra=self._fields(leo=log_.log_end_offset, leader_log_start=leader_log_start),
            )
            await self._in_thread(log_.restart_at, leader_log_start)
            return
        self._ask_leader = True  # the next reconciliation asks, whatever the log holds
        raise _Restart(f"offset {log_.log_end_offset} beyond the leader's LEO {leader_leo}")

    def _fields(self, **extra: Any) -> dict[str, Any]:
        return fields(
            stream=self.stream,
            partition=self.partition,
            leader=self.leader,
            leader_epoch=self.leader_epoch,
            **extra,
        )
