"""``jet server``: run one server.

Configuration precedence: flags > environment (``JET_<SECTION>_<KEY>``) > ``--config`` TOML
file > defaults (see jetserver.config). SIGTERM or SIGINT shuts down cleanly; a second
signal aborts the grace period for in-flight requests (data is still flushed).
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import signal
import sys
import textwrap
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import anyio

from jetserver import logs
from jetserver.cli.exit_codes import EXIT_FAILED, EXIT_OK, EXIT_USAGE
from jetserver.config.load import load_config, settings_help, to_toml
from jetserver.config.server import FETCH_IO_AUTO, FETCH_IO_READ, FETCH_IO_SENDFILE, ServerConfig
from jetserver.errors import ConfigError, JetServerError
from jetserver.infra.runtime import tune_gc, tune_malloc, uses_uvloop

log = logging.getLogger("jetserver.cli")

_HELP_WIDTH = 100
"""Width of the description and the settings list in ``jet server --help``."""

# flag dest -> (section, key)
_FLAG_KEYS: dict[str, tuple[str, str]] = {
    "server_id": ("server", "id"),
    "data_dir": ("server", "data_dir"),
    "host": ("listen", "host"),
    "port": ("listen", "port"),
    "ready_file": ("listen", "ready_file"),
    "advertise": ("listen", "advertise"),
    "nats": ("nats", "servers"),
    "nats_user": ("nats", "user"),
    "nats_password": ("nats", "password"),
    "nats_token": ("nats", "token"),
    "nats_ca": ("nats", "tls_ca"),
    "nats_cert": ("nats", "tls_cert"),
    "nats_key": ("nats", "tls_key"),
    "nats_startup_wait": ("nats", "startup_wait_s"),
    "max_message_bytes": ("limits", "max_message_bytes"),
    "max_frame_bytes": ("limits", "max_frame_bytes"),
    "fetch_io": ("fetch", "io"),
    "disk_free_floor_bytes": ("storage", "disk_free_floor_bytes"),
    "log_level": ("logging", "level"),
    "log_format": ("logging", "format"),
    "metrics_port": ("metrics", "port"),
    "raft_address": ("cluster", "raft_address"),
    "peers": ("cluster", "peers"),
    "cluster_password_file": ("cluster", "password_file"),
    "join": ("cluster", "join"),
}


def register(subparsers: Any) -> None:
    """Add ``jet server``."""
    p: argparse.ArgumentParser = subparsers.add_parser(
        "server",
        help="run a jet server",
        description=textwrap.fill(
            "Run a jet server: store NATS subjects as durable streams and serve the "
            "client protocol. Flags override JET_* environment variables, which override the "
            "--config file.",
            width=_HELP_WIDTH,
        ),
        epilog=settings_help(_HELP_WIDTH),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--config", type=Path, help="TOML config file (also JET_CONFIG)")
    p.add_argument("--server-id", help="server id (default s1)")
    p.add_argument("--data-dir", help="data directory (default ./jet-data)")
    p.add_argument("--host", help="listen host (default 127.0.0.1)")
    p.add_argument("--port", type=int, help="listen port (default 9292; 0 = any free port)")
    p.add_argument("--ready-file", help='write {"address": "host:port"} here once listening')
    p.add_argument("--advertise", help="host:port clients should use (default: bound address)")
    p.add_argument(
        "--nats",
        action="append",
        metavar="URL",
        help="NATS server URL (repeat or comma-separate; default nats://127.0.0.1:4222)",
    )
    p.add_argument("--nats-user", help="NATS user")
    p.add_argument("--nats-password", help="NATS password (prefer JET_NATS_PASSWORD)")
    p.add_argument("--nats-token", help="NATS token (prefer JET_NATS_TOKEN)")
    p.add_argument("--nats-ca", help="CA bundle to verify NATS (enables TLS)")
    p.add_argument("--nats-cert", help="client certificate for NATS mutual TLS")
    p.add_argument("--nats-key", help="client key for NATS mutual TLS")
    p.add_argument(
        "--nats-startup-wait",
        type=float,
        metavar="SECONDS",
        help="exit with an error if NATS has not answered after this long at startup "
        "(default 60; 0 = wait forever)",
    )
    p.add_argument("--max-message-bytes", type=int, help="largest message stored (default 1 MiB)")
    p.add_argument("--max-frame-bytes", type=int, help="largest request frame (default 16 MiB)")
    p.add_argument(
        "--fetch-io",
        choices=[FETCH_IO_AUTO, FETCH_IO_SENDFILE, FETCH_IO_READ],
        help="how fetches send records (default sendfile; auto: read+send below 256 KiB)",
    )
    p.add_argument(
        "--disk-free-floor-bytes",
        type=int,
        help="refuse writes below this much free disk (default min(64 MiB, 5%%); 0 = never)",
    )
    p.add_argument(
        "--raft-address",
        help="cluster: this server's metadata Raft host:port (enables clustering)",
    )
    p.add_argument(
        "--peers",
        action="append",
        metavar="ID@HOST:PORT",
        help="cluster: the other members' Raft addresses (repeat or comma-separate)",
    )
    p.add_argument(
        "--cluster-password-file",
        help="cluster: file holding the cluster password (or set JET_CLUSTER_PASSWORD)",
    )
    p.add_argument(
        "--join",
        action="store_true",
        default=None,
        help="cluster: this server is being added to a running cluster",
    )
    p.add_argument("--log-level", help="DEBUG, INFO, WARNING, ERROR (default INFO)")
    p.add_argument("--log-format", choices=["text", "json"], help="log format (default text)")
    p.add_argument(
        "--metrics-port",
        type=int,
        help="serve Prometheus metrics on 127.0.0.1:PORT/metrics (default: off; 0 = any port)",
    )
    p.add_argument(
        "--print-config",
        action="store_true",
        help="print the effective configuration as TOML (secrets masked) and exit",
    )
    p.set_defaults(func=run_command)


def config_from_args(args: argparse.Namespace, env: dict[str, str]) -> ServerConfig:
    """The merged configuration for parsed ``args`` and ``env``.

    Raises:
        ConfigError: a bad value anywhere.
    """
    overrides: dict[tuple[str, str], Any] = {}
    for dest, key in _FLAG_KEYS.items():
        value = getattr(args, dest, None)
        if value is None:
            continue
        if dest in ("nats", "peers"):
            value = tuple(u.strip() for item in value for u in item.split(",") if u.strip())
        overrides[key] = value
    return load_config(args.config, env, overrides)


def run_command(args: argparse.Namespace) -> int:
    """Entry point of ``jet server``."""
    try:
        config = config_from_args(args, dict(os.environ))
    except ConfigError as exc:
        print(f"jet server: configuration error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if getattr(args, "print_config", False):
        print(to_toml(config), end="")
        return EXIT_OK
    logs.configure(config.logging.level, config.logging.format)
    tune_gc()
    tune_malloc()
    try:
        uvloop = uses_uvloop(config.server.event_loop)
    except ConfigError as exc:
        print(f"jet server: configuration error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    try:
        anyio.run(serve, config, backend="asyncio", backend_options={"use_uvloop": uvloop})
    except (JetServerError, OSError, BaseExceptionGroup) as exc:
        cause = _operator_error(exc)
        if cause is None:
            raise
        log.error("server failed", extra=logs.fields(error=str(cause)))
        return EXIT_FAILED
    return EXIT_OK


def _operator_error(exc: BaseException) -> BaseException | None:
    """The JetServerError or OSError behind ``exc`` (task groups wrap them), else None."""
    if isinstance(exc, JetServerError | OSError):
        return exc
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            found = _operator_error(inner)
            if found is not None:
                return found
    return None


STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


def _each_once(signum: int, frame: object) -> None:
    """The Python-level handler of a stop signal: nothing (its wake-up byte is what counts)."""


@contextlib.contextmanager
def stop_signals() -> Iterator[AsyncIterator[int]]:
    """SIGTERM and SIGINT as the event loop receives them, each delivery once.

    uvloop counts a signal from two sources, the byte the C handler writes to the loop's
    wake-up socket and a set its Python-level handler fills; when a delivery's two halves
    fall on either side of one reading of the socket (the handler ran, the byte came after
    the read, as when a busy machine preempts the loop there), the signal is yielded twice:
    a SIGTERM then a SIGINT counted as three, an immediate stop with no ``clean_stop``. A
    Python-level handler that does nothing leaves the bytes, one per delivery (as on
    asyncio's own loop, whose handler does nothing too).
    """
    with anyio.open_signal_receiver(*STOP_SIGNALS) as signals:
        for signum in STOP_SIGNALS:
            signal.signal(signum, _each_once)
        yield signals


async def serve(config: ServerConfig) -> None:
    """Run a server until SIGTERM/SIGINT."""
    from jetserver.server import Server

    server = Server(config)
    async with anyio.create_task_group() as tg:

        async def on_signals() -> None:
            with stop_signals() as signals:
                count = 0
                async for signum in signals:
                    count += 1
                    log.info(
                        "signal received",
                        extra=logs.fields(signal=signal.Signals(signum).name, count=count),
                    )
                    # The second: a hurried stop (no waits on the cluster or on clients);
                    # the third: stop at once.
                    server.request_stop(hurry=count >= 2)
                    if count >= 3:
                        run_scope.cancel()

        with anyio.CancelScope() as run_scope:
            tg.start_soon(on_signals)
            await server.run()
        tg.cancel_scope.cancel()
