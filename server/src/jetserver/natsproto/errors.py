"""The one error of the NATS protocol reader."""

from __future__ import annotations

from typing import TYPE_CHECKING

from jetserver.errors import JetServerError

if TYPE_CHECKING:
    from jetserver.natsproto.events import Event


class NatsProtocolError(JetServerError):
    """The NATS server's stream cannot be parsed (an unknown operation, a malformed control
    line, a size over a limit, a payload not followed by CRLF). Nothing a publisher sends
    through a NATS server causes it; the connection must be closed and opened again.

    Attributes:
        offset: where in the stream (bytes since the reader started) the bad item began.
        events_before: the events completed in the same ``feed`` before it (to be
            handled before the connection is dropped).
    """

    def __init__(self, message: str, offset: int) -> None:
        super().__init__(f"{message} (at stream offset {offset})")
        self.offset = offset
        self.events_before: list[Event] = []
