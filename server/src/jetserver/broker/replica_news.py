"""The leader's side of replica fetches on one partition: who may fetch, and their wake-ups.

:class:`ReplicaNews` answers whether a parked replica fetch has something to return (new
records, or a HW its follower has not seen and the fetch has waited ``hw_news_delay_s`` for),
wakes parked fetches when that may have
changed (an append, a HW move, a stop), and checks the leader epoch and replica id of a
fetch (broker/replica_fetch.py).

Task safety: event loop thread only.
"""

from __future__ import annotations

from typing import Protocol

import attrs

from jetsdk.codec.error_codes import ErrorCode
from jetserver.broker.replica_base import ReplicaBase
from jetserver.errors import ApiError
from jetserver.infra.lazy_event import LazyEvent
from jetserver.replication import LeaderState, replica_at

__all__ = ["NewsWaker", "ReplicaNews"]


class NewsWaker(Protocol):
    """A parked replica fetch request (broker/replica_fetch.py) told of its partitions'
    possible news."""

    def poke(self) -> None:
        """The partition's news may have changed: wake the request if it has news due now
        (else it may re-time its wait; no task runs in between)."""


@attrs.define(eq=False, repr=False)
class ReplicaNews:
    """Replica fetches of one partition led here (module docstring)."""

    base: ReplicaBase
    """The replica's name, log, core and lifecycle (read only here)."""
    server_id: str
    """This server's id (not a follower of itself)."""
    _news: LazyEvent = attrs.field(factory=LazyEvent)
    _wakers: set[NewsWaker] | None = None

    def __repr__(self) -> str:
        return self.base.part_repr(self)

    def check_leader(self, leader_epoch: int) -> LeaderState:
        """The leader state if this replica leads in ``leader_epoch`` (-1: any epoch).

        Raises:
            ApiError: NOT_LEADER (details ``leader``, ``leader_epoch``).
        """
        state = self.base.core.leader_state
        if state is None or (leader_epoch >= 0 and leader_epoch != state.leader_epoch):
            a = self.base.core.assignment
            raise ApiError(
                ErrorCode.NOT_LEADER,
                f"this server does not lead {self.base} in epoch {leader_epoch}",
                {
                    "stream": self.base.stream,
                    "partition": self.base.partition,
                    "leader": a.leader if a is not None else None,
                    "leader_epoch": a.leader_epoch if a is not None else None,
                },
            )
        return state

    def follower_name(self, replica_id: int) -> str:
        """The server id of follower ``replica_id``.

        Raises:
            ApiError: INVALID_ARGUMENT if it is not a follower of this partition.
        """
        a = self.base.core.assignment
        name = replica_at(a.replicas, replica_id) if a is not None else None
        if name is None or name == self.server_id:
            raise ApiError(
                ErrorCode.INVALID_ARGUMENT,
                f"replica_id {replica_id} is not a follower of {self.base}",
                {"field": "replica_id"},
            )
        return name

    def has_news(self, follower: str, offset: int, parked_s: float) -> bool:
        """True if a replica fetch at ``offset``, parked for ``parked_s`` seconds, is
        answered now: records, a HW due (:meth:`LeaderState.fetch_has_news`), or the end of
        the leadership or of the replica."""
        state = self.base.core.leader_state
        if state is None or self.base.life.ending:
            return True
        return state.fetch_has_news(follower, offset, self.base.log.log_end_offset, parked_s)

    def hw_news_due_s(self, follower: str, parked_s: float) -> float | None:
        """Seconds until a fetch parked for ``parked_s`` is answered for its HW news alone
        (:meth:`LeaderState.hw_news_due_s`; None: it has none)."""
        state = self.base.core.leader_state
        return state.hw_news_due_s(follower, parked_s) if state is not None else None

    def poll_ended(self, follower: str, now: float) -> None:
        """A fetch from ``follower`` parked here was answered at ``now``:
        :meth:`LeaderState.on_poll_ended`."""
        state = self.base.core.leader_state
        if state is not None:
            state.on_poll_ended(follower, now)

    def wake(self) -> None:
        """Tell every parked replica fetch (and every session waiting on this partition)
        that its news may have changed: each wakes only if it has news due now."""
        event, self._news = self._news, LazyEvent()
        event.set()
        if self._wakers:
            for waker in list(self._wakers):
                waker.poke()

    def add_waker(self, waker: NewsWaker) -> None:
        """Poke ``waker`` whenever parked replica fetches may have news (a fetch session
        parked on many partitions waits on one request)."""
        if self._wakers is None:
            self._wakers = set()
        self._wakers.add(waker)

    def remove_waker(self, waker: NewsWaker) -> None:
        """Undo :meth:`add_waker`."""
        if self._wakers is not None:
            self._wakers.discard(waker)
            if not self._wakers:
                self._wakers = None
