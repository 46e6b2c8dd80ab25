"""Where a partition replica is in its life: running, stopping, closed.

One :class:`Lifecycle` per :class:`~jetserver.broker.partition.PartitionReplica`, written
by the replica only (``run``, ``stop``, the end of ``run``) and read by its parts (the
sequencer, the committer, the role driver, the replica-fetch side), which each get a
reference to it instead of sharing the replica's fields.

Task safety: event loop thread only.
"""

from __future__ import annotations

import attrs

from jetserver.broker.part_tasks import PartTasks
from jetserver.infra.lazy_event import LazyEvent

__all__ = ["Lifecycle"]


@attrs.define(eq=False)
class Lifecycle:
    """The running state of one partition replica (see the module docstring)."""

    stopping: bool = False
    """A stop was asked: new messages are refused, the sequencer drains and ends."""
    drain: bool = True
    """With ``stopping``: append what is queued first (False: drop it)."""
    closed: bool = False
    """The log is closed (the replica stopped)."""
    tg: PartTasks | None = None
    """The replica's tasks while ``run`` runs (its parts start tasks there, as in a task
    group: ``start_soon``)."""
    run_started: LazyEvent = attrs.field(factory=LazyEvent)
    """Set once ``run`` started, or once it can no longer start (a stop came first)."""
    stopped: LazyEvent = attrs.field(factory=LazyEvent)
    """Set once ``run`` closed the log."""

    @property
    def ending(self) -> bool:
        """True once a stop was asked or the log closed."""
        return self.stopping or self.closed

    @property
    def open(self) -> bool:
        """True while tasks may start: ``run`` runs and no stop was asked."""
        return self.tg is not None and not (self.closed or self.stopping)
