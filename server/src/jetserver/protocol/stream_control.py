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

from jetsdk.codec.error_codes import ErrorCode
from jetsdk.codec.errors import CodecError
from jetsdk.codec.fetch_stream import (
    decode_cancel_fetch_stream,
    encode_cancel_fetch_stream_answer,
)
from jetsdk.codec.frames import FLAG_RESPONSE, Frame, encode_frame
from jetserver.protocol.reply import Reply, error_reply

__all__ = ["CURRENT", "StreamControl", "cancel_stream"]


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


def cancel_stream(frame: Frame, controls: dict[int, StreamControl]) -> Reply:
    """CancelFetchStream (api 19): end the FetchStream of the correlation id named, if one
    of ``controls`` (its connection's, by correlation id) is in flight; the answer says
    whether one was. Only the connection's own streams can be named, so no grant is
    needed."""
    try:
        correlation_id = decode_cancel_fetch_stream(frame.body)
    except CodecError as exc:
        return error_reply(
            frame.api,
            frame.correlation_id,
            ErrorCode.MALFORMED_FRAME,
            f"request body does not decode: {exc}",
            close=True,
        )
    control = controls.pop(correlation_id, None)
    if control is not None:
        control.fire()
    body = encode_cancel_fetch_stream_answer(control is not None)
    return Reply(encode_frame(frame.api, frame.correlation_id, body, flags=FLAG_RESPONSE))
