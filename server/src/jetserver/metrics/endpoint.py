"""A minimal HTTP/1.0-style endpoint serving ``GET /metrics`` (Prometheus text format).

Stdlib parsing on an anyio TCP listener: one request per connection, answered and closed.
A request head must arrive within ``REQUEST_TIMEOUT_S`` and fit in ``MAX_REQUEST_BYTES``;
at most ``MAX_CONNECTIONS`` scrapes are served at once (more are closed at accept). Paths
other than ``/metrics`` get 404, methods other than GET/HEAD get 405.

Task safety: run :func:`serve_metrics` in the server's task group.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import anyio
from anyio.abc import SocketAttribute, SocketStream, TaskStatus

from jetserver.logs import fields
from jetserver.metrics.exposition import CONTENT_TYPE

log = logging.getLogger(__name__)

MAX_REQUEST_BYTES = 8192
"""Largest request head accepted."""
REQUEST_TIMEOUT_S = 5.0
"""Bound on receiving a request head and sending the answer."""
MAX_CONNECTIONS = 16
"""Scrapes served at once."""


async def serve_metrics(
    host: str,
    port: int,
    render: Callable[[], str],
    *,
    task_status: TaskStatus[str] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Serve ``render()`` at ``http://host:port/metrics`` until cancelled.

    ``task_status.started("host:port")`` reports the bound address.

    Raises:
        OSError: the address cannot be bound (before ``started``).
    """
    listener = await anyio.create_tcp_listener(local_host=host, local_port=port)
    local = listener.extra(SocketAttribute.local_address)
    address = f"{local[0]}:{local[1]}" if isinstance(local, tuple) else str(local)
    busy = 0

    async def handle(stream: SocketStream) -> None:
        nonlocal busy
        async with stream:
            if busy >= MAX_CONNECTIONS:
                return
            busy += 1
            try:
                with anyio.move_on_after(REQUEST_TIMEOUT_S):
                    await _answer(stream, render)
            except (anyio.BrokenResourceError, anyio.EndOfStream, OSError) as exc:
                log.debug("metrics scrape failed", extra=fields(error=repr(exc)))
            finally:
                busy -= 1

    async with listener:
        log.info("metrics endpoint listening", extra=fields(address=address))
        task_status.started(address)
        await listener.serve(handle)


async def _answer(stream: SocketStream, render: Callable[[], str]) -> None:
    head = b""
    while b"\r\n\r\n" not in head and b"\n\n" not in head:
        if len(head) > MAX_REQUEST_BYTES:
            await stream.send(_response(431, "request head too large\n"))
            return
        head += await stream.receive(4096)
    request_line = head.split(b"\n", 1)[0].decode("latin-1").strip()
    parts = request_line.split()
    if len(parts) < 2:
        await stream.send(_response(400, "bad request\n"))
        return
    method, target = parts[0], parts[1]
    if method not in ("GET", "HEAD"):
        await stream.send(_response(405, "only GET\n", extra="Allow: GET, HEAD\r\n"))
        return
    if target.split("?", 1)[0] != "/metrics":
        await stream.send(_response(404, "try /metrics\n"))
        return
    body = render()
    await stream.send(_response(200, body, content_type=CONTENT_TYPE, head_only=method == "HEAD"))


_REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed"}


def _response(
    status: int,
    body: str,
    *,
    content_type: str = "text/plain; charset=utf-8",
    extra: str = "",
    head_only: bool = False,
) -> bytes:
    data = body.encode()
    reason = _REASONS.get(status, "Request Header Fields Too Large")
    head = (
        f"HTTP/1.1 {status} {reason}\r\n"
        f"Content-Type: {content_type}\r\n"
        f"Content-Length: {len(data)}\r\n"
        f"Connection: close\r\n{extra}\r\n"
    ).encode()
    return head if head_only else head + data
