"""Who waits for one partition replica's high watermark to move (:class:`HwWaits`).

Parked fetches (:meth:`HwWaits.wait_for_hw_above`), ALL acks waiting for their commit
(:meth:`HwWaits.wait_moved`, through :meth:`Committer.wait_committed
<jetserver.broker.commit.Committer.wait_committed>`) and tailing FetchStreams that write
their next answer themselves (:meth:`HwWaits.add_tail_pusher`) are woken here when the HW
moves, the replica stops, or its role ends. The committer that moves the HW calls
:meth:`HwWaits.wake`.

Task safety: event loop thread only.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import attrs

from jetserver.broker.replica_base import ReplicaBase
from jetserver.infra.lazy_event import LazyEvent

__all__ = ["HwWaits"]


@attrs.define(eq=False, repr=False)
class HwWaits:
    """The waits on one partition replica's HW (module docstring)."""

    base: ReplicaBase
    """The replica's log and lifecycle (read only here)."""
    running_loop: Callable[[], asyncio.AbstractEventLoop]
    """The loop the replica runs on (its committer's lookup, cached there)."""
    fetch_waiters: int = 0
    """Fetches parked waiting for the HW to move."""
    roles_ended: int = 0
    """Roles this replica ended (:meth:`role_ended`): a parked fetch returns when it
    changes, so that a fetch parked under a leadership that ended is answered at once."""
    _hw_moved: LazyEvent = attrs.field(factory=LazyEvent)
    _tail_pushers: list[Callable[[], bool]] | None = None
    """Tailing FetchStreams parked here that write their next answer from the turn that
    moves the HW (:meth:`add_tail_pusher`); None while there are none (an idle
    partition holds no list)."""

    def wake(self) -> None:
        """Wake every fetch waiting on this partition (HW move, stop, shutdown). The tail
        pushers are called first, in this turn: each writes its stream's next answer
        itself and stays (True) or wakes its task and is dropped (False)."""
        pushers = self._tail_pushers
        if pushers:
            self._tail_pushers = [push for push in pushers if push()] or None
        event = self._hw_moved
        if event.has_waiters():  # else it stays, unset: nobody to wake, none to make
            self._hw_moved = LazyEvent()
            event.set()

    def add_tail_pusher(self, push: Callable[[], bool]) -> None:
        """Have :meth:`wake` call ``push`` (a parked tailing FetchStream,
        :meth:`jetserver.broker.fetch_stream.FetchStream.next_tail`) until it returns
        False or :meth:`drop_tail_pusher`."""
        if self._tail_pushers is None:
            self._tail_pushers = [push]
        else:
            self._tail_pushers.append(push)

    def drop_tail_pusher(self, push: Callable[[], bool]) -> None:
        """Stop calling ``push`` (a no-op if it is not called any more)."""
        pushers = self._tail_pushers
        if pushers is not None and push in pushers:
            pushers.remove(push)
            if not pushers:
                self._tail_pushers = None

    def role_ended(self) -> None:
        """The replica's role ended (leader, follower, or single): wake every parked fetch
        and end its wait, whether or not the HW moved (its caller checks the new role)."""
        self.roles_ended += 1
        self.wake()

    async def wait_moved(self, timeout_s: float) -> bool:
        """Wait for the next :meth:`wake`: True, or False once ``timeout_s`` passed."""
        return await self._hw_moved.wait_within(timeout_s, self.running_loop())

    async def wait_for_hw_above(
        self, offset: int, timeout_s: float, stop: Callable[[], bool] | None = None
    ) -> None:
        """Return when the HW passes ``offset``, the partition stops, its role ends
        (:meth:`role_ended`), ``stop()`` is true after a wake-up (:meth:`wake`), or
        ``timeout_s`` passes."""
        self.fetch_waiters += 1
        try:
            deadline = time.monotonic() + timeout_s
            life = self.base.life
            roles_ended = self.roles_ended
            while (
                self.base.log.high_watermark <= offset
                and not life.closed
                and not life.stopping
                and self.roles_ended == roles_ended
                and (stop is None or not stop())
            ):
                left = deadline - time.monotonic()
                if left <= 0 or not await self.wait_moved(left):
                    return
        finally:
            self.fetch_waiters -= 1
