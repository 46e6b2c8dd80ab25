"""A response to write (:class:`Reply`), an error frame as one, the request handler's type
and the context variable through which a Produce answer is written from the turn that
settles it (:data:`ANSWER_NOW`): the vocabulary between the connection
(:mod:`jetserver.protocol.connection`) and what answers its requests.

Task safety: values only (the context variable is per task).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from typing import Any, NamedTuple

from jetsdk.codec.error_codes import ErrorCode
from jetsdk.codec.frames import FLAG_ERROR, FLAG_RESPONSE, Frame, encode_frame
from jetsdk.codec.messages import encode_error
from jetserver.storage.read_slices import ReadSlices

__all__ = ["ANSWER_NOW", "AnswerAtOnce", "Handler", "Reply", "error_reply"]

_ERROR_FLAGS = FLAG_RESPONSE | FLAG_ERROR


ANSWER_NOW: ContextVar[Callable[[bytes], bool] | None] = ContextVar("jet_answer_now", default=None)
"""In a Produce request's task: its connection's :meth:`AcceptedConnection.write_now`, for
an answer written from the turn that settles the request rather than from its task."""


class Reply(NamedTuple):
    """A response to write: frame bytes, optionally followed by file bytes (a typed tuple:
    one is built per answer, a consumer's per message; an attrs frozen class's
    ``__init__`` set each of its six fields through ``object.__setattr__``)."""

    data: bytes
    """A whole frame, or (with ``records``) the frame header and the fixed part of the body."""
    records: ReadSlices | None = None
    """Record bytes to send after ``data`` (closed after sending)."""
    close: bool = False
    """Close the connection after this reply (malformed input)."""
    after: Callable[[], Awaitable[None]] | None = None
    """Work that belongs to the request but not before its response: run in the request's
    task once the response is written (its in-flight slot already freed, no longer
    cancelled when the connection closes: it must bound itself; an error is logged, never
    sent). Used for the NATS copies of directly stored Produce messages."""
    then: Callable[[], Awaitable[Reply]] | None = None
    """The request's next reply, once this one is written (FetchStream: this reply has
    the "more" flag): awaited in the request's task, which stays in flight and is
    cancelled when the connection closes. It must not raise (errors become error
    replies); a reply without ``then`` is the request's last."""
    sent: bool = False
    """The response went already (:meth:`AcceptedConnection.write_now`): ``data`` is empty,
    only ``after`` is left."""


def error_reply(
    api: int,
    correlation_id: int,
    code: ErrorCode,
    message: str,
    details: dict[str, Any] | None = None,
    *,
    close: bool = False,
) -> Reply:
    """An error frame (flags response|error, JSON error body)."""
    body = encode_error(code, message, details)
    return Reply(encode_frame(api, correlation_id, body, flags=_ERROR_FLAGS), close=close)


Handler = Callable[[Frame], Awaitable[Reply]]
"""Answers one request frame; must not raise (errors become error replies)."""

AnswerAtOnce = Callable[
    [int, bytes, Callable[[bytes], None]],
    tuple[bytes, Callable[[], Awaitable[None]] | None] | None,
]
"""Answers a Produce request (correlation id, body, later) with no await, in the reader
callback that received it: its response frame and its after-work (None: nothing left), or
None, nothing done: the request goes to its task as always. An empty frame: the request
is answered by one call of ``later`` with its frame (from its commit; it stays in flight
until then)."""
