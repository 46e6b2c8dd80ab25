"""A request whose task ends while it waits (:class:`HeldRequest`): its connection keeps it
in flight until it is answered from a callback, resumed in a task or cancelled with the
connection.

A parked ReplicaFetch request (broker/replica_wait.py) waits in callbacks: its task ended
where it parked, and the answer of a lone partition's news is written from a plain
callback (:meth:`HeldRequest.write_now`). Before, its task woke once more per answer only
to end the request (two task wake-ups at an RF 3 leader per message).

Task safety: event loop only.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from contextvars import ContextVar
from typing import Any, Protocol

import attrs

from jetsdk.codec.frames import Frame
from jetserver.protocol.reply import Reply

__all__ = ["HELD_REPLY", "HOLD", "HeldRequest", "HeldSide", "Resumed"]


Resumed = Coroutine[Any, Any, Reply]
"""A held request's reply, run and written in a task as a request's own task's would be."""

HELD_REPLY = Reply(b"", sent=True)
"""A handler's reply for a request it held (:meth:`HeldRequest.hold`): nothing to send now,
and its count in flight is the held request's."""


class HeldSide(Protocol):
    """The connection's side of its held requests (``AcceptedConnection``)."""

    held: set[HeldRequest]
    """Its requests held now (cancelled when it ends)."""

    def write_now(self, data: bytes, hop: str = ...) -> bool:
        """Write a whole response frame now (False: not now)."""

    def held_end(self, held: HeldRequest, reply: Resumed | None) -> None:
        """``held`` is over (``reply`` None: answered or cancelled), or its reply comes
        from ``reply`` in a task."""


@attrs.define(eq=False)
class HeldRequest:
    """One request that may wait with no task (module docstring). Made for each request
    that may (a ReplicaFetch); counted in flight only once :meth:`hold` is called."""

    frame: Frame
    """The request."""
    side: HeldSide
    """Its connection."""
    _cancel: Callable[[], None] | None = None
    _holding: bool = False

    def write_now(self, data: bytes) -> bool:
        """Write the request's whole response frame now (False: the socket or the writer
        is busy, or the connection closes)."""
        return self.side.write_now(data, "resp.replica_fetch")

    def hold(self, cancel: Callable[[], None]) -> None:
        """The request's task ends now (its handler returns :data:`HELD_REPLY`) and its
        wait goes on; ``cancel`` ends the wait if the connection ends first."""
        self._cancel = cancel
        self._holding = True
        self.side.held.add(self)

    def answered(self) -> None:
        """The answer went (:meth:`write_now`): the request is over."""
        if self._holding:
            self._holding = False
            self.side.held_end(self, None)

    def resume(self, reply: Resumed) -> None:
        """The request's reply comes from ``reply``, in a task of its connection's."""
        if not self._holding:
            reply.close()  # (cancelled meanwhile)
            return
        self._holding = False
        self.side.held_end(self, reply)

    def cancel(self) -> None:
        """The connection ends: the wait ends unanswered."""
        if self._holding:
            self._holding = False
            self.side.held_end(self, None)
            if self._cancel is not None:
                self._cancel()


HOLD: ContextVar[HeldRequest | None] = ContextVar("jet_hold", default=None)
"""In a ReplicaFetch request's task: what lets it end its task while it waits."""
