"""The committer of a partition replica: group commit (fsync) and what follows it.

:class:`Committer` owns the flusher task, the high-watermark waits and the count of failed
fsyncs. Its flusher waits until records were appended (:meth:`Committer.request_flush`),
fsyncs them (one fsync covers everything appended so far) on the event loop or in a worker
thread as :class:`~jetserver.storage.fsync_runner.FsyncRunner` decides, then tells the replica's
:class:`~jetserver.replication.core.ReplicaCore`, which says what follows: the high
watermark to set (single server: the flushed offset; leader: per the ISR), the ALL acks to
send, whom to wake (:meth:`Committer.carry_out`). Records appended during an fsync are
covered by the next one (group commit).

The sequencer, the role driver and the replica-fetch side hand it the core's outcomes
(:meth:`Committer.carry_out`): it is the one place that moves the HW and answers ALL acks.

Task safety: event loop thread (Log.flush runs in a worker thread, which the storage engine
allows concurrently with the single writer).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

import anyio
import attrs

from jetsdk.codec.error_codes import ErrorCode
from jetserver.broker.acks import AckRouter, PendingAck, deliver_pending
from jetserver.broker.commit_soon import CommitSoon
from jetserver.broker.copy_turns import CopyTurns
from jetserver.broker.hw_waits import HwWaits
from jetserver.broker.in_turn import InTurn
from jetserver.broker.replica_base import ReplicaBase
from jetserver.infra import hops
from jetserver.infra.lazy_event import LazyEvent
from jetserver.metadata.model import DURABILITY_FLUSHED, DURABILITY_WRITTEN
from jetserver.replication.core import ROLE_SINGLE, Outcome
from jetserver.storage import SyncFailedError
from jetserver.storage.flush_behind import FlushBehind
from jetserver.storage.fsync_runner import FsyncRunner

log = logging.getLogger(__name__)

FLUSH_RETRY_S = 1.0
"""Pause before retrying after a failed fsync."""

__all__ = ["FLUSH_RETRY_S", "Committer", "PendingAck"]


def _nothing() -> None:
    return None


@attrs.define(eq=False, repr=False)
class Committer:
    """Group commit and the HW of one partition replica (see the module docstring)."""

    base: ReplicaBase
    """The replica's name, log, core and lifecycle (read only here)."""
    fsyncs: FsyncRunner
    """Where fsyncs run."""
    acks: AckRouter
    """Where ALL acks to NATS inboxes go."""
    wake_replicas: Callable[[], None] = _nothing
    """Wakes parked replica fetches (the leader's replica-fetch side)."""
    stop_replica: Callable[..., None] = _nothing
    """Stops the replica (a failed fsync whose log cannot be cut back)."""
    renew_leadership: Callable[[int], None] = lambda _epoch: None
    """Gives up leading an epoch after a failed fsync (the role driver)."""
    on_leadership_end: Callable[[str, int], None] | None = None
    """Called with (stream, partition) once leadership ended (the Produce service)."""
    sync_failures: int = 0
    """fsyncs of this partition's log that failed (each followed by a cut back to disk)."""
    _dirty: LazyEvent = attrs.field(init=False)
    """Set to have the flusher fsync (made with it, :meth:`request_flush`; a LazyEvent: a
    new anyio.Event per flush looked up the backend, a getpid system call, each message)."""
    _flushing: bool = False
    """The flusher task runs (started by the first :meth:`request_flush`)."""
    waits: HwWaits = attrs.field(init=False)
    """Who waits for the HW to move (broker/hw_waits.py): woken by each commit."""
    copy_turns: CopyTurns = attrs.field(factory=CopyTurns)
    """The order of this partition's NATS copies (:meth:`copies_turn`)."""
    _deferred: bool = False
    """Records were appended whose fsync is left to the appending request
    (:meth:`defer_flush`) and nobody has started it yet."""
    _deferred_soon: asyncio.Handle | None = None
    """The next turn's :meth:`_flush_if_deferred` of the last :meth:`defer_flush`."""
    _loop: asyncio.AbstractEventLoop | None = None
    """The running loop, once looked up (asyncio.get_running_loop costs a getpid system
    call per call on Python 3.11; a replica lives on one loop)."""
    loop_refused: bool = False
    """:meth:`commit_deferred` just found the fsync may not run on the loop: the flusher
    goes to a thread without asking again (no second probe turn)."""
    _behind: FlushBehind | None = None
    """The fsyncs of a ``written`` partition on its own (:meth:`request_flush`), made on
    the first."""
    thread_flush: bool = False
    """A request's deferred fsync runs in a worker thread (:meth:`commit_deferred`,
    :meth:`commit_here`, :class:`CommitSoon`)."""
    _soon: CommitSoon | None = None
    """The deferred fsyncs of one-step appends, run from loop callbacks (:meth:`soon`)."""
    _handover: asyncio.Task[None] | None = None
    """The task handing a partition whose background fsync failed to the flusher."""
    in_group: bool = False
    """A request group's fsync of this log runs (broker/commit_group.py)."""
    group_again: bool = False
    """A later group left its fsync of this log to the running one's end."""
    _rests: set[asyncio.Task[None]] = attrs.field(factory=set)
    """:meth:`carry_out_rest_soon`'s tasks (held until done)."""

    def __attrs_post_init__(self) -> None:
        self.waits = HwWaits(self.base, self.running_loop)

    def __repr__(self) -> str:
        return self.base.part_repr(self)

    def soon(self) -> CommitSoon:
        """Runs the fsync a one-step append left (:meth:`defer_flush`) and the work after
        its commit from loop callbacks, with no task (made on first use)."""
        soon = self._soon
        if soon is None:
            soon = self._soon = CommitSoon(self, self._running_loop())
        return soon

    def keep_deferred(self) -> bool:
        """Whether an fsync is left to the appending request (:meth:`defer_flush`); the
        next turn's check is cancelled: the caller runs it (:class:`CommitSoon`)."""
        soon = self._deferred_soon
        if soon is not None:
            soon.cancel()
            self._deferred_soon = None
        return self._deferred

    def take_deferred(self) -> bool:
        """Take the fsync :meth:`defer_flush` left (True; the next turn's check has nothing
        to do); False if none is left (the flusher or another request took it)."""
        if not self._deferred:
            return False
        self._deferred = False  # appends from here on defer again, or ask the flusher
        soon = self._deferred_soon
        if soon is not None:
            soon.cancel()
        return True

    @property
    def flushing(self) -> bool:
        """True once the flusher task started (an idle partition has none)."""
        return self._flushing

    def request_flush(self) -> None:
        """Have the flusher fsync what was appended. The flusher task starts on the first
        request: an idle partition has none (a task is about 4 KB; a server holds thousands
        of idle partitions). Not running (``run`` ended): nothing to do, its end flushed.

        A ``written`` partition on a server alone, whose flusher never had to start, fsyncs
        in a worker thread that reports nothing back (:class:`FlushBehind`): its commit
        came with the append, so the fsync's end changes nothing on the loop, and waking
        the loop for it cost a wake-up per message at light load. A failed fsync hands the
        partition to the flusher for good (:meth:`_behind_failed`)."""
        if not self._flushing:
            tg = self.base.life.tg
            if tg is None:
                return
            core = self.base.core
            if (
                core.policy.durability == DURABILITY_WRITTEN
                and core.role == ROLE_SINGLE
                and self.base.log.sync_failure is None
            ):
                behind = self._behind
                if behind is None:
                    loop = self._running_loop()
                    behind = self._behind = FlushBehind(self.base.log, loop, self._behind_failed)
                if behind.kick_soon():
                    self.fsyncs.thread_fsyncs += 1
                return
            loop = self._running_loop()
            if asyncio.current_task(loop) is None:  # a loop callback (CommitSoon): anyio's
                self._hand_over_soon()  # start needs a task
                return
            self._flushing = True
            self._dirty = LazyEvent()
            tg.start_soon(self._flusher)
        self._dirty.set()

    def defer_flush(self, *, start: bool = False) -> None:
        """Leave the fsync of what was just appended to the appending request, which runs
        it once its answer is written (:meth:`commit_deferred`, in its after-work): no
        flusher wake-up and no wake-up of the request for its NATS copies, two event-loop
        turns on a message's way at light load (docs/latency.md, "Hops"). If the request
        has not started it by the next loop turn (it yielded first, or has no after-work),
        the flusher is asked as always, so the records never wait longer than that.

        ``start``: start it now from loop callbacks (:class:`CommitSoon`: on the loop after
        a free turn, else on the split syncs' thread lane at once), for a replicated
        partition's leader, whose request waits for its followers anyway
        (:meth:`Sequencer.append_now <jetserver.broker.sequencer.Sequencer.append_now>`):
        the flusher task's wake-up, its probe turn and, on the thread path, its batch turn
        were on the leader's way to its fsync while the followers fetched (RF 3 ack ALL,
        issue 32). The HW still moves only at the fsync's end (:class:`InTurn`, the
        minimum over the ISR); a failure goes to the flusher, which recovers."""
        self._deferred = True
        self._deferred_soon = self._running_loop().call_soon(self._flush_if_deferred)
        if start:
            self.soon().after_commit(None)

    def _behind_failed(self, error: BaseException) -> None:
        """A :class:`FlushBehind` fsync failed (a loop callback): the flusher takes over,
        now and from then on, and recovers as from any failed fsync (the cut back)."""
        if self.base.life.tg is None:
            return  # run ended: final_flush saw the log's failure
        log.warning(
            "background fsync failed; the flusher takes over",
            extra=self.base.fields(error=repr(error)),
        )
        self._hand_over_soon()

    def _hand_over_soon(self) -> None:
        """Start the flusher from a task (anyio's task group needs one to find its backend
        from); one pending hand-over covers every later request until it runs (it sets
        :attr:`_dirty`), and :attr:`_handover` keeps it referenced until then."""
        pending = self._handover
        if pending is None or pending.done():
            self._handover = self._running_loop().create_task(self._hand_over())

    async def _hand_over(self) -> None:
        if self._flushing:  # another failure handed it over already
            self._dirty.set()
            return
        tg = self.base.life.tg
        if tg is None:
            return
        self._flushing = True
        self._dirty = LazyEvent()
        tg.start_soon(self._flusher)
        self._dirty.set()

    def _running_loop(self) -> asyncio.AbstractEventLoop:
        loop = self._loop
        if loop is None:
            loop = self._loop = asyncio.get_running_loop()
        return loop

    def running_loop(self) -> asyncio.AbstractEventLoop:
        """The loop this replica runs on (looked up once; call on that loop)."""
        return self._running_loop()

    def now(self) -> float:
        """``anyio.current_time()`` (the loop's clock) without its backend look-up."""
        return self._running_loop().time()

    @property
    def deferred_due(self) -> bool:
        """An fsync left by :meth:`defer_flush` is not started yet."""
        return self._deferred

    def claim_deferred(self) -> None:
        """Take the fsync :meth:`defer_flush` left (:attr:`deferred_due`), for a request's
        group of partitions (broker/commit_group.py: one thread job, then
        :meth:`group_flushed`). One of this log's fsyncs may run meanwhile: the storage
        engine's flush waits for it and fsyncs again only what it did not cover."""
        self._deferred = False
        if self._deferred_soon is not None:
            self._deferred_soon.cancel()

    def group_flushed(self, flushed: int, error: BaseException | None) -> None:
        """The group's fsync of a :meth:`claim_deferred` ended (a loop callback): commit
        as :class:`InTurn` (acks to NATS inboxes in a task); a failure, or a commit
        that raised, goes to the flusher, which recovers (the cut back) as always,
        started from a task if it never ran (anyio's task group needs one)."""
        if error is None:
            in_turn = InTurn(self)
            in_turn(flushed)
            if in_turn.committed:
                if in_turn.left is not None:
                    self.carry_out_rest_soon(*in_turn.left)
                return
        self.loop_refused = True
        if self._flushing:
            self._dirty.set()
        elif self.base.life.tg is not None:
            self._handover = self._running_loop().create_task(self._hand_over())

    def _flush_if_deferred(self) -> None:
        if self._deferred:
            self._deferred = False
            self.request_flush()

    async def commit_deferred(self, unless: Callable[[], bool] | None = None) -> None:
        """Fsync and commit what :meth:`defer_flush` left, in this task: on the loop if
        the fsync runner would run it there now; in a worker thread if the runner sends
        fsyncs there for now (a slow disk, a high share of loop time, many bytes to
        fsync: :meth:`FsyncRunner.may_run_here_for`), unless one from a request's task is
        there already (then the flusher groups the rest). Else (the loop is busy, or
        ``unless()``, as :meth:`commit_here`'s ``contended``), or on any error, ask the
        flusher, which recovers from a failed fsync as always. A no-op if nothing is left.

        In a thread from this task, not the flusher's: the flusher's wake-up was a task
        switch between the answer and the fsync on a message's way (``python -m bench
        cost`` on a disk slow enough for the runner's back-off)."""
        if not self.take_deferred():
            return
        log_ = self.base.log
        runner = self.fsyncs
        loop = self._running_loop()  # known: no getpid (3.11)
        in_thread = not runner.may_run_here_for(log_)
        if in_thread and self.thread_flush:
            self.loop_refused = True
            self.request_flush()
            return
        committed = False
        try:
            if hops.ENABLED:
                hops.mark("fsync.start")
            if in_thread:
                self.thread_flush = True
                in_turn = InTurn(self)
                try:
                    flushed: int | None = await runner.flush_in_thread(log_, None, loop, in_turn)
                finally:
                    self.thread_flush = False
                committed = in_turn.committed
            else:
                flushed = await runner.flush_here(log_, None, loop, unless, checked=True)
            if hops.ENABLED and flushed is not None and not committed:
                hops.mark("fsync.end")
        except Exception:
            flushed = None
        except BaseException:  # cancelled (the server stops): the flusher takes it
            self.request_flush()
            raise
        if committed:  # in the thread job's callback (InTurn); what needs an await here
            if in_turn.left is not None:  # (its rest() inline: no coroutine per message)
                await self.carry_out_rest(*in_turn.left)
            return
        if flushed is None:
            self.loop_refused = True
            self.request_flush()
            return
        await self.commit(flushed)

    # ---------------------------------------------------------------- waits

    async def wait_committed(self, end: int, failures: int, timeout_s: float) -> bool:
        """Wait until the HW reaches ``end``: True then; False (at once when seen) if
        :attr:`sync_failures` is no longer ``failures`` (an fsync failed since the caller
        read it: its cut may have taken records below ``end``), the log ends below
        ``end``, the replica closed, or ``timeout_s`` passed."""
        log_ = self.base.log
        deadline = time.monotonic() + timeout_s
        while True:
            if self.sync_failures != failures:
                return False
            if log_.high_watermark >= end:
                return True
            left = deadline - time.monotonic()
            if self.base.life.closed or log_.log_end_offset < end or left <= 0:
                return False
            await self.waits.wait_moved(left)

    def copies_turn(self) -> int:
        """A place in this partition's order of NATS copies (:class:`CopyTurns`), taken as
        a batch enters the sequencer (so in append order: ``entered`` of
        :meth:`Intake.ingest_direct`, not after the append, which an ALL ack's fsync in
        the request's own task follows). Its holder must finish it (:meth:`CopyTurns.
        finish`) once its copies went or were given up, so that a later request's copies
        never overtake these."""
        return self.copy_turns.take()

    # ---------------------------------------------------------------- the flusher

    async def _flusher(self) -> None:
        while True:
            await self._dirty.wait(self._running_loop())
            self._dirty = LazyEvent()
            target = self.base.log.log_end_offset
            try:
                if hops.ENABLED:
                    hops.mark("fsync.start")
                # On the loop only where the fsync stands between a record and its
                # readers; with ``written``/``replicated`` it is background work.
                on_loop = (
                    self.base.core.policy.durability == DURABILITY_FLUSHED and not self.loop_refused
                )
                self.loop_refused = False
                in_turn = InTurn(self)
                flushed = await self.fsyncs.flush(
                    self.base.log, target, on_loop=on_loop, loop=self._running_loop(), then=in_turn
                )
                if hops.ENABLED and not in_turn.committed:
                    hops.mark("fsync.end")
            except SyncFailedError as exc:
                await self._recover_unsynced(exc)
                self._dirty.set()
                continue
            except Exception as exc:
                log.error("flush failed; retrying", extra=self.base.fields(error=repr(exc)))
                await self.fail_pending_all(ErrorCode.STORAGE_ERROR, f"flush failed: {exc}")
                await anyio.sleep(FLUSH_RETRY_S)
                self._dirty.set()
                continue
            if in_turn.committed:  # in the thread job's callback; what needs an await here
                if in_turn.left is not None:
                    await self.carry_out_rest(*in_turn.left)
            else:
                await self.commit(flushed)

    async def _recover_unsynced(self, exc: Exception) -> None:
        """An fsync failed: cut the log back to its last good sync (spec/storage.md,
        "fsync errors"), forget what the cut removed, fail the ALL acks waiting for it.

        The cut, the producer table and the pending acks change with no await in between,
        so no append, duplicate check or ack interleaves. No consumer read past the HW. A
        replica whose followers were sent none of the records cut keeps its role: the
        records that come next at the cut offsets diverge from nothing. A leader whose
        followers were sent some gives up its epoch in the same step and asks for the next
        one (:meth:`ReplicaCore.cut`). Waits for a commit (:meth:`wait_committed`) end."""
        log_ = self.base.log
        if log_.sync_failure is None:
            return
        self.sync_failures += 1
        cut_from = log_.flushed_offset
        leo = log_.log_end_offset
        try:
            end = log_.recover_unsynced()
        except Exception as again:
            log.critical(
                "fsync failed and the log cannot be cut back to disk; stopping the partition",
                extra=self.base.fields(error=repr(again), first_error=repr(exc)),
            )
            self.stop_replica(drain=False)
            return
        out = self.base.core.cut(end, f"fsync failed, the record is not stored (retry): {exc}")
        log.error(
            "fsync failed: cut the log back to its last good sync; the records above it "
            "must come again from their producers or the leader",
            extra=self.base.fields(error=repr(exc), flushed=cut_from, leo_was=leo, leo=end),
        )
        await self.carry_out(out)
        self.waits.wake()
        if out.renew_epoch is not None:
            self.renew_leadership(out.renew_epoch)

    async def commit_here(self, contended: Callable[[], bool] | None = None) -> None:
        """Fsync and commit what is appended in the calling task, as the flusher would.

        For a request that appended in its own task and waits for the commit anyway (an
        ALL ack on a server alone, durability ``flushed``): the hand-off to the flusher
        and the request's wake-up once the flusher settled it are two event-loop turns on
        the way to its answer (``docs/latency.md``, "Hops"). Group commit still holds:
        the storage engine's flush covers everything appended before it and lets a
        concurrent flush wait or run after it. A failure (or anything unexpected) is left
        to the flusher, which recovers from it as always. So is the commit of a request
        cancelled meanwhile (its connection failed): the fsync's outcome, a failure
        included, is the flusher's to act on, or the records would wait for the next
        append (tests/server/test_commit_cancelled.py).

        ``contended``: True if writers are racing on this partition (a compare-and-set
        refused since the last such commit, :meth:`Sequencer.lost_race_since_commit`);
        then the fsync goes to a worker thread even where the runner would run it on the
        loop, so that the loser's retry, a round trip away, is read and appended while
        the disk works and shares the next fsync, instead of waiting behind this one.

        In a worker thread (the runner would not run it on the loop) when no other
        request's fsync of this log is in one; else the flusher takes this request's
        commit (its next fsync covers everything appended while the running one works)."""
        log_ = self.base.log
        runner = self.fsyncs
        loop = self._running_loop()
        try:
            if hops.ENABLED:
                hops.mark("fsync.start")
            end = log_.log_end_offset
            flushed = await runner.flush_here(log_, end, loop, contended)
            if flushed is None:
                if self.thread_flush:
                    # A request's fsync runs in a thread already: the flusher's next one
                    # covers this request with every other appended meanwhile (one thread
                    # job per group, not one per request: 32 large requests in flight
                    # held up to 32 threads waiting on the log's group commit).
                    self.loop_refused = True
                    self.request_flush()
                    return
                self.thread_flush = True
                try:  # (to the LEO: ``end`` or beyond)
                    flushed = await runner.sync_in_thread(log_, loop)
                finally:
                    self.thread_flush = False
            if hops.ENABLED:
                hops.mark("fsync.end")
        except Exception:
            self.request_flush()
            return
        except BaseException:
            self.request_flush()
            raise
        try:
            await self.commit(flushed)
        except BaseException:
            self.request_flush()
            raise

    async def final_flush(self) -> None:
        """At the end of ``run``: flush what is left, commit it, fail the pending ALL acks."""
        try:
            if self._behind is not None:
                await self._behind.wait_idle()  # its thread is done with the log
            log_ = self.base.log
            if log_.sync_failure is None and log_.flushed_offset >= log_.log_end_offset:
                flushed = log_.flushed_offset  # nothing to flush: no thread round trip
            else:
                flushed = await anyio.to_thread.run_sync(log_.flush)
            await self.commit(flushed)
        except Exception:
            log.exception("final flush failed", extra=self.base.fields())
        await self.fail_pending_all(ErrorCode.SHUTTING_DOWN, "partition stopped")

    async def commit(self, flushed: int) -> None:
        """The log is fsynced up to ``flushed``: the core moves the HW and acks."""
        log_ = self.base.log
        await self.carry_out(
            self.base.core.flushed(flushed, leo=log_.log_end_offset, hw=log_.high_watermark)
        )

    async def carry_out(self, out: Outcome[PendingAck]) -> None:
        """Do what the core decided: set the HW, answer the acks of this server's Produce
        requests, wake waiters and replica fetches, then send the acks that go through
        NATS. In that order: a producer's answer is the commit's latency, and a woken
        replica fetch answered first (the new HW, on its own) would run ahead of it."""
        messages = self.carry_out_now(out)
        if messages or out.leadership_ended:
            await self.carry_out_rest(messages, out.leadership_ended)

    def carry_out_now(self, out: Outcome[PendingAck]) -> list[tuple[str, bytes]] | None:
        """:meth:`carry_out`'s part without an await: the HW, this server's acks, the
        wake-ups; the messages for NATS inboxes returned."""
        moved = False
        if out.hw is not None and out.hw > self.base.log.high_watermark:
            if hops.ENABLED:
                hops.mark("hw")
            self.base.log.set_high_watermark(out.hw)
            moved = True
        messages = (
            deliver_pending(self.acks, self.base.stream, self.base.partition, out.acks)
            if out.acks
            else None
        )
        if moved:
            self.waits.wake()
        if out.wake_replicas:
            self.wake_replicas()
        return messages

    async def carry_out_rest(
        self, messages: list[tuple[str, bytes]] | None, leadership_ended: bool
    ) -> None:
        """:meth:`carry_out`'s part after :meth:`carry_out_now`: the acks to NATS inboxes,
        then a leadership end."""
        if messages:
            await self.acks.send(messages)
        if leadership_ended and self.on_leadership_end is not None:
            self.on_leadership_end(self.base.stream, self.base.partition)

    def carry_out_rest_soon(self, messages: list[tuple[str, bytes]] | None, ended: bool) -> None:
        """:meth:`carry_out_rest` in a task (from Sequencer.append_one_now: no await)."""
        task = self._running_loop().create_task(self.carry_out_rest(messages, ended))
        self._rests.add(task)
        task.add_done_callback(self._rests.discard)

    async def fail_pending_all(self, code: ErrorCode, message: str) -> None:
        """Fail every pending ALL ack with ``code``."""
        await self.carry_out(self.base.core.fail_all(code, message))
