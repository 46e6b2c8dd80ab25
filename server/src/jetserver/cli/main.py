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
import atexit
import importlib
import logging
import os
import sys
import threading
from collections.abc import Sequence
from typing import NoReturn

from jetserver.cli.exit_codes import EXIT_FAILED, EXIT_INTERRUPTED

COMMANDS: dict[str, tuple[str, ...]] = {
    "server": ("jetserver.cli.server_cmd",),
    "dev": ("jetserver.cli.dev_cmd",),
    # jet stream create|list|info|delete, then edit|purge (stream_edit_cmd adds to stream_cmd)
    "stream": ("jetserver.cli.stream_cmd", "jetserver.cli.stream_edit_cmd"),
    "pub": ("jetserver.cli.pubsub_cmd",),
    "sub": ("jetserver.cli.pubsub_cmd",),
    "passwd": ("jetserver.cli.security_cmd",),
    "acl": ("jetserver.cli.security_cmd",),
    "cluster": ("jetserver.cli.cluster_cmd",),  # jet cluster status
    "share": ("jetserver.cli.share_cmd",),  # jet share status
    "table": ("jetserver.cli.table_cmd",),  # jet table get|put|delete|watch
    "bench": ("jetserver.cli.bench_cmd",),
    "top": ("jetserver.cli.top_cmd",),
    "console": ("jetserver.cli.console_cmd",),
}
"""Each command and the modules that register it, in the order ``jet --help`` lists them.
A command names its own modules only: importing every command group (the server, the dev
cluster, the console, the benchmarks: about 550 modules) cost about 1 s of CPU per ``jet``
run, where ``jet stream`` needs about 160."""
COMMAND_MODULES = tuple(dict.fromkeys(m for mods in COMMANDS.values() for m in mods))
"""Every command module, once each, in registration order."""


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """Build the parser: only the modules of ``command`` if it is a known one, else every
    registered command (for ``jet --help`` and a usage error that lists them)."""
    parser = argparse.ArgumentParser(
        prog="jet", description="jet: durable, replicated streams for NATS."
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    subparsers.required = True
    for name in COMMANDS.get(command or "", COMMAND_MODULES):
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


def exit_process(code: int) -> NoReturn:
    """End this process with ``code`` once ``main`` has returned, without the interpreter's
    teardown when nothing is left running.

    That teardown frees every object of every module one by one: about 40 ms of CPU for the
    ~480 modules ``jet server`` imports, paid by every test that stops a server. Here the
    logs and the standard streams are flushed and the ``atexit`` functions run (as at a
    normal exit); with another non-daemon thread still alive, the normal exit joins it.
    """
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            code = code or EXIT_FAILED  # as the interpreter's own exit does
    main_thread = threading.main_thread()
    if any(t is not main_thread and not t.daemon for t in threading.enumerate()):
        sys.exit(code)
    atexit._run_exitfuncs()
    os._exit(code)


if __name__ == "__main__":
    exit_process(main())
