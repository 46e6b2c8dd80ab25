"""Run the `jet` command against a `jet dev` (JET_SERVERS set from it): in this process
(:func:`jet`, for tests of what a command prints and returns) or as a child process
(:func:`jet_process`, for tests of the process itself: the server, `jet dev`, benchmarks).

In this process, ``jetserver.cli.main.main`` runs with the command's environment, stdin,
stdout and stderr swapped in, and its exit code as a child's would be (``SystemExit``
codes; an uncaught exception prints its traceback and gives 1, as ``python -m`` does). A
child process costs about 0.6 s of CPU to start and import the CLI (2-core VM), about 80
of them per suite run; in process the modules are imported once per worker.
"""

from __future__ import annotations

import io
import os
import subprocess
import sys
import threading
import traceback
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Protocol

TIMEOUT_S = 120
IN_PROCESS = frozenset({"stream", "pub", "sub", "table", "share", "cluster", "bench"})
"""Commands :func:`jet` runs in this process: clients that print and return (``server``,
``dev``, ``console`` and ``top`` own processes, signals or a terminal). ``bench`` is one
too: it runs its publishers and subscribers as tasks of one event loop and imports
matplotlib only for ``--plot`` (tests/cli/test_bench_faults.py runs it as a child, to kill
servers under it)."""
_swap = threading.Lock()
"""One in-process command at a time swaps the process's environment and streams."""


class Servers(Protocol):
    """Anything with the servers' addresses (a `jet dev`, a test's cluster view)."""

    servers: list[str]


def jet_env(dev: Servers | None) -> dict[str, str]:
    """The environment for `jet`: JET_SERVERS from ``dev`` (unset without one)."""
    env = dict(os.environ)
    env.pop("JET_SERVERS", None)
    if dev is not None:
        env["JET_SERVERS"] = ",".join(dev.servers)
    return env


def jet(
    dev: Servers | None,
    *args: str,
    stdin: bytes | None = None,
    env: Mapping[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """``jet ARGS`` with ``stdin`` as its input if given and ``env`` added to its
    environment: in this process for the commands of :data:`IN_PROCESS`, else as
    :func:`jet_process`."""
    if not args or args[0] not in IN_PROCESS:
        return jet_process(dev, *args, stdin=stdin, env=env)
    from jetserver.cli.main import main

    with _swap, _swapped({**jet_env(dev), **(env or {})}, stdin or b"") as (out, err):
        try:
            code: object = main(list(args))
        except SystemExit as exc:
            code = exc.code
        except Exception:  # as `python -m` would: the traceback, exit code 1
            traceback.print_exc()
            code = 1
        if code is None:
            code = 0
        elif not isinstance(code, int):  # sys.exit("message"): printed, exit code 1
            print(code, file=sys.stderr)
            code = 1
        sys.stdout.flush()
        sys.stderr.flush()
        texts = _text(out), _text(err)
    return subprocess.CompletedProcess(["jet", *args], code, *texts)


def jet_process(
    dev: Servers | None,
    *args: str,
    stdin: bytes | None = None,
    env: Mapping[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """``jet ARGS`` as a child process (bounded by TIMEOUT_S), with ``stdin`` as its input
    if given and ``env`` added to its environment."""
    return subprocess.run(
        [sys.executable, "-m", "jetserver.cli.main", *args],
        input=stdin.decode() if stdin is not None else None,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        env={**jet_env(dev), **(env or {})},
        check=False,
    )


@contextmanager
def _swapped(env: dict[str, str], stdin: bytes) -> Iterator[tuple[io.BytesIO, io.BytesIO]]:
    """``os.environ`` = ``env`` and fresh standard streams (stdin reading ``stdin``);
    yields the bytes written to stdout and stderr; everything restored after."""
    saved_env = dict(os.environ)
    saved = sys.stdin, sys.stdout, sys.stderr
    out, err = io.BytesIO(), io.BytesIO()
    os.environ.clear()
    os.environ.update(env)
    sys.stdin = io.TextIOWrapper(io.BytesIO(stdin), encoding="utf-8")
    sys.stdout = io.TextIOWrapper(out, encoding="utf-8", write_through=True)
    sys.stderr = io.TextIOWrapper(err, encoding="utf-8", write_through=True)
    try:
        yield out, err
    finally:
        sys.stdin, sys.stdout, sys.stderr = saved
        os.environ.clear()
        os.environ.update(saved_env)


def _text(buffer: io.BytesIO) -> str:
    """What was written, as ``subprocess.run(text=True)`` gives it (universal newlines)."""
    text = buffer.getvalue().decode("utf-8", errors="replace")
    return text.replace("\r\n", "\n").replace("\r", "\n")


def ok(proc: subprocess.CompletedProcess[str]) -> str:
    """Its stdout, after checking the exit code was 0."""
    assert proc.returncode == 0, f"rc={proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout
