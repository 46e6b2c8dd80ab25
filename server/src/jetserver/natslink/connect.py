"""Opening one NATS connection at startup: attempts with backoff, each named in the log,
within ``nats.startup_wait_s`` (0 = no bound).

nats-py's ``connect`` retries a server that refuses forever inside its own loop, telling
only its ``error_cb`` (four anonymous "nats error" warnings a second, and no way out). Here
that callback ends nats-py's loop at the first failure (:class:`_AttemptGate`); the loop of
:func:`open_connection` retries with backoff, logs each failure with the URLs, and gives up
with :class:`NatsUnavailable` when the startup wait is over. Once connected, the callbacks
are the link's own and nats-py reconnects on its own (without a bound).
"""

from __future__ import annotations

import logging
import math
import random
import ssl
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import attrs
import nats.errors

from jetserver.broker.nats_port import NatsUnavailable
from jetserver.config.server import NatsConfig
from jetserver.errors import JetServerError
from jetserver.logs import fields
from jetserver.natslink.fast import JetNatsClient

log = logging.getLogger("jetserver.natslink.link")

_MAX_BACKOFF_EXPONENT = 16
_CLOSE_FAILED_ATTEMPT_S = 2.0
"""Bound on closing the client of a failed attempt (a half-open socket)."""

ErrorCallback = Callable[[Exception], Awaitable[None]]
Callback = Callable[[], Awaitable[None]]


def backoff_delay(
    attempt: int, base_s: float, max_s: float, rng: random.Random | None = None
) -> float:
    """Delay before reconnect ``attempt`` (0-based): ``base * 2**attempt``, capped, +-20 %."""
    delay = min(max_s, base_s * (2 ** min(attempt, _MAX_BACKOFF_EXPONENT)))
    jitter = (rng or random).uniform(0.8, 1.2)
    return float(min(max_s, delay * jitter))


def is_auth_error(exc: BaseException) -> bool:
    """True for NATS refusing our credentials (nats-py raises a generic Error for it)."""
    text = str(exc).lower()
    return isinstance(exc, nats.errors.AuthorizationError) or (
        "authorization violation" in text or "authentication" in text
    )


def tls_context(config: NatsConfig) -> ssl.SSLContext | None:
    """The TLS context for ``config`` (None if TLS is not used).

    Raises:
        JetServerError: a CA, certificate or key file cannot be loaded.
    """
    if not config.uses_tls:
        return None
    try:
        ctx = ssl.create_default_context(cafile=config.tls_ca)
        if config.tls_cert is not None:
            ctx.load_cert_chain(config.tls_cert, config.tls_key)
    except (OSError, ssl.SSLError) as exc:
        raise JetServerError(f"cannot load NATS TLS files: {exc}") from exc
    return ctx


class _AttemptFailed(Exception):
    """Raised from nats-py's ``error_cb`` during an attempt: ends nats-py's own retry loop
    (it catches only OSError, nats errors and timeouts)."""

    def __init__(self, cause: Exception) -> None:
        super().__init__(str(cause))
        self.cause = cause


@attrs.define(eq=False)
class _AttemptGate:
    """nats-py's error, disconnected and closed callbacks: while the attempt runs, the
    failure of its last URL ends it (nats-py tries them in turn; closing its client says
    nothing); once connected, the link's own."""

    urls: int
    on_error: ErrorCallback
    on_disconnected: Callback
    on_closed: Callback
    connected: bool = False
    failures: int = 0

    async def error(self, exc: Exception) -> None:
        if not self.connected:
            self.failures += 1
            if self.failures >= self.urls:
                raise _AttemptFailed(exc)
            return
        await self.on_error(exc)

    async def disconnected(self) -> None:
        if self.connected:
            await self.on_disconnected()

    async def closed(self) -> None:
        if self.connected:
            await self.on_closed()


@attrs.frozen
class LinkCallbacks:
    """The link's nats-py callbacks, in force once a connection is up."""

    reconnect_to_server: Callable[[list[Any], dict[str, Any]], tuple[Any, float]]
    error: ErrorCallback
    disconnected: Callback
    reconnected: Callback
    closed: Callback


async def open_connection(
    cfg: NatsConfig,
    callbacks: LinkCallbacks,
    *,
    no_echo: bool,
    attempts: int | None = None,
    rng: random.Random | None = None,
) -> JetNatsClient:
    """Connect one client, retrying with backoff until it works, ``attempts`` failed, or
    ``cfg.startup_wait_s`` is over (0: no bound).

    Raises:
        NatsUnavailable: NATS refused our credentials, ``attempts`` attempts failed, or it
            did not answer within the startup wait.
        JetServerError: TLS files cannot be loaded.
    """
    tls = tls_context(cfg)
    urls = ", ".join(cfg.servers)
    wait = cfg.startup_wait_s
    deadline = anyio.current_time() + wait if wait > 0 else math.inf
    attempt = 0
    last_error = "no attempt finished"
    if wait <= 0:
        log.info("waiting for nats without a bound", extra=fields(servers=urls))
    while True:
        remaining = deadline - anyio.current_time()
        if attempt > 0 and remaining <= 0:
            raise NatsUnavailable(
                f"NATS at {urls} did not answer within {wait:g} s: {last_error}. Is "
                "nats-server running there? nats.startup_wait_s (--nats-startup-wait) "
                "waits longer, 0 forever"
            )
        gate = _AttemptGate(
            len(cfg.servers), callbacks.error, callbacks.disconnected, callbacks.closed
        )
        nc = JetNatsClient()
        try:
            with anyio.fail_after(remaining if remaining < math.inf else None):
                await nc.connect(
                    servers=list(cfg.servers),
                    name=f"{cfg.name} ingest" if no_echo and cfg.name else cfg.name,
                    user=cfg.user,
                    password=cfg.password,
                    token=cfg.token,
                    user_credentials=cfg.creds_file,
                    tls=tls,
                    tls_hostname=cfg.tls_hostname,
                    connect_timeout=cfg.connect_timeout_s,  # type: ignore[arg-type]
                    reconnect_time_wait=cfg.reconnect_wait_s,  # type: ignore[arg-type]
                    max_reconnect_attempts=cfg.max_reconnect_attempts,
                    ping_interval=cfg.ping_interval_s,  # type: ignore[arg-type]
                    max_outstanding_pings=cfg.max_outstanding_pings,
                    pending_size=cfg.pending_bytes,
                    no_echo=no_echo,
                    # Reconnection is turned on once connected (see the module doc).
                    allow_reconnect=False,
                    reconnect_to_server_handler=callbacks.reconnect_to_server,
                    error_cb=gate.error,
                    disconnected_cb=gate.disconnected,
                    reconnected_cb=callbacks.reconnected,
                    closed_cb=gate.closed,
                )
        except Exception as exc:
            cause = exc.cause if isinstance(exc, _AttemptFailed) else exc
            await _discard(nc)
            attempt += 1
            if is_auth_error(cause):
                raise NatsUnavailable(
                    f"NATS at {urls} refused our credentials (check nats.user/password/token)"
                ) from cause
            cut = isinstance(exc, TimeoutError) and anyio.current_time() >= deadline
            if not cut or attempt == 1:  # a cut attempt says less than the one before
                last_error = _describe(cause)
            if attempts is not None and attempt >= attempts:
                raise NatsUnavailable(f"cannot connect to NATS at {urls}: {last_error}") from cause
            remaining = deadline - anyio.current_time()
            if remaining <= 0:
                continue  # gives up at the top of the loop
            delay = min(
                remaining,
                backoff_delay(attempt - 1, cfg.reconnect_wait_s, cfg.reconnect_max_wait_s, rng),
            )
            log.warning(
                "cannot connect to nats; retrying",
                extra=fields(
                    servers=urls,
                    error=last_error,
                    retry_in_s=round(delay, 2),
                    gives_up_in_s=round(remaining, 1) if remaining < math.inf else "never",
                ),
            )
            await anyio.sleep(delay)
            continue
        gate.connected = True
        nc.options["allow_reconnect"] = True
        return nc


def _describe(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    if isinstance(exc, TimeoutError | nats.errors.TimeoutError):
        return "no NATS greeting (INFO) came back"
    return text


async def _discard(nc: JetNatsClient) -> None:
    """Close the client of a failed attempt (it may hold a half-open socket)."""
    if nc.is_closed:
        return
    with anyio.CancelScope(shield=True), anyio.move_on_after(_CLOSE_FAILED_ATTEMPT_S):
        try:
            await nc.close()
        except Exception as exc:
            log.debug("closing a failed nats attempt", extra=fields(error=str(exc)))
