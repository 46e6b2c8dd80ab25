"""``jet dev``: a local nats-server plus jet server(s) for development, until Ctrl-C.

Once everything is ready it prints, each on its own line (stdout, flushed)::

    nats: nats://127.0.0.1:PORT
    servers: HOST:PORT[,HOST:PORT...]

then runs until SIGINT/SIGTERM and stops every process it started, by PID (servers first,
then nats-server). The data directory is temporary and removed on exit unless
``--data-dir`` is given.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
from pathlib import Path
from types import FrameType
from typing import Any

from jetserver.devcluster import DevCluster, DevClusterError
from jetserver.testing import NatsServerError, WaitTimeout

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
_WATCH_INTERVAL_S = 0.5


def register(subparsers: Any) -> None:
    """Add ``jet dev``."""
    p: argparse.ArgumentParser = subparsers.add_parser(
        "dev",
        help="run a local nats-server and jet server(s) until Ctrl-C",
        description="Start nats-server and jet server(s) on free 127.0.0.1 ports, print their "
        "addresses, and run until interrupted.",
    )
    p.add_argument("--servers", type=int, default=1, help="number of jet servers (default 1)")
    p.add_argument(
        "--data-dir", type=Path, help="keep data here (default: a temp dir removed on exit)"
    )
    p.add_argument("--log-file", type=Path, help="append server logs here (default: stderr)")
    p.add_argument(
        "--server-arg",
        action="append",
        default=[],
        metavar="ARG",
        help="extra flag for every `jet server` (repeatable), e.g. --server-arg=--fetch-io=read",
    )
    p.set_defaults(func=run_command)


def run_command(args: argparse.Namespace) -> int:
    """Entry point of ``jet dev``."""
    if args.servers < 1:
        print("jet dev: --servers must be at least 1", file=sys.stderr)
        return EXIT_USAGE
    stop = threading.Event()
    received: list[int] = []

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        received.append(signum)
        stop.set()

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    # The servers' output: the log file, else this process's stderr (a duplicate of fd 2).
    log_file = open(args.log_file, "ab") if args.log_file else os.fdopen(os.dup(2), "wb")  # noqa: SIM115
    cluster = DevCluster(
        size=args.servers,
        root=args.data_dir,
        server_args=tuple(args.server_arg),
        log_file=log_file,
        new_session=True,
    )
    try:
        try:
            cluster.start()
        except DevClusterError as exc:
            print(f"jet dev: {exc}", file=sys.stderr)
            return EXIT_USAGE if "--servers" in str(exc) else EXIT_FAILED
        except (NatsServerError, WaitTimeout) as exc:
            print(f"jet dev: {exc}", file=sys.stderr)
            return EXIT_FAILED
        print(f"nats: {cluster.nats_url}", flush=True)
        print(f"servers: {','.join(cluster.addresses)}", flush=True)
        if args.data_dir:
            print(f"data: {args.data_dir}", flush=True)
        code = EXIT_OK
        while not stop.wait(_WATCH_INTERVAL_S):
            problem = cluster.check()
            if problem is not None:
                print(f"jet dev: {problem}; stopping", file=sys.stderr, flush=True)
                code = EXIT_FAILED
                break
        return code
    finally:
        cluster.stop()
        log_file.close()
        for s, handler in previous.items():
            signal.signal(s, handler)
