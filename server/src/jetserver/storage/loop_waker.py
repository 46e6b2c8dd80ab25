"""Calls from worker threads to an event loop, run from the loop's reader callback of an
eventfd (:class:`LoopWaker`): in the loop's I/O phase, as a socket's data is, not as a
ready callback.

``call_soon_threadsafe`` queues its callback as ready work: on uvloop that runs in the
next iteration's idle phase, and whatever it schedules in turn (``call_soon``: a NATS
copy's write at the turn's end, ``natslink/write.py``) keeps the loop from sleeping once
more, one more ``epoll_pwait`` (timeout 0) and iteration per fsync handed to a thread
(``python -m bench cost``, ``turns``: a ``flushed`` message whose fsync ran in a thread
found work ready in 1.08 loop iterations, docs/latency.md). From a reader callback the
``call_soon`` work runs in the next iteration's idle phase before it polls: no iteration
of its own. The system calls are the same as ``call_soon_threadsafe``'s (the thread's
``write`` of the eventfd, the loop's ``read``), and as it does, a thread writes only when
no wake-up is pending.

The loop reads the eventfd *before* it clears its pending mark: cleared first, a call made
between the two saw no wake-up pending and wrote one that this read consumed, the mark
stayed set with nothing left to read, and no later call woke the loop again (a split
sync's end lost, and with it every later thread's outcome: the hang of session 23's
merged tree, tests/storage/test_loop_waker.py, test_split_sync_race.py).

Task safety: :meth:`LoopWaker.call` from any thread; the rest on the loop's thread.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import os
import weakref
from collections.abc import Callable
from typing import Any

__all__ = ["LoopWaker", "waker_of"]

log = logging.getLogger(__name__)

_WAKERS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, LoopWaker] = (
    weakref.WeakKeyDictionary()
)


class LoopWaker:
    """Runs calls made from other threads in the loop's reader callback of an eventfd."""

    __slots__ = ("__weakref__", "_calls", "_fd", "_posted")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        # (no reference to the loop: the map of wakers holds the loop weakly)
        self._fd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        self._calls: collections.deque[tuple[Callable[..., None], tuple[Any, ...]]] = (
            collections.deque()
        )
        self._posted = False
        """A wake-up is written and not read yet (the next call writes none)."""
        loop.add_reader(self._fd, self._drain)
        weakref.finalize(self, os.close, self._fd)

    def call(self, fn: Callable[..., None], *args: Any) -> None:
        """``fn(*args)`` on the loop, from its reader callback (any thread). Nothing
        happens if the loop is closed."""
        self._calls.append((fn, args))
        if not self._posted:
            self._posted = True
            with contextlib.suppress(OSError):
                os.eventfd_write(self._fd, 1)

    def _drain(self) -> None:
        with contextlib.suppress(BlockingIOError):
            os.eventfd_read(self._fd)
        self._posted = False  # after the read: a call from here on writes again
        calls = self._calls
        while calls:
            fn, args = calls.popleft()
            try:
                fn(*args)
            except Exception:  # (as a loop callback's: logged, the rest still run)
                log.exception("a call from a worker thread failed")


def waker_of(loop: asyncio.AbstractEventLoop) -> LoopWaker | None:
    """``loop``'s waker (made on first use, on the loop's thread); None where the loop
    cannot watch an eventfd (not Linux, a loop without ``add_reader``): the caller uses
    ``call_soon_threadsafe``."""
    waker = _WAKERS.get(loop)
    if waker is None:
        if not hasattr(os, "eventfd"):
            return None
        try:
            waker = LoopWaker(loop)
        except (NotImplementedError, OSError, RuntimeError):
            return None
        _WAKERS[loop] = waker
    return waker
