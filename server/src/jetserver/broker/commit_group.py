"""One fsync job for the partitions a request appended to, which also commits them
(issue 34 item 4).

A ProduceMany request whose sections are appended in its own step (LEADER or NONE acks,
appended at once one after the other in the request's task) or in its sections' first
steps (ALL acks, or a partition not idle: a task per section, all started in one loop
turn), durability ``flushed``, a server alone, leaves each partition's fsync to the
request (:meth:`Committer.defer_flush`, any size, while its :class:`FsyncGroup` is
:data:`IN_GROUP` and open: the sequencer adds the partition). Each was taken
by its partition's flusher: a wake-up of up to 500 flusher tasks, each probing the loop,
awaiting a future of the turn's thread batch and resuming once more after it, about a
hundred lines and three task steps per partition of every section.
:func:`commit_together` takes them all in the request's own step and hands the logs to
the fsync threads as ONE batch (:meth:`FsyncRunner.flush_group`); the loop callback that
learns the batch ended commits each partition (its HW moves, its ALL acks are settled,
its parked fetches wake, as a flusher's would in that callback) and then resolves one
future, which the request's after-work (its NATS copies) awaits once instead of each
partition's commit. An ALL section waits for its partition's commit as always (its
pending ack, settled by that commit), not for the others'; before, each ran its own
fsync and commit (:meth:`Committer.commit_here`) in its task (issue 38's table puts: a
ProduceMany of 4 ALL sections per round of puts).

Group commit holds as with the flushers: a partition whose fsync from an earlier group
still runs is not fsynced again at once; the next group, started from that callback,
covers everything appended to it meanwhile (``Committer.group_again``), one fsync for
several requests' sections (its requests' after-work waits for the HW, bounded).

Durability is unchanged: a partition's HW moves only after its own fsync returned. A
failed fsync is its partition's alone: that partition goes to its flusher, which cuts the
log back to its last good sync (spec/storage.md, "fsync errors"); the others commit.

Task safety: event loop thread only.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Iterable

import attrs

from jetserver.broker.commit import Committer

__all__ = ["IN_GROUP", "FsyncGroup", "commit_together"]


@attrs.define(eq=False)
class FsyncGroup:
    """The partitions one request appended to while it was :data:`IN_GROUP` (each
    appended with its fsync left to the request), fsynced and committed together once
    it is closed (:meth:`close`)."""

    committers: list[Committer] = attrs.field(factory=list)
    """The partitions appended to (a partition may be listed more than once)."""
    open: bool = True
    """Appends still join (False once :meth:`close` ran: later ones commit as usual)."""
    committed: asyncio.Future[None] | None = None
    """:func:`commit_together`'s future, once closed (None: nothing to await)."""

    def join(self, committer: Committer) -> bool:
        """Add ``committer`` (an append to its partition is about to be made, its fsync
        left to this group); False (not added) once closed."""
        if self.open:
            self.committers.append(committer)
        return self.open

    def close(self, loop: asyncio.AbstractEventLoop, least: int = 2) -> None:
        """Stop taking appends and start the fsync and commit of those it took
        (:func:`commit_together`, ``least``), its future in :attr:`committed`."""
        self.open = False
        self.committed = commit_together(self.committers, loop, least)


IN_GROUP: contextvars.ContextVar[FsyncGroup | None] = contextvars.ContextVar(
    "jet_fsync_group", default=None
)
"""The group an append made in this context joins (set by the ProduceMany handler while
its sections append, in its task or around making theirs: a task copies it)."""


def commit_together(
    committers: Iterable[Committer], loop: asyncio.AbstractEventLoop, least: int = 2
) -> asyncio.Future[None] | None:
    """Fsync, in one thread job, the logs whose fsync was left to the caller's request,
    and commit each when it is done; the future is resolved once each is committed or
    handed to its flusher. None (nothing to await): fewer than ``least`` were left, which
    the usual path fsyncs (on the loop if free, :meth:`Committer.commit_deferred`; else
    its flusher, from the next loop turn), or all wait for their running groups' ends."""
    due = list({id(c): c for c in committers if c.deferred_due}.values())
    if len(due) < least:
        return None
    now: list[Committer] = []
    for committer in due:
        committer.claim_deferred()
        if committer.in_group:
            committer.group_again = True
        else:
            now.append(committer)
    return _start(now, loop) if now else None


def _start(committers: list[Committer], loop: asyncio.AbstractEventLoop) -> asyncio.Future[None]:
    for committer in committers:
        committer.in_group = True
    done: asyncio.Future[None] = loop.create_future()

    def settled(outcomes: list[tuple[int, BaseException | None]]) -> None:
        again: list[Committer] = []
        for committer, (flushed, error) in zip(committers, outcomes, strict=True):
            committer.in_group = False
            committer.group_flushed(flushed, error)
            if committer.group_again:
                committer.group_again = False
                if error is None:  # (else the flusher, which recovers, covers all)
                    again.append(committer)
        if again:
            _start(again, loop)
        if not done.done():
            done.set_result(None)

    committers[0].fsyncs.flush_group([c.base.log for c in committers], loop, settled)
    return done
