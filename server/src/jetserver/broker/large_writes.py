"""A partition leader's large writes, from a worker thread (issue 39).

A batch of a few large records (:meth:`FsyncRunner.is_large`) is appended from a worker
thread (:meth:`FsyncRunner.append_large`): the event loop serves other requests while the
write waits for an fsync of the same file. :class:`LargeWrites` keeps the sequencer's
rules around it: one write at a time (the sequencer is not idle meanwhile, so appends
stay in order), not cancelled halfway (what follows an append, its acks and commit, must
see it), and a role's end waits for it (:meth:`LargeWrites.done`) before the log changes
for the next role: the write carries the ended epoch.

Task safety: event loop thread only.
"""

from __future__ import annotations

import anyio
import attrs

from jetserver.broker.replica_base import ReplicaBase
from jetserver.storage.clock import wall_ns
from jetserver.storage.framing import Body
from jetserver.storage.fsync_runner import FsyncRunner

__all__ = ["LargeWrites", "RoleEnded"]


class RoleEnded(Exception):
    """The replica's role ended while its large write ran: the records are stored, but
    this replica no longer answers for them (NOT_LEADER)."""


@attrs.define(eq=False)
class LargeWrites:
    """The large writes of one partition's sequencer (module docstring)."""

    _writing: anyio.Event | None = None
    """Set when the write in a worker thread ended."""

    async def append(
        self, runner: FsyncRunner, base: ReplicaBase, bodies: list[Body], leader_epoch: int
    ) -> tuple[int, int]:
        """``base.log.append`` of ``bodies`` (a large write) from a worker thread:
        ``(first offset, timestamp)``.

        Raises:
            RoleEnded: the role ended during the write. What ``Log.append`` raises.
        """
        done = self._writing = anyio.Event()
        try:
            with anyio.CancelScope(shield=True):
                appended = await runner.append_large(base.log, bodies, wall_ns(), leader_epoch)
        finally:
            self._writing = None
            done.set()
        if not base.core.leading:
            raise RoleEnded("the partition's leadership ended during the append")
        return appended

    async def done(self) -> None:
        """Return once no large write runs (at once if none does)."""
        writing = self._writing
        if writing is not None:
            await writing.wait()
