"""The commit of a one-step Produce's append from loop callbacks: no task per message.

A Produce answered in its connection's reader callback (broker/produce_one.py) on a
server alone with durability ``flushed`` leaves its append's fsync to itself
(:meth:`Committer.defer_flush`) and its NATS copy waits for the commit. A task per
message ran that after-work (the fsync, the commit, the copy). :class:`CommitSoon` runs
it from loop callbacks instead: if the fsync runner would run it on the loop, the next
turn looks at the fsync left, lets the loop turn once (ready work first, as
:meth:`FsyncRunner.flush_here`'s probe) and fsyncs on the loop if it is free; else (or
if the loop was busy) it goes to a worker thread of the split syncs' own lane
(:meth:`FsyncRunner.sync_in_thread_then`: the log's group commit begun on the loop, the
fsync and its end in the thread), whose end the loop hears of in its I/O phase
(storage/loop_waker.py) and commits
there (:class:`InTurn`); then each waiting request's work after the commit runs (its
copy sent, or, if it cannot go now, its task started). Group commit holds: the messages
appended while an fsync runs wait together for the next one, one fsync for all of them.
A failed fsync, or one another task runs already, goes to the flusher as from
:meth:`Committer.commit_deferred`; the work then waits for the commit in its task.

Task safety: event loop thread only.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Protocol

import attrs

from jetserver.broker.acks import PendingAck
from jetserver.broker.in_turn import InTurn
from jetserver.broker.replica_base import ReplicaBase
from jetserver.infra import hops
from jetserver.replication.core import Outcome
from jetserver.storage import fsync_runner
from jetserver.storage.fsync_runner import FsyncRunner

log = logging.getLogger(__name__)

__all__ = ["CommitSoon"]

Rest = tuple[list[tuple[str, bytes]] | None, bool]
"""What a commit leaves to a task: the acks to NATS inboxes, whether leadership ended."""


class CommitterPort(Protocol):
    """What :class:`CommitSoon` and :class:`InTurn` use of their partition's committer."""

    base: ReplicaBase
    fsyncs: FsyncRunner
    thread_flush: bool
    loop_refused: bool

    def keep_deferred(self) -> bool: ...
    def take_deferred(self) -> bool: ...
    def request_flush(self) -> None: ...
    def running_loop(self) -> asyncio.AbstractEventLoop: ...
    def carry_out_now(self, out: Outcome[PendingAck]) -> list[tuple[str, bytes]] | None: ...
    async def carry_out_rest(
        self, messages: list[tuple[str, bytes]] | None, leadership_ended: bool
    ) -> None: ...
    def carry_out_rest_soon(
        self, messages: list[tuple[str, bytes]] | None, ended: bool
    ) -> None: ...


@attrs.define(eq=False)
class CommitSoon:
    """Runs the fsync that one-step appends left, and their work after the commit, from
    loop callbacks (module docstring). One per partition, made on first use."""

    committer: CommitterPort
    loop: asyncio.AbstractEventLoop
    """The partition's loop (``committer.running_loop()``, looked up once)."""
    _waiting: list[Callable[[], None]] = attrs.field(factory=list)
    """Work of the appends the next fsync covers, to run once it ended."""
    _soon: asyncio.Handle | None = None
    """The next turn's :meth:`_look` or :meth:`_on_loop`, while one is due."""
    _probe_at: float = 0.0
    """When :meth:`_look` let the loop turn (uvloop: a turn back within FREE_TURN_S is a
    free loop)."""
    _in_thread: list[Callable[[], None]] | None = None
    """The work of the fsync in a worker thread now, if one runs."""

    def after_commit(self, then: Callable[[], None] | None) -> None:
        """Run the fsync the append just made left to its request (if still due) from the
        next loop turns, then ``then()`` (committed or not: it checks the HW, and waits in
        a task of its own if it must); ``then`` must not raise. With no ``then`` the fsync
        is still started, after the one running now if any (:meth:`_thread_done` starts
        the next for waiting work only)."""
        idle = self._soon is None and self._in_thread is None
        deferred = self.committer.keep_deferred()
        if not deferred and idle:  # no fsync of ours to wait for
            if then is not None:
                _run([then])
            return
        if then is not None:
            self._waiting.append(then)
        elif deferred:  # no work, but its fsync must follow the one running now
            self._waiting.append(_nothing)
        if idle:
            self._start()

    def _start(self) -> None:
        """The next fsync, looked at next turn (:meth:`_look`: on the loop or to a thread;
        the runner asked once, there, not here too). Called from the reader callback that
        appended (or the fsync thread's, :mod:`jetserver.storage.loop_waker`), that
        ``call_soon`` runs before the loop polls again, with no loop iteration of its own;
        the thread woken there finds the GIL free sooner than one woken from the middle of
        the append's step (``python -m bench cost``, every fsync in a thread, load 24-44:
        futex calls 5.1-5.5 a message handed over in the step, 3.8-4.1 from the
        ``call_soon``; loop iterations alike, 2.1-2.2)."""
        self._soon = self.loop.call_soon(self._look)

    def _look(self) -> None:
        """The turn after the appends: an fsync on the loop after one more turn, if the
        runner would run it there; else in a thread now (no probe turn first)."""
        committer = self.committer
        self._soon = None
        if committer.fsyncs.may_run_here_for(committer.base.log):
            loop = self.loop
            ready = getattr(loop, "_ready", None)
            if ready is not None and not ready:
                self._on_loop()  # (asyncio: nothing ready, free now, as _loop_free)
                return
            self._probe_at = time.perf_counter()
            self._soon = loop.call_soon(self._on_loop)
            return
        self._to_thread()

    def _on_loop(self) -> None:
        committer = self.committer
        self._soon = None
        if not fsync_runner.free_after_turn(self.loop, self._probe_at):
            self._to_thread()
            return
        waiting, self._waiting = self._waiting, []
        if not committer.take_deferred():  # nothing left to fsync (another took it)
            _run(waiting)
            return
        if hops.ENABLED:
            hops.mark("fsync.start")
        fsyncs = committer.fsyncs
        try:
            if fsyncs.loop_wait_s:  # in a thread the loop waits for (storage/waited_sync)
                flushed = fsyncs.flush_waited(committer.base.log, self.loop, self._thread_done)
                if flushed == fsync_runner.LATE:  # (a stalled disk: its end comes later)
                    committer.thread_flush = True
                    self._in_thread = waiting
                    return
            else:
                flushed = fsyncs.flush_probed(committer.base.log)
        except Exception:  # (a failed fsync: the flusher recovers)
            flushed = None
        if flushed is None:
            self._to_flusher(waiting)
            return
        self._committed(flushed, waiting)

    def _to_thread(self) -> None:
        committer = self.committer
        waiting, self._waiting = self._waiting, []
        if not committer.take_deferred():
            _run(waiting)
            return
        if committer.thread_flush:  # a task's fsync is in a thread: the flusher groups
            self._to_flusher(waiting)
            return
        if hops.ENABLED:
            hops.mark("fsync.start")
        committer.thread_flush = True
        self._in_thread = waiting
        if not committer.fsyncs.sync_in_thread_then(
            committer.base.log, self.loop, self._thread_done
        ):  # another thread's fsync of the log runs: the flusher's covers these
            committer.thread_flush = False
            self._in_thread = None
            self._to_flusher(waiting)

    def _thread_done(self, flushed: int, error: BaseException | None) -> None:
        committer = self.committer
        committer.thread_flush = False
        waiting = self._in_thread or []
        self._in_thread = None
        if error is None:
            self._committed(flushed, waiting)
        else:
            self._to_flusher(waiting)
        if self._waiting and self._soon is None and self._in_thread is None:
            self._start()  # appended meanwhile: the next fsync

    def _committed(self, flushed: int, waiting: list[Callable[[], None]]) -> None:
        in_turn = InTurn(self.committer)
        in_turn(flushed)
        if not in_turn.committed:
            self._to_flusher(waiting)
            return
        if in_turn.left is not None:  # (never the usual message)
            self.committer.carry_out_rest_soon(*in_turn.left)
        _run(waiting)

    def _to_flusher(self, waiting: list[Callable[[], None]]) -> None:
        """The fsync failed or could not run: the flusher takes it (in a thread), and
        recovers from a failure as always; the work waits for the commit in its task."""
        committer = self.committer
        committer.loop_refused = True
        committer.request_flush()
        _run(waiting)


def _nothing() -> None:
    """The work of an append that has none but its fsync (:meth:`CommitSoon.after_commit`)."""


def _run(waiting: list[Callable[[], None]]) -> None:
    for then in waiting:
        try:
            then()
        except Exception:  # (a loop callback must not raise)
            log.exception("work after a commit failed")
