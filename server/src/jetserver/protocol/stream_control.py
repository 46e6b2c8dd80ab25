"""How a connection ends one of its FetchStream requests early (CancelFetchStream, api 19)
or grants it more answers (FetchStreamCredit, api 20): :func:`control_stream`.

The connection (:class:`~jetserver.protocol.connection.AcceptedConnection`) makes a
:class:`StreamControl` for each FetchStream request, by correlation id, and sets it as the
request task's :data:`CURRENT` before calling the handler; the handler attaches the
stream's ``cancel`` and ``grant`` when it opens the stream (:meth:`StreamControl.attach`).
A cancel that arrives before, or while the first answer is parked, so reaches the stream,
which then ends with its next (empty, last) answer; a grant before the stream is open is
void (spec/protocol.md, "20 FetchStreamCredit"). A context variable, not a handler argument: one
request task runs its handler in its own context, and only the FetchStream handler looks.
"""

from __future__ import annotations

from collections.abc import Callable
from contextvars import ContextVar

import attrs

from jetsdk.codec.error_codes import ErrorCode
from jetsdk.codec.errors import CodecError
from jetsdk.codec.fetch_stream import (
    MAX_FETCH_STREAM_RESPONSES,
    decode_cancel_fetch_stream,
    decode_fetch_stream_credit,
    encode_cancel_fetch_stream_answer,
    encode_fetch_stream_credit_answer,
)
from jetsdk.codec.frames import FLAG_RESPONSE, Api, Frame, encode_frame
from jetserver.protocol.reply import Reply, error_reply

__all__ = ["APIS", "CURRENT", "StreamControl", "control_stream"]

APIS = frozenset({int(Api.CANCEL_FETCH_STREAM), int(Api.FETCH_STREAM_CREDIT)})
"""The APIs :func:`control_stream` answers (the connection's, not the handlers')."""


@attrs.define(eq=False)
class StreamControl:
    """The cancel and the grants of one FetchStream request."""

    cancel: Callable[[], None] | None = None
    """Ends the stream (attached by the handler once it opened it)."""
    grant: Callable[[int], int] | None = None
    """Grants the stream more answers, says how many it may give now (0: it ended)."""
    cancelled: bool = False
    """The client asked to end it (:meth:`fire`)."""

    def attach(self, cancel: Callable[[], None], grant: Callable[[int], int]) -> None:
        """The stream is open: ``cancel`` ends it (at once if it was asked already),
        ``grant`` tops its answers up."""
        self.cancel, self.grant = cancel, grant
        if self.cancelled:
            cancel()

    def fire(self) -> None:
        """End the stream (now, or as it opens)."""
        self.cancelled = True
        if self.cancel is not None:
            self.cancel()


CURRENT: ContextVar[StreamControl | None] = ContextVar("jet_stream_control", default=None)
"""The FetchStream request's control, in the task that runs it (None elsewhere)."""


def control_stream(frame: Frame, controls: dict[int, StreamControl]) -> Reply:
    """CancelFetchStream (api 19): end the FetchStream of the correlation id named, if one
    of ``controls`` (its connection's, by correlation id) is in flight; the answer says
    whether one was. FetchStreamCredit (api 20): grant it more answers; the answer says
    how many it may give now (0: none open). Only the connection's own streams can be
    named, so no permission is needed."""
    try:
        if frame.api != Api.CANCEL_FETCH_STREAM:
            return _credit(frame, controls)
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


def _credit(frame: Frame, controls: dict[int, StreamControl]) -> Reply:
    """FetchStreamCredit (api 20).

    Raises:
        CodecError: the body does not decode.
    """
    credit = decode_fetch_stream_credit(frame.body)
    more = credit.more_responses
    if not 1 <= more <= MAX_FETCH_STREAM_RESPONSES:
        return error_reply(
            frame.api,
            frame.correlation_id,
            ErrorCode.INVALID_ARGUMENT,
            f"more_responses must be within [1, {MAX_FETCH_STREAM_RESPONSES}], got {more}",
            {"field": "more_responses"},
        )
    control = controls.get(credit.correlation_id)
    grant = None if control is None or control.cancelled else control.grant
    body = encode_fetch_stream_credit_answer(0 if grant is None else grant(more))
    return Reply(encode_frame(frame.api, frame.correlation_id, body, flags=FLAG_RESPONSE))
