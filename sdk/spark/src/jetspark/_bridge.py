"""A jetsdk async :class:`~jetsdk.Client` usable from Spark's synchronous callbacks.

Spark calls the source and the sinks from plain threads (the driver's source runner,
executor tasks, the foreachBatch callback). :class:`Bridge` runs an anyio event loop in a
private daemon thread with an entered async Client, and :meth:`Bridge.call` runs a
coroutine function there and waits for it; :meth:`Bridge.submit` starts one and returns a
:class:`concurrent.futures.Future`, so a task can overlap its I/O with its own work.

A daemon thread (not ``anyio.from_thread.start_blocking_portal``, whose worker thread is
joined at interpreter exit) so that a Python worker Spark abandons never hangs on exit.

:func:`shared_bridge` keeps one Bridge per (process, servers): Spark reuses its Python
workers for many tasks, and reconnecting for each would cost a Hello and a metadata
round trip per task. A bridge does not survive ``fork()``; the pid check makes a forked
child build its own.

Thread safety: :meth:`call` and :meth:`submit` may be used from any thread.
"""

from __future__ import annotations

import concurrent.futures
import os
import threading
from collections.abc import Awaitable, Callable, Sequence
from contextlib import suppress
from typing import ParamSpec, TypeVar

import anyio
from anyio.from_thread import BlockingPortal

from jetsdk.client import Client
from jetspark.options import NO_SECURITY, Security

__all__ = ["LOOP_START_TIMEOUT_S", "Bridge", "shared_bridge"]

P = ParamSpec("P")
T = TypeVar("T")

LOOP_START_TIMEOUT_S = 60.0
"""Seconds to wait for the loop thread and the first connection."""

_lock = threading.Lock()
_shared: dict[tuple[int, tuple[str, ...], float, Security], Bridge] = {}


class Bridge:
    """An entered async Client in a private event-loop thread."""

    def __init__(
        self,
        servers: Sequence[str],
        *,
        request_timeout: float = 30.0,
        security: Security = NO_SECURITY,
    ) -> None:
        """Start the loop thread and connect (blocks until connected).

        Raises:
            JetError: no server reachable (JetConnectionError) or another SDK error.
            RuntimeError: the loop thread did not start in time.
        """
        self.pid = os.getpid()
        self.servers = tuple(servers)
        self._ready = threading.Event()
        self._stop: anyio.Event | None = None
        self._portal: BlockingPortal | None = None
        self._client: Client | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="jetspark-loop", daemon=True)
        self._request_timeout = request_timeout
        self._security = security
        self._thread.start()
        if not self._ready.wait(LOOP_START_TIMEOUT_S):
            raise RuntimeError("jetspark: the event loop thread did not start in time")
        if self._error is not None:
            raise self._error

    @property
    def client(self) -> Client:
        """The async client (use it only inside coroutines run by :meth:`call`)."""
        assert self._client is not None
        return self._client

    @property
    def alive(self) -> bool:
        """True while the loop runs in this process."""
        return self._thread.is_alive() and os.getpid() == self.pid and self._error is None

    def _run(self) -> None:
        try:
            anyio.run(self._main)
        except BaseException as exc:  # reported to __init__ (or ends a dead bridge)
            # The portal's task group wraps what the Client raised (Unauthenticated,
            # JetConnectionError...): report that error itself.
            while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
                exc = exc.exceptions[0]
            self._error = exc
            self._ready.set()

    async def _main(self) -> None:
        self._stop = anyio.Event()
        async with (
            BlockingPortal() as portal,
            Client(
                list(self.servers),
                request_timeout=self._request_timeout,
                **self._security.client_kwargs(),
            ) as client,
        ):
            self._portal = portal
            self._client = client
            self._ready.set()
            await self._stop.wait()

    def call(self, fn: Callable[P, Awaitable[T]], /, *args: P.args, **kwargs: P.kwargs) -> T:
        """Run ``await fn(*args, **kwargs)`` in the loop thread and return its result."""
        return self.submit(fn, *args, **kwargs).result()

    def submit(
        self, fn: Callable[P, Awaitable[T]], /, *args: P.args, **kwargs: P.kwargs
    ) -> concurrent.futures.Future[T]:
        """Start ``fn(*args, **kwargs)`` in the loop thread; return its future."""
        if self._portal is None or not self.alive:
            raise RuntimeError("jetspark: this connection bridge is closed")

        async def run() -> T:
            return await fn(*args, **kwargs)

        return self._portal.start_task_soon(run)

    def close(self) -> None:
        """Close the client and stop the loop thread (idempotent)."""
        portal, stop = self._portal, self._stop
        if portal is None or stop is None or not self.alive:
            return
        with suppress(RuntimeError):
            portal.call(_set_event, stop)
        self._thread.join(LOOP_START_TIMEOUT_S)
        self._portal = None


async def _set_event(event: anyio.Event) -> None:
    event.set()


def shared_bridge(
    servers: Sequence[str], *, request_timeout: float = 30.0, security: Security = NO_SECURITY
) -> Bridge:
    """This process's bridge to ``servers`` with ``security`` (created on first use, rebuilt
    if it died)."""
    key = (os.getpid(), tuple(servers), request_timeout, security)
    with _lock:
        bridge = _shared.get(key)
        if bridge is None or not bridge.alive:
            bridge = Bridge(servers, request_timeout=request_timeout, security=security)
            _shared[key] = bridge
        return bridge
