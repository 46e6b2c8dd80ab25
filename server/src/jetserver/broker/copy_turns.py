"""A partition's order of NATS copies: each request's copies after the previous one's.

A partition with one replica publishes the NATS copies of the records a Produce request
stored directly after the response, once committed (broker/direct_copies.py). Requests
take numbered turns as their batches enter the sequencer (so in append order) and finish
them once their copies went or were given up; a request's copies wait until every earlier
turn finished. At light load a request finds every earlier turn finished: then taking,
checking and finishing its turn is counting, with no future made, awaited or completed
(they were one future per request, with its callbacks, on every message's way). A future
is made only for a turn that must wait.

Task safety: event loop thread only.
"""

from __future__ import annotations

import asyncio

import attrs

__all__ = ["CopyTurns"]


@attrs.define(eq=False)
class CopyTurns:
    """Numbered turns of one partition's NATS copies (see the module docstring)."""

    _taken: int = 0
    """Turns handed out (the next turn's number)."""
    _done: int = 0
    """Every turn below this one is finished."""
    _early: set[int] = attrs.field(factory=set)
    """Turns finished while an earlier one was not (their copies given up, or published
    after waiting too long for their turn)."""
    _waiters: dict[int, asyncio.Future[bool]] = attrs.field(factory=dict)
    """Turns waiting for every earlier one to finish: True once they did, False on the
    wait's timeout."""

    def take(self) -> int:
        """The next turn (as a request's batch enters the sequencer)."""
        turn = self._taken
        self._taken = turn + 1
        return turn

    def all_finished(self) -> bool:
        """True if every turn taken is finished: a copy that goes now, in the step that
        appended its record, is in order without a turn of its own."""
        return self._taken == self._done

    def is_next(self, turn: int) -> bool:
        """True if every turn before ``turn`` is finished."""
        return turn == self._done

    async def wait(
        self, turn: int, timeout_s: float, loop: asyncio.AbstractEventLoop | None = None
    ) -> bool:
        """Wait until every turn before ``turn`` is finished, up to ``timeout_s``: True
        then, False if not by then. ``loop``: the running loop, if the caller knows it.

        A bare future and one timer (``asyncio.wait`` made a set, a waiter future, a timer
        and a done callback per wait, and looked the loop up twice, a getpid each on
        Python 3.11: about a third of the requests of ``bench light`` at load 15 wait
        here, their answers' copies overlapping)."""
        if turn <= self._done:
            return True
        waiter = self._waiters.get(turn)
        if waiter is None:
            if loop is None:
                loop = asyncio.get_running_loop()
            waiter = self._waiters[turn] = loop.create_future()
        timer = waiter.get_loop().call_later(timeout_s, _expire, waiter)
        try:
            return await waiter
        finally:
            timer.cancel()
            if self._waiters.get(turn) is waiter:
                del self._waiters[turn]

    def finish(self, turn: int, *, overtake: bool = False) -> None:
        """``turn``'s copies went or were given up: the next turns may go once every
        earlier one finished too. ``overtake``: they went without waiting for every
        earlier turn (the wait timed out), so the later ones need not wait for those
        either (as the earlier turns then finish, nothing changes)."""
        done = self._done
        if turn == done and not self._early and not self._waiters:  # (light load: all)
            self._done = turn + 1
            return
        if turn < done:
            return
        if turn == done or overtake:
            done = turn + 1
            early = self._early
            if early:
                self._early = {t for t in early if t >= done}
                while done in self._early:
                    self._early.discard(done)
                    done += 1
            self._done = done
            waiters = self._waiters
            if waiters:
                for due in [t for t in waiters if t <= done]:
                    waiter = waiters.pop(due)
                    if not waiter.done():
                        waiter.set_result(True)
        else:
            self._early.add(turn)


def _expire(waiter: asyncio.Future[bool]) -> None:
    if not waiter.done():
        waiter.set_result(False)
