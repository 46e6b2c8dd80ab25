"""A small HTTP/1.1 server on anyio for ``jet console``.

Why not a framework: the console answers a handful of GET JSON endpoints and static files
to an operator's browser, plus three write actions. anyio (already the stack of the SDK and
the server) gives the TCP listener, and this module parses a request line, headers and a
``Content-Length`` body (no chunked uploads, no pipelining: one request per connection,
answered with ``Connection: close``), which is all a browser needs here. That avoids a new
dependency (aiohttp, starlette + uvicorn) and a second event-loop stack in the package.

Bounds: request head :data:`MAX_HEAD_BYTES`, body :data:`MAX_BODY_BYTES`, and
:data:`REQUEST_TIMEOUT_S` to receive a request.

A request refused by its head alone (a body over the limit) is answered at once, and then
closed the way HTTP servers call a lingering close: the console half-closes its side and reads
and discards what the client still sends, up to :data:`DRAIN_MAX_BYTES` and
:data:`DRAIN_TIMEOUT_S`. Closing with unread bytes would make the kernel reset the connection,
and a client that sends its whole body before it reads (``http.client``, browsers) would see a
broken pipe instead of the 413.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Awaitable, Callable
from http import HTTPStatus
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

import anyio
import anyio.abc
import attrs
import orjson

MAX_HEAD_BYTES = 16 * 1024
MAX_BODY_BYTES = 1024 * 1024
REQUEST_TIMEOUT_S = 30.0
DRAIN_MAX_BYTES = 16 * 1024 * 1024
DRAIN_TIMEOUT_S = 5.0

_log = logging.getLogger("jet.console")


@attrs.frozen
class Request:
    """One parsed request."""

    method: str
    path: str
    """Percent-decoded path, without the query string."""
    query: dict[str, str]
    """First value of each query parameter."""
    headers: dict[str, str]
    """Lower-case names."""
    body: bytes

    def json(self) -> Any:
        """The body as JSON (HttpError 400 if it is not)."""
        try:
            return orjson.loads(self.body or b"{}")
        except orjson.JSONDecodeError as exc:
            raise HttpError(HTTPStatus.BAD_REQUEST, f"body is not JSON: {exc}") from None


@attrs.frozen
class Response:
    """What a handler returns."""

    status: int
    body: bytes
    content_type: str = "application/json"
    headers: tuple[tuple[str, str], ...] = ()

    @classmethod
    def json(cls, obj: Any, status: int = HTTPStatus.OK) -> Response:
        """A JSON response."""
        return cls(status, orjson.dumps(obj, option=orjson.OPT_NON_STR_KEYS))


class HttpError(Exception):
    """Answered as ``{"error": message}`` with ``status``."""

    def __init__(self, status: int, message: str, *, unread: bool = False) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.unread = unread
        """The client may still be sending the request: drain before closing."""


Handler = Callable[[Request], Awaitable[Response]]


def parse_head(head: bytes) -> tuple[str, str, dict[str, str], dict[str, str]]:
    """Method, path, query and headers of a request head.

    Raises:
        HttpError: 400 for a malformed head.
    """
    try:
        lines = head.decode("latin-1").split("\r\n")
        method, target, version = lines[0].split(" ")
    except ValueError:
        raise HttpError(HTTPStatus.BAD_REQUEST, "malformed request line") from None
    if not version.startswith("HTTP/1."):
        raise HttpError(HTTPStatus.HTTP_VERSION_NOT_SUPPORTED, "HTTP/1.x only")
    headers = {}
    for line in lines[1:]:
        if not line:
            continue
        name, sep, value = line.partition(":")
        if not sep:
            raise HttpError(HTTPStatus.BAD_REQUEST, "malformed header")
        headers[name.strip().lower()] = value.strip()
    parts = urlsplit(target)
    query = {k: v[0] for k, v in parse_qs(parts.query, keep_blank_values=True).items()}
    return method.upper(), unquote(parts.path), query, headers


async def _read_request(stream: anyio.abc.ByteStream) -> Request:
    buf = bytearray()
    while (end := buf.find(b"\r\n\r\n")) < 0:
        if len(buf) > MAX_HEAD_BYTES:
            raise HttpError(
                HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE, "request head too large", unread=True
            )
        buf += await stream.receive()
    method, path, query, headers = parse_head(bytes(buf[:end]))
    try:
        length = int(headers.get("content-length", "0"))
    except ValueError:
        raise HttpError(HTTPStatus.BAD_REQUEST, "bad Content-Length", unread=True) from None
    if length < 0 or length > MAX_BODY_BYTES:
        raise HttpError(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, "body too large", unread=True)
    body = buf[end + 4 :]
    while len(body) < length:
        body += await stream.receive()
    return Request(method, path, query, headers, bytes(body[:length]))


async def _drain_and_close(stream: anyio.abc.ByteStream) -> None:
    """Half-close, then read and discard what the client still sends (bounded)."""
    drained = 0
    with contextlib.suppress(anyio.EndOfStream, anyio.BrokenResourceError, OSError):
        await stream.send_eof()
        with anyio.move_on_after(DRAIN_TIMEOUT_S):
            while drained < DRAIN_MAX_BYTES:
                drained += len(await stream.receive())


def _encode(response: Response) -> bytes:
    reason = HTTPStatus(response.status).phrase
    head = [
        f"HTTP/1.1 {response.status} {reason}",
        f"Content-Type: {response.content_type}",
        f"Content-Length: {len(response.body)}",
        "Connection: close",
        "Cache-Control: no-store",
        "X-Content-Type-Options: nosniff",
        "Content-Security-Policy: default-src 'self'; img-src 'self' data:",
        *(f"{k}: {v}" for k, v in response.headers),
    ]
    return ("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + response.body


async def handle_connection(stream: anyio.abc.ByteStream, handler: Handler) -> None:
    """Answer one request on ``stream``, then close it."""
    async with stream:
        try:
            with anyio.fail_after(REQUEST_TIMEOUT_S):
                request = await _read_request(stream)
        except HttpError as exc:
            with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
                await stream.send(_encode(Response.json({"error": exc.message}, exc.status)))
            if exc.unread:
                await _drain_and_close(stream)
            return
        except (TimeoutError, anyio.EndOfStream, anyio.BrokenResourceError, OSError):
            return
        else:
            try:
                response = await handler(request)
            except HttpError as exc:
                response = Response.json({"error": exc.message}, exc.status)
            except Exception as exc:  # one bad request must not stop the console
                _log.exception("console request %s %s failed", request.method, request.path)
                response = Response.json(
                    {"error": f"{type(exc).__name__}: {exc}"}, HTTPStatus.INTERNAL_SERVER_ERROR
                )
        with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
            await stream.send(_encode(response))


async def serve(
    listener: anyio.abc.Listener[anyio.abc.SocketStream],
    handler: Handler,
) -> None:
    """Serve ``handler`` on ``listener`` until cancelled."""

    async def one(stream: anyio.abc.SocketStream) -> None:
        await handle_connection(stream, handler)

    await listener.serve(one)
