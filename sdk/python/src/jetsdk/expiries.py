"""The timeouts of the waits for answers, on asyncio: one loop timer for many futures.

A request's wait for its answer is bounded, and nearly every answer comes long before
the bound. A ``call_later`` per wait, cancelled when the answer came, cost about twenty
Python calls a wait (the timer handle, its push on the loop's heap through
``TimerHandle.__lt__``, the cancel, the heap's clean-up of cancelled timers), and a
message at light load has two such waits in the client (its Produce answer, the
consumer's next FetchStream answer). Here the futures waiting with the same timeout
queue in deadline order (the loop's clock only goes forward) and one timer per loop
fires at the earliest deadline, sets what is due False, and is armed again for the next.

A future settled or cancelled before its deadline stays queued until it reaches the
head of its queue: it is dropped there when the next wait of that timeout is queued (the
answers come mostly in the order asked) or when the timer fires. Behind a wait that lasts
(a long poll at the head), a queue is compacted when it has doubled since its last
compaction (:data:`COMPACT_MIN` at least), so it holds about twice the waits pending.

Task safety: one event loop per :class:`_Expiries` (the loop's own, looked up weakly).
"""

from __future__ import annotations

import asyncio
import math
import weakref
from collections import deque

__all__ = ["COMPACT_MIN", "expire_after"]

COMPACT_MIN = 1024
"""A queue shorter than this is not compacted (its settled entries leave at its head)."""


class _Expiries:
    """The futures of one loop waiting with a timeout, and the loop's one timer.

    Holds no reference to the loop (the timer handle, in the loop's own heap, does): the
    weak map from loops to these keeps a closed loop collectable.
    """

    __slots__ = ("__weakref__", "_armed", "_compact_at", "_queues")

    def __init__(self) -> None:
        self._queues: dict[float, deque[tuple[float, asyncio.Future[bool]]]] = {}
        """Per timeout: (deadline, future), deadlines in order."""
        self._compact_at: dict[float, int] = {}
        """Per timeout: the length at which its queue is compacted next."""
        self._armed = math.inf
        """When the live timer fires (inf: none). An earlier timer replaces a later
        one; the later one then does nothing when it fires."""

    def add(
        self, loop: asyncio.AbstractEventLoop, future: asyncio.Future[bool], timeout: float
    ) -> None:
        at = loop.time() + timeout
        queue = self._queues.get(timeout)
        if queue is None:
            queue = self._queues[timeout] = deque()
        else:
            while queue and queue[0][1].done():
                queue.popleft()
            if len(queue) >= self._compact_at.get(timeout, COMPACT_MIN):
                queue = self._queues[timeout] = deque(e for e in queue if not e[1].done())
                self._compact_at[timeout] = max(COMPACT_MIN, 2 * len(queue))
        queue.append((at, future))
        if at < self._armed:
            self._armed = at
            loop.call_at(at, self._fire, loop, at)

    def _fire(self, loop: asyncio.AbstractEventLoop, at: float) -> None:
        if at != self._armed:
            return  # an earlier timer took over
        now = max(loop.time(), at)
        next_at = math.inf
        for timeout, queue in list(self._queues.items()):
            while queue:
                due, future = queue[0]
                if due > now and not future.done():
                    break
                queue.popleft()
                if not future.done():
                    future.set_result(False)
            if queue:
                next_at = min(next_at, queue[0][0])
            else:
                del self._queues[timeout]
                self._compact_at.pop(timeout, None)
        self._armed = next_at
        if next_at < math.inf:
            loop.call_at(next_at, self._fire, loop, next_at)


_LOOPS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Expiries] = (
    weakref.WeakKeyDictionary()
)


def expire_after(future: asyncio.Future[bool], timeout: float) -> None:
    """Set ``future`` False ``timeout`` seconds from now unless it is done by then."""
    loop = future.get_loop()
    try:
        expiries = _LOOPS.get(loop)
        if expiries is None:
            expiries = _LOOPS[loop] = _Expiries()
    except TypeError:  # a loop that takes no weak reference: a timer of its own
        loop.call_later(timeout, _expire, future)
        return
    expiries.add(loop, future, timeout)


def _expire(future: asyncio.Future[bool]) -> None:
    if not future.done():
        future.set_result(False)
