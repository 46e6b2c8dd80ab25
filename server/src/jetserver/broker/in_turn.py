"""The commit of one fsync from the loop callback that learns it ended (:class:`InTurn`),
for a partition's :class:`~jetserver.broker.commit.Committer`.

Task safety: event loop thread only.
"""

from __future__ import annotations

import logging
from typing import Protocol

from jetserver.broker.acks import PendingAck
from jetserver.broker.replica_base import ReplicaBase
from jetserver.infra import hops
from jetserver.replication.core import Outcome

log = logging.getLogger(__name__)

__all__ = ["InTurn", "TurnCommitter"]


class TurnCommitter(Protocol):
    """What :class:`InTurn` needs of a committer."""

    @property
    def base(self) -> ReplicaBase:
        """The replica's name, log, core and lifecycle."""
        ...

    def carry_out_now(self, out: Outcome[PendingAck]) -> list[tuple[str, bytes]] | None:
        """The commit's part without an await (the messages to NATS inboxes returned)."""
        ...

    async def carry_out_rest(
        self, messages: list[tuple[str, bytes]] | None, leadership_ended: bool
    ) -> None:
        """The commit's part after :meth:`carry_out_now`."""
        ...


class InTurn:
    """:meth:`Committer.commit <jetserver.broker.commit.Committer.commit>` of one fsync
    in a worker thread, run from the loop callback that learns it ended (``then`` of
    :meth:`FsyncRunner.flush`): the HW moves, this server's Produce requests are answered
    and parked fetches woken (a tailing consumer's answer written) in that turn, not one
    turn later in the task that awaits the fsync. What needs an await (acks to NATS
    inboxes, a leadership end) is left to that task (:meth:`rest`); if the commit raised
    here, the task commits as before (:attr:`committed` false)."""

    __slots__ = ("committed", "committer", "left")

    def __init__(self, committer: TurnCommitter) -> None:
        self.committer = committer
        self.committed = False
        self.left: tuple[list[tuple[str, bytes]] | None, bool] | None = None

    def __call__(self, flushed: int) -> None:
        committer = self.committer
        base = committer.base
        try:
            if hops.ENABLED:
                hops.mark("fsync.end")
            log_ = base.log
            out = base.core.flushed(flushed, leo=log_.log_end_offset, hw=log_.high_watermark)
            messages = committer.carry_out_now(out)
        except Exception:  # a loop callback must not raise: the task commits instead
            log.exception("commit in the fsync's callback failed", extra=base.fields())
            return
        self.committed = True
        if messages or out.leadership_ended:
            self.left = (messages, out.leadership_ended)

    async def rest(self) -> None:
        """What the commit left to the task that awaited the fsync."""
        if self.left is not None:
            await self.committer.carry_out_rest(*self.left)
