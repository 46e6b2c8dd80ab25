"""A NATS round trip that confirms everything sent before it (:func:`round_trip`), and the
socket transport a nats-py connection writes to (:func:`socket_transport`).

Task safety: the event loop of the connection.
"""

from __future__ import annotations

import asyncio
from typing import cast

import anyio
from nats.aio.client import Client as NatsClient

__all__ = ["round_trip", "socket_transport"]


async def round_trip(nc: NatsClient, timeout_s: float) -> None:
    """Push what ``nc`` holds pending to the server, then a PING round trip: within
    ``timeout_s`` in all.

    nats-py (2.16) writes PING straight to the transport while earlier commands (SUB, PUB)
    may still wait in its pending buffer, so a bare flush() can return before they reached
    the server: the pending buffer goes out first.

    Raises:
        TimeoutError: not within ``timeout_s``.
        Exception: the connection's error.
    """
    deadline = anyio.current_time() + timeout_s
    flush_pending = getattr(nc, "_flush_pending", None)
    if flush_pending is not None:
        with anyio.fail_after(timeout_s):
            await flush_pending(force_flush=True)
    await _ping_round_trip(nc, max(deadline - anyio.current_time(), 0.001))


async def _ping_round_trip(nc: NatsClient, timeout_s: float) -> None:
    """``nc.flush(timeout)`` that survives cancellation and timeouts.

    nats-py's flush cancels its PONG future on a timeout (and ``wait_for`` does when the
    caller is cancelled) but leaves it queued; the late PONG then calls ``set_result`` on
    the cancelled future, the InvalidStateError ends nats-py's read loop and the connection
    silently stops delivering (found by tests/server/test_fuzz_server.py: a Produce with
    ack policy NONE whose client went away mid-flush). Here the future is never cancelled:
    the PONG completes it whenever it comes.

    Raises:
        TimeoutError: no PONG within ``timeout_s``.
    """
    send_ping = getattr(nc, "_send_ping", None)
    if send_ping is None:  # another nats-py: its own flush
        await nc.flush(timeout=timeout_s)  # type: ignore[arg-type]
        return
    future: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
    await send_ping(future)
    done, _pending = await asyncio.wait({future}, timeout=timeout_s)
    if not done:
        raise TimeoutError(f"no PONG within {timeout_s} s")


def socket_transport(transport: object) -> asyncio.WriteTransport | None:
    """The asyncio transport under nats-py's TCP transport (its stream writer's), which the
    link writes a turn's publishes to straight (None: another kind of transport, or
    internals not as expected)."""
    raw = getattr(getattr(transport, "_io_writer", None), "transport", None)
    if callable(getattr(raw, "get_write_buffer_size", None)) and callable(
        getattr(raw, "writelines", None)
    ):
        return cast("asyncio.WriteTransport", raw)
    return None
