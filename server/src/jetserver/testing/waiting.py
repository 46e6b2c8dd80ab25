"""Bounded polling on a condition: the kit's one way to wait for something that has no event.

    wait_until(lambda: path.exists(), 10, "ready file")            # blocking
    await wait_until_async(lambda: client.leader(), 10, "a leader")  # async (sync or async
                                                                     # predicate)

Both return the seconds the wait took, and raise :class:`WaitTimeout` (an AssertionError, so a
test reports it as a failure) naming what did not happen in time.

:func:`reap` bounds the wait for a child process to exit (then SIGKILL by its PID).
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable
from typing import Any, Protocol

import anyio

__all__ = [
    "DEFAULT_INTERVAL_S",
    "WaitTimeout",
    "reap",
    "wait_until",
    "wait_until_async",
]

DEFAULT_INTERVAL_S = 0.02
"""Pause between two checks of the condition."""


class Process(Protocol):
    """A child process as :func:`reap` needs it (``subprocess.Popen`` is one)."""

    def wait(self, timeout: float | None = None) -> int:
        """Its exit code once it ended (``subprocess.TimeoutExpired`` after ``timeout``)."""
        ...

    def kill(self) -> None:
        """SIGKILL."""
        ...


class WaitTimeout(AssertionError):
    """A condition did not become true in time (or a process did not start or stop)."""


def reap(proc: Process, timeout_s: float) -> int:
    """Wait up to ``timeout_s`` for ``proc`` to exit (asked to already, or ending by
    itself); if it has not, SIGKILL it (by its PID) and wait as long again. Its exit code.

    Raises:
        subprocess.TimeoutExpired: it did not end even after SIGKILL.
    """
    try:
        return proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        return proc.wait(timeout=timeout_s)


def wait_until(
    predicate: Callable[[], object],
    timeout_s: float,
    what: str,
    *,
    interval_s: float = DEFAULT_INTERVAL_S,
) -> float:
    """Call ``predicate`` until it returns something truthy; return the seconds it took.

    Raises:
        WaitTimeout: not truthy within ``timeout_s`` (the message names ``what``).
    """
    start = time.monotonic()
    deadline = start + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise WaitTimeout(f"{what}: not within {timeout_s} s")
        time.sleep(interval_s)
    return time.monotonic() - start


async def wait_until_async(
    predicate: Callable[[], Any],
    timeout_s: float,
    what: str,
    *,
    interval_s: float = DEFAULT_INTERVAL_S,
) -> float:
    """Await ``predicate()`` (a plain or async callable) until truthy; return the seconds it
    took. Works under asyncio and trio.

    Raises:
        WaitTimeout: not truthy within ``timeout_s``.
    """
    start = time.monotonic()
    deadline = start + timeout_s
    while True:
        value = predicate()
        if hasattr(value, "__await__"):
            value = await value
        if value:
            return time.monotonic() - start
        if time.monotonic() > deadline:
            raise WaitTimeout(f"{what}: not within {timeout_s} s")
        await anyio.sleep(interval_s)
