"""The fork server of the test kit (:mod:`jetserver.testing.forking`): one interpreter that
has imported the server and forks a child per ``jet server`` start.

Run as ``python -m jetserver.testing.fork_server FD`` by :class:`~jetserver.testing.forking.
ForkServer`, with ``FD`` one end of a ``SOCK_SEQPACKET`` socket pair. Each message on it is
one start: a JSON request (``args``, ``env``, ``cwd``, ``new_session``, ``file_limit``) with
two descriptors attached, the start's own channel and its log file. The server forks; the
child becomes what ``python -m jetserver.cli.main ARGS`` would be (standard input from
/dev/null, output to the log, the request's environment, directory, session and open-file
limit, the signal dispositions of a fresh interpreter) and ends like it. On the channel the
server answers ``{"pid": N}``, and ``{"code": C, "cpu_s": S}`` once the child has ended
(``C`` as ``Popen.returncode``: negative for a signal; ``S`` its user + system CPU). It says
``ready`` on the socket once its imports are done. The end
of the socket (the owner is gone) ends the server; children still running go on alone.

The server runs no thread and no event loop: a fork of it has nothing half-done. Linux only
(``pidfd_open``).
"""

from __future__ import annotations

import atexit
import contextlib
import gc
import importlib
import os
import resource
import select
import signal
import socket
import sys
import threading
import traceback
from pathlib import Path
from typing import Any

import orjson

from jetserver.storage import durability_trace

PROGRAM = "jetserver.cli.main"
"""The module a child runs, by name as a spawn's ``python -m`` does (the kit sits below the
CLI: it runs the program, it does not use its code)."""
PRELOAD = (
    PROGRAM,
    "jetserver.cli.server_cmd",
    "jetserver.server",
    "jetserver.cluster.node",
    "jetserver.cluster.controller",
    "jetserver.cluster.handoff",
    "jetserver.raft.host",
    "jetserver.raft.metadata_raft",
    "jetserver.raft.journal",
)
"""Modules imported once, before any fork: a server alone's and a cluster member's."""

TRACE_ENV = durability_trace.ENV_VAR
"""Read at import, so a child applies it itself (:func:`durability_trace.enable`)."""

_RECV_BYTES = 1 << 20


def _preload() -> None:
    for name in PRELOAD:
        importlib.import_module(name)
    with contextlib.suppress(ImportError):
        importlib.import_module("uvloop")
    importlib.import_module(PROGRAM).build_parser("server")
    gc.collect()
    gc.freeze()  # children then share these objects' pages instead of copying them


def _exit_code(exc: SystemExit) -> int:
    """The process exit code the interpreter makes of ``exc``."""
    if exc.code is None:
        return 0
    if isinstance(exc.code, int):
        return exc.code
    print(exc.code, file=sys.stderr)
    return 1


def _finish(code: int, *, interrupted: bool = False) -> None:
    """End the child as the interpreter's own exit would (join non-daemon threads, run the
    ``atexit`` functions, flush the standard streams; killed by SIGINT after an uncaught
    KeyboardInterrupt), without its teardown."""
    shutdown = getattr(threading, "_shutdown", None)
    if shutdown is not None:
        shutdown()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            code = code or 1
    if interrupted:
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
    os._exit(code)


def _run_child(request: dict[str, Any]) -> None:
    """In the child: become ``python -m PROGRAM ARGS``; never return."""
    code = 1
    try:
        if request["new_session"]:
            os.setsid()
        if request["file_limit"] is not None:
            limit = int(request["file_limit"])
            resource.setrlimit(resource.RLIMIT_NOFILE, (limit, limit))
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        if trace := os.environ.get(TRACE_ENV):
            durability_trace.enable(Path(trace))
        cli = importlib.import_module(PROGRAM)
        sys.argv = [str(cli.__file__), *request["args"]]
        cli.exit_process(cli.main())  # what ``python -m jetserver.cli.main`` runs
    except SystemExit as exc:
        code = _exit_code(exc)
    except KeyboardInterrupt:
        traceback.print_exc()
        _finish(1, interrupted=True)
    except BaseException:
        traceback.print_exc()
        code = 1
    _finish(code)


def _fork(request: dict[str, Any], log_fd: int, own_fds: list[int]) -> int:
    """Fork a child for ``request`` with its output to ``log_fd``; its PID."""
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid:
        return pid
    try:
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(log_fd, 1)
        os.dup2(log_fd, 2)
        for fd in {null, log_fd, *own_fds}:
            if fd > 2:
                os.close(fd)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        _run_child(request)
    finally:
        os._exit(1)


class _Children:
    """The running children: PID -> (pidfd, channel), answered on their channel at exit."""

    def __init__(self) -> None:
        self.by_pidfd: dict[int, tuple[int, socket.socket]] = {}

    def fds(self) -> list[int]:
        return [fd for pidfd, (_, ch) in self.by_pidfd.items() for fd in (pidfd, ch.fileno())]

    def add(self, pid: int, channel: socket.socket) -> None:
        self.by_pidfd[os.pidfd_open(pid)] = (pid, channel)

    def ended(self, pidfd: int) -> None:
        pid, channel = self.by_pidfd.pop(pidfd)
        os.close(pidfd)
        _, status, usage = os.wait4(pid, 0)
        answer = {
            "code": os.waitstatus_to_exitcode(status),
            "cpu_s": usage.ru_utime + usage.ru_stime,
        }
        with contextlib.suppress(OSError):
            channel.send(orjson.dumps(answer))
        channel.close()


def serve(control: socket.socket) -> None:
    """Answer start requests on ``control`` until its other end closes."""
    children = _Children()
    while True:
        poller = select.poll()
        for fd in (control.fileno(), *children.by_pidfd):
            poller.register(fd, select.POLLIN)
        readable = [fd for fd, _ in poller.poll()]
        for fd in readable:
            if fd != control.fileno():
                children.ended(fd)
        if control.fileno() not in readable:
            continue
        message, fds, _, _ = socket.recv_fds(control, _RECV_BYTES, 2)
        if not message:
            return
        if len(fds) != 2:
            for fd in fds:
                os.close(fd)
            continue
        channel = socket.socket(fileno=fds[0])
        try:
            request = orjson.loads(message)
            pid = _fork(request, fds[1], [control.fileno(), *fds, *children.fds()])
        except Exception as exc:
            with contextlib.suppress(OSError):
                channel.send(orjson.dumps({"error": repr(exc)}))
            channel.close()
            continue
        finally:
            os.close(fds[1])
        with contextlib.suppress(OSError):
            channel.send(orjson.dumps({"pid": pid}))
        children.add(pid, channel)


def main() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a terminal's Ctrl-C is for the owner
    _preload()
    if threading.active_count() != 1:
        raise SystemExit("fork server: an import started a thread; not forking")
    control = socket.socket(fileno=int(sys.argv[1]))
    control.send(b"ready")
    serve(control)


if __name__ == "__main__":
    main()
