"""Entry point of the ``jet`` command.

Each command group lives in its own module exposing ``register(subparsers)``; that
function adds its sub-parser(s) and sets ``func`` (returning an exit code) on them.

Exit codes scripts can rely on (every command):

    0  success
    1  the operation failed (error ack, server error, timeout)
    2  usage error (bad flags or arguments)
    3  could not connect to any server
    130 interrupted (SIGINT)
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_UNREACHABLE = 3
EXIT_INTERRUPTED = 130

COMMAND_MODULES = (
    "jetserver.cli.server_cmd",  # jet server
    "jetserver.cli.dev_cmd",  # jet dev
    "jetserver.cli.stream_cmd",  # jet stream create|list|info|delete
    "jetserver.cli.stream_edit_cmd",  # jet stream edit|purge (after stream_cmd)
    "jetserver.cli.pubsub_cmd",  # jet pub, jet sub
    "jetserver.cli.security_cmd",  # jet passwd, jet acl
    "jetserver.cli.cluster_cmd",  # jet cluster status
    "jetserver.cli.share_cmd",  # jet share status
    "jetserver.cli.table_cmd",  # jet table get|put|delete|watch
    "jetserver.cli.bench_cmd",  # jet bench
    "jetserver.cli.top_cmd",  # jet top
    "jetserver.cli.console_cmd",  # jet console
)


SERVER_MODULE = "jetserver.cli.server_cmd"
"""``jet server`` alone needs only this module: importing every command group (the dev
cluster, the console, the benchmarks...) took about 1.3 s of a server's start."""


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """Build the parser: every registered command, or only ``jet server`` when ``command``
    is ``"server"``."""
    parser = argparse.ArgumentParser(
        prog="jet", description="jet: durable, replicated streams for NATS."
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    subparsers.required = True
    for name in (SERVER_MODULE,) if command == "server" else COMMAND_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name != name:
                raise
            continue  # command group not built yet
        module.register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``jet`` with ``argv`` (default: ``sys.argv[1:]``); return the exit code."""
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser(argv[0] if argv else None)
    args = parser.parse_args(argv)
    try:
        code: int = args.func(args)
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    return code


if __name__ == "__main__":
    sys.exit(main())
