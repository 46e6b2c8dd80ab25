"""The watchdog of ``jet dev``: ends what ``jet dev`` started when ``jet dev`` itself dies.

``jet dev`` stops its nats-server and jet servers and removes its temporary directory on
Ctrl-C, SIGTERM and SIGHUP. A SIGKILL (or a crash) gives it no chance to, so it starts this
small process first, in a session of its own, with a pipe on its standard input, and tells
it over that pipe (one line each)::

    root PATH        the directory every child runs in; removed at the end if
    temporary        ... it is a temporary one
    pid N            a process jet dev started
    done             jet dev cleaned up itself: exit without doing anything

End of input without ``done`` means ``jet dev`` is gone. The watchdog then sends SIGTERM to
each process it was told of and to every process whose command line names the root (a
child spawned before jet dev could report it), waits for them a bounded time, sends SIGKILL
to what is left, and removes a temporary root.

Linux only for the /proc scan; elsewhere only the reported PIDs are ended.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import sys
import time
from collections.abc import Iterable
from pathlib import Path
from typing import TextIO

STOP_GRACE_S = 10.0
"""How long the children get to stop after SIGTERM before SIGKILL."""
_POLL_S = 0.05


def _started_at(pid: int) -> str | None:
    """The start time of ``pid`` (field 22 of /proc/PID/stat), to tell a reused PID apart;
    None if the process is gone. "" where /proc is not there (no check possible)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return None if Path("/proc/self").exists() else ""
    except OSError:
        return None
    return stat.rsplit(")", 1)[-1].split()[19]


def _naming(root: str) -> list[int]:
    """PIDs of processes (other than this one) whose command line mentions ``root``."""
    found = []
    me = os.getpid()
    try:
        entries = os.listdir("/proc")
    except OSError:
        return []
    needle = root.encode()
    for entry in entries:
        if not entry.isdigit() or int(entry) == me:
            continue
        try:
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
        except OSError:
            continue
        if needle in cmdline:
            found.append(int(entry))
    return found


def _signal_all(pids: Iterable[tuple[int, str | None]], sig: signal.Signals) -> None:
    for pid, started in pids:
        if started is not None and _started_at(pid) == started:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)


def end_children(pids: Iterable[int], root: str | None, grace_s: float = STOP_GRACE_S) -> None:
    """SIGTERM ``pids`` and every process naming ``root``; SIGKILL what is left after
    ``grace_s``."""
    targets = set(pids)
    if root:
        targets.update(_naming(root))
    known = [(pid, _started_at(pid)) for pid in sorted(targets)]
    _signal_all(known, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        known = [(pid, s) for pid, s in known if s is not None and _started_at(pid) == s]
        if not known:
            return
        time.sleep(_POLL_S)
    _signal_all(known, signal.SIGKILL)


def watch(lines: TextIO) -> int:
    """Read the reports of ``jet dev`` until end of input; clean up unless told ``done``."""
    pids: list[int] = []
    root: str | None = None
    temporary = False
    for line in lines:
        word, _, rest = line.strip().partition(" ")
        if word == "done":
            return 0
        if word == "root":
            root = rest
        elif word == "temporary":
            temporary = True
        elif word == "pid" and rest.isdigit():
            pids.append(int(rest))
    end_children(pids, root)
    if temporary and root:
        shutil.rmtree(root, ignore_errors=True)
    return 0


def main() -> int:
    """Entry point: ``python -m jetserver.cli.dev_watchdog`` (started by ``jet dev``)."""
    # Ctrl-C in the terminal goes to jet dev's process group, not to this session; ignore
    # it anyway so that only the end of input decides.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    return watch(sys.stdin)


if __name__ == "__main__":
    sys.exit(main())
