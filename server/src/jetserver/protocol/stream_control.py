"""How a connection ends one of its FetchStream requests early (CancelFetchStream, api 19).

The connection (:class:`~jetserver.protocol.connection.AcceptedConnection`) makes a
:class:`StreamControl` for each FetchStream request, by correlation id, and sets it as the
request task's :data:`CURRENT` before calling the handler; the handler attaches the
stream's ``cancel`` when it opens the stream (:meth:`StreamControl.attach`). A cancel that
arrives before, or while the first answer is parked, so reaches the stream, which then
ends with its next (empty, last) answer. A context variable, not a handler argument: one
request task runs its handler in its own context, and only the FetchStream handler looks.
"""

from __future__ import annotations

from collections.abc import Callable
from contextvars import ContextVar

import attrs

__all__ = ["CURRENT", "StreamControl"]


@attrs.define(eq=False)
class StreamControl:
    """The cancel of one FetchStream request."""

    cancel: Callable[[], None] | None = None
    """Ends the stream (attached by the handler once it opened it)."""
    cancelled: bool = False
    """The client asked to end it (:meth:`fire`)."""

    def attach(self, cancel: Callable[[], None]) -> None:
        """The stream is open: ``cancel`` ends it (at once if it was asked already)."""
        self.cancel = cancel
        if self.cancelled:
            cancel()

    def fire(self) -> None:
        """End the stream (now, or as it opens)."""
        self.cancelled = True
        if self.cancel is not None:
            self.cancel()


CURRENT: ContextVar[StreamControl | None] = ContextVar("jet_stream_control", default=None)
"""The FetchStream request's control, in the task that runs it (None elsewhere)."""
