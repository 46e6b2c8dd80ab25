"""Rounds of one operation shared by the callers that wait for it at the same time.

Some operations confirm everything sent before they started: a NATS PING round trip (its
PONG comes after the server processed every earlier command, e.g. the SUB of a new
subscription). A caller needs one such round that *started after it asked*; any number of
callers asking together can share it. :class:`SharedRounds` runs one round at a time: the
callers that ask while a round runs join the next one, which starts as soon as the running
one ends. A failover's thousand new partition leaders each confirmed their subscription
with a PING of its own (0.9 s on average in the role change); sharing, they need two or
three rounds in all.

Task safety: one event loop.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import anyio
import attrs

__all__ = ["ROUND_SLACK_S", "SharedRounds"]

ROUND_SLACK_S = 1.0
"""Added to a caller's bound of two rounds (the loop may be slow to hand over)."""


@attrs.define(eq=False)
class _Round:
    done: anyio.Event = attrs.field(factory=anyio.Event)
    error: Exception | None = None


@attrs.define(eq=False)
class SharedRounds:
    """One round at a time of an operation; callers asking meanwhile share the next."""

    rounds: int = 0
    """Rounds run."""
    _next: _Round | None = None
    """The round the callers asking now wait for (not started)."""
    _running: _Round | None = None

    async def run(self, operation: Callable[[], Awaitable[None]], timeout_s: float) -> None:
        """Wait for a round of the operation that starts after this call (``operation``
        runs it if this caller starts the round; it must bound itself to ``timeout_s``).

        A caller waits for the round running when it asked (if any), then for its own: each
        bounded by its operation, so at most twice ``timeout_s`` in all (a bound of
        ``timeout_s`` on the whole wait made the callers that queued behind a slow round
        fail at once: at a loaded failover, hundreds of new leaders' subscription
        confirmations).

        Raises:
            TimeoutError: no such round ended within twice ``timeout_s`` (an operation
                that did not bound itself).
            Exception: what the round's operation raised (the same object for every
                caller of the round).
        """
        with anyio.fail_after(2 * timeout_s + ROUND_SLACK_S):
            round_ = self._next
            if round_ is None:
                round_ = self._next = _Round()
            while not round_.done.is_set():
                running = self._running
                if running is not None:
                    await running.done.wait()  # started before this caller asked: not its
                    continue
                # No round runs: this caller starts the next one (its own).
                self._next, self._running = None, round_
                self.rounds += 1
                try:
                    with anyio.CancelScope(shield=True):  # the others wait for it
                        await operation()
                except Exception as exc:
                    round_.error = exc
                finally:
                    self._running = None
                    round_.done.set()
        if round_.error is not None:
            raise round_.error
