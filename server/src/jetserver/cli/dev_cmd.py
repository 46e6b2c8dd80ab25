"""``jet dev``: a local nats-server plus jet server(s) for development, until Ctrl-C.

Once everything is ready it prints, each on its own line (stdout, flushed)::

    nats: nats://127.0.0.1:PORT
    servers: HOST:PORT[,HOST:PORT...]

then runs until SIGINT, SIGTERM or SIGHUP and stops every process it started, by PID
(servers first, then nats-server). The data directory is temporary and removed on exit
unless ``--data-dir`` is given. If ``jet dev`` is killed outright (SIGKILL, a crash), its
watchdog (:mod:`jetserver.cli.dev_watchdog`, started first, in a session of its own) ends
the children and removes the temporary directory.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from types import FrameType
from typing import Any

from jetserver.cli.exit_codes import EXIT_FAILED, EXIT_OK, EXIT_USAGE
from jetserver.testing import NatsServerError, WaitTimeout, reap
from jetserver.testing.devcluster import DevCluster, DevClusterError

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

    previous = {
        s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    }
    temporary = args.data_dir is None
    root = Path(tempfile.mkdtemp(prefix="jet-cluster-")) if temporary else args.data_dir
    watchdog = _start_watchdog(root, temporary)
    # The servers' output: the log file, else this process's stderr (a duplicate of fd 2).
    log_file = open(args.log_file, "ab") if args.log_file else os.fdopen(os.dup(2), "wb")  # noqa: SIM115
    cluster = DevCluster(
        size=args.servers,
        root=root,
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
        _report(watchdog, [s.pid for s in cluster.servers] + _nats_pid(cluster))
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
        if temporary:
            shutil.rmtree(root, ignore_errors=True)
        _dismiss(watchdog)
        for s, handler in previous.items():
            signal.signal(s, handler)


def _start_watchdog(root: Path, temporary: bool) -> subprocess.Popen[str] | None:
    """Start the watchdog that cleans up if this process is killed; None if it cannot be
    started (jet dev still runs, without that safety net)."""
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", "jetserver.cli.dev_watchdog"],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            text=True,
            start_new_session=True,
        )
    except OSError as exc:
        print(f"jet dev: no watchdog ({exc}); a SIGKILL would leave processes", file=sys.stderr)
        return None
    _tell(proc, f"root {root}\n" + ("temporary\n" if temporary else ""))
    return proc


def _nats_pid(cluster: DevCluster) -> list[int]:
    return [] if cluster.nats is None or cluster.nats.proc is None else [cluster.nats.pid]


def _report(watchdog: subprocess.Popen[str] | None, pids: list[int]) -> None:
    if watchdog is not None:
        _tell(watchdog, "".join(f"pid {pid}\n" for pid in pids))


def _tell(watchdog: subprocess.Popen[str], text: str) -> None:
    assert watchdog.stdin is not None
    with contextlib.suppress(OSError):  # the watchdog died: nothing to tell
        watchdog.stdin.write(text)
        watchdog.stdin.flush()


def _dismiss(watchdog: subprocess.Popen[str] | None) -> None:
    """Everything is cleaned up: tell the watchdog so and reap it."""
    if watchdog is None:
        return
    _tell(watchdog, "done\n")
    assert watchdog.stdin is not None
    with contextlib.suppress(OSError):
        watchdog.stdin.close()
    reap(watchdog, 5.0)
