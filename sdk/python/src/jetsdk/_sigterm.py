"""SIGTERM closes sync clients cleanly, as Ctrl-C does (hand-written support of jetsdk.sync).

Python's default action for SIGTERM ends the process at once: no ``finally``, no
``__exit__``. A sync group consumer stopped that way (``kill``, ``systemctl stop``, a
container runtime) neither commits its offsets nor leaves its group, so its partitions wait
for the session timeout. While at least one sync client is open in a process, and SIGTERM
still has its default action, jetsdk handles it by raising ``SystemExit(128 + SIGTERM)``
in the main thread: every ``with`` block unwinds and closes as on Ctrl-C, then the process
exits with the status a shell reports for a SIGTERM (143). The default action comes back
when the last client closes. An application that set its own SIGTERM handler keeps it.

Only the main thread can set signal handlers; clients opened in other threads leave
SIGTERM alone.
"""

from __future__ import annotations

import signal
import threading
from types import FrameType

__all__ = ["SIGTERM_EXIT_STATUS", "hold", "release"]

SIGTERM_EXIT_STATUS = 128 + signal.SIGTERM
"""The exit status after a SIGTERM handled here (143 on Linux)."""

_lock = threading.Lock()
_holders = 0
_installed = False


def _on_sigterm(_signum: int, _frame: FrameType | None) -> None:
    raise SystemExit(SIGTERM_EXIT_STATUS)


def hold() -> bool:
    """A sync client opened: handle SIGTERM if nobody else does. Returns True if this call
    counted (pass it to :func:`release`)."""
    global _holders, _installed
    if threading.current_thread() is not threading.main_thread():
        return False
    with _lock:
        _holders += 1
        if not _installed and signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
            signal.signal(signal.SIGTERM, _on_sigterm)
            _installed = True
    return True


def release(held: bool) -> None:
    """A sync client closed (``held`` as :func:`hold` returned it): the last one puts the
    default action back, unless the application replaced the handler meanwhile."""
    global _holders, _installed
    if not held:
        return
    with _lock:
        _holders = max(0, _holders - 1)
        if _holders or not _installed:
            return
        if threading.current_thread() is not threading.main_thread():
            return  # only the main thread may restore it: the next release there will
        if signal.getsignal(signal.SIGTERM) is _on_sigterm:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
        _installed = False
