"""One partition's replica fetch waiting in a fetch session for its answer
(:class:`~jetserver.replication.session.FetchSession`), and the timeout it raises when a
request that carried it without a long poll was answered without it.

Task safety: one event loop (the session's).
"""

from __future__ import annotations

import attrs

from jetsdk.codec.replica_fetch import ReplicaFetchAnswer, ReplicaFetchPartition
from jetsdk.errors import Timeout
from jetserver.infra.lazy_event import LazyEvent

__all__ = ["Entry", "LeftOut"]


@attrs.define(eq=False)
class Entry:
    """One partition's fetch waiting for its answer."""

    part: ReplicaFetchPartition
    asked_at: float
    deadline: float = 0.0
    """When the fetch gives up (:meth:`FetchSession.fetch`'s bound, on the session's clock)."""
    timeout_s: float = 0.0
    """Its bound from when it asked (renewed from an answer with ``POLL_ENDED``)."""
    done: LazyEvent = attrs.field(factory=LazyEvent)
    answer: ReplicaFetchAnswer | None = None
    error: Exception | None = None
    abandoned: bool = False
    left_out: bool = False
    """A request that carried it without a long poll was answered without it."""
    expired: bool = False
    """Its deadline passed unanswered (set by the session's expiry task)."""

    def resolve(self, answer: ReplicaFetchAnswer | None, error: Exception | None) -> None:
        if not self.done.is_set():
            self.answer, self.error = answer, error
            self.done.set()


class LeftOut(Timeout):
    """A partition's replica fetch unanswered in time although a request that carried it
    without a long poll (it was due) was answered without it: the leader's server
    answers, but not for this partition."""
