"""The wait of a parked ReplicaFetch request at the leader (broker/replica_fetch.py serves
the request): in callbacks, with no task of its own.

A request parked until one of its partitions has news, its session is woken or its long
poll ends (:class:`ParkedFetch`) ends its task there (:class:`HeldFetch`: its connection
keeps it in flight, protocol/held.py). What ends the wait runs in plain callbacks: a
partition's possible news in the turn that made it (:meth:`ParkedFetch.poke`), a session
wake (:class:`SessionWakers`), the timer of the long poll's end or of a HW falling due.
Then:

- a request parked on one partition whose news is small records or a HW, or whose long
  poll ends, is answered by a plain callback (at the start of the turn after the news,
  or the timer's), written by its connection at once: the request is over with no task
  step at all (before, its task woke once more only to end it: two task wake-ups at the
  leader per RF 3 message);
- anything else (news on a request parked on many partitions, a wake, records too big
  to read on the loop, a frame the socket did not take at once, an error) resumes the
  request in a task (:meth:`HeldFetch.resume`), which answers as the request's own task
  did after its wait.

Without a connection to hold it (``hold`` None) the request's own task waits for the same
outcome on a future.

Task safety: event loop only.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Awaitable, Callable
from typing import Protocol

import attrs

from jetsdk.codec.replica_fetch import RESPONSE_POLL_ENDED, ReplicaFetchAnswer
from jetserver.broker.replica_answers import (
    SENT,
    Built,
    ReplicaFetchReply,
    choose_answers,
    finish_reply,
    has_news,
    polls_ended,
    read_all,
)
from jetserver.broker.replica_sessions import LeaderSession, LeaderSessions, Slot
from jetserver.broker.streams import StreamManager
from jetserver.infra import hops
from jetserver.storage.read_slices import ReadSlices

MAX_NEWS_WAITS = 64
"""Bound on one request's waits: each ends with news, a wake, the HW delay or the long poll's
end (a wait that ends with nothing due, a timer a little early, waits again)."""
MAX_EARLY_WAKES = 1024
"""Wakes remembered for sessions with no parked request (the oldest are forgotten)."""
ANSWER_HERE_MAX_BYTES = 64 * 1024
"""Most record bytes of an answer read and written by the callback after its news (a parked lone
partition's); a bigger one is sent by a task (``os.sendfile``)."""

TIMER_SLACK_S = 0.001
"""A long poll's timer that fires this close to its end has ended it (a loop's timers may run
a clock tick early)."""

Rest = Callable[[], Awaitable[ReplicaFetchReply]]
"""What is left of a request once its wait ended: its reply."""
Then = Callable[[bool, float], Awaitable[ReplicaFetchReply]]
"""A parked request's answer after its wait: (the long poll ended, seconds parked)."""


class HeldFetch(Protocol):
    """A request's connection's side of its wait with no task (protocol/held.py)."""

    def hold(self, cancel: Callable[[], None]) -> None:
        """The request's task ends now and its wait goes on (counted in flight);
        ``cancel`` ends the wait if the connection ends first."""

    def answered(self) -> None:
        """Its answer went (written from a callback): the request is over."""

    def resume(self, rest: Rest) -> None:
        """Its reply comes from ``rest``, in a task, written as its own task's would be."""


@attrs.frozen
class AnswerHere:
    """What answering a parked request from the callback after its news takes
    (:meth:`ParkedFetch.poke`)."""

    streams: StreamManager
    slots: dict[int, Slot]
    """The request's session's partitions (an answer with an error leaves them)."""
    budget: int
    """The request's byte budget."""
    write: Callable[[ReplicaFetchReply], bool]
    """Writes a whole reply (records in memory) now: False if a task must."""


@attrs.define(eq=False)
class SessionWakers:
    """The leader's parked ReplicaFetch request per follower session, to wake it.

    A wake that finds no parked request (it overtook the request it was meant for) is
    remembered: the session's next request then answers at once.
    """

    _parked: dict[int, ParkedFetch] = attrs.field(factory=dict)
    _early: dict[int, float] = attrs.field(factory=dict)

    def park(self, session_id: int, parked: ParkedFetch) -> None:
        """``parked`` is the session's request now being served: a wake ends it."""
        if self._early.pop(session_id, None) is not None:
            parked.wake()
        self._parked[session_id] = parked

    def unpark(self, session_id: int, parked: ParkedFetch) -> None:
        """The request of ``parked`` is answered."""
        if self._parked.get(session_id) is parked:
            del self._parked[session_id]

    def wake(self, session_id: int) -> None:
        """End the session's parked request (or its next one)."""
        parked = self._parked.get(session_id)
        if parked is not None:
            parked.wake()
            return
        self._early[session_id] = time.monotonic()
        while len(self._early) > MAX_EARLY_WAKES:
            del self._early[next(iter(self._early))]


@attrs.frozen
class SessionEnd:
    """What a request's end does to its session: it leaves the wakers; a failed one
    drops the session (the follower starts afresh)."""

    wakers: SessionWakers
    sessions: LeaderSessions
    session: LeaderSession

    def close(self, parked: ParkedFetch, failed: bool) -> None:
        self.wakers.unpark(self.session.session_id, parked)
        if failed:
            self.sessions.forget(self.session)


@attrs.define(eq=False)
class ParkedFetch:
    """One ReplicaFetch request's wait (module docstring).

    A partition's possible news (records appended, the HW moved, the leader's flush, the
    end of the leadership) reaches the request through :meth:`poke`, in the turn that made
    it: the wait ends only for news it answers now. A HW not due yet (it has been parked
    less than ``hw_news_delay_s``) brings the wait's end forward to when it is due instead
    (at light load, the leader's flush and the HW move of every message ended a follower's
    parked fetch that then parked again)."""

    woken: bool = False
    """A session wake ended the wait (or came before it began)."""
    live: list[Slot] = attrs.field(factory=list)
    """The request's partitions that passed the checks (set while it waits)."""
    start: float = 0.0
    """When the wait began (the loop's clock)."""
    loop: asyncio.AbstractEventLoop | None = None
    """The running loop while the request waits (None: it does not)."""
    end: float = math.inf
    """When the long poll ends (the loop's clock)."""
    here: AnswerHere | None = None
    """How to answer a lone partition's request from the callback after its news (None: a
    task answers)."""
    ends: SessionEnd | None = None
    """Its session's side of the request's end."""
    _held: HeldFetch | None = None
    _then: Then | None = None
    _answer_due: bool = False
    """The callback that answers here is on its way."""
    _over_due: bool = False
    """:meth:`_wait_over` is on its way."""
    _waits: int = 0
    _timer: asyncio.TimerHandle | None = None

    def park(
        self,
        live: list[Slot],
        timeout_s: float,
        then: Then,
        held: HeldFetch,
        loop: asyncio.AbstractEventLoop,
    ) -> None:
        """Wait (in callbacks) until a partition of ``live`` has news, a wake or
        ``timeout_s``; then ``held`` is answered or resumed with ``then``'s reply."""
        self.live, self.loop, self._held, self._then = live, loop, held, then
        self.start = loop.time()
        self.end = self.start + timeout_s
        for e in live:
            e.replica.add_news_waker(self)
        if self.woken:  # an early wake
            self._over_soon()
        else:
            self._arm(0.0)

    def wake(self) -> None:
        self.woken = True
        if self.loop is not None:
            self._over_soon()

    def cancel(self) -> None:
        """The request's connection ended while it waits: the wait ends, unanswered, and
        so does the long poll that kept its followers caught up (spec/cluster.md, "ISR
        changes": a follower killed while parked leaves the ISR a lag bound after its
        connection closed, as it did after its fetch was answered, with records, when its
        request's task still waited for them)."""
        if self.loop is not None:
            self._stop()
            polls_ended(self.live)
            if self.ends is not None:
                self.ends.close(self, True)

    def poke(self) -> None:
        """A partition of the request may have news: end the wait if one has news to answer
        now (a lone partition's answered from a callback next turn); else, if a HW it has
        not been sent falls due before the wait ends, end the wait then."""
        loop = self.loop
        if loop is None or self._over_due or self._answer_due:
            return
        now = loop.time()
        parked_s = now - self.start
        if any(has_news(e, parked_s) for e in self.live):
            if self.here is not None and len(self.live) == 1 and not self.woken:
                self._answer_due = True
                loop.call_soon(self._answer_here)
            else:
                self._over_soon()
            return
        due = hw_due_s(self.live, parked_s)
        if due is not None and now + due < self._due_at():
            self._at(now + due)

    def _answer_here(self, ended: bool = False, then: Rest | None = None) -> None:
        """Answer the parked request of a lone partition from a plain callback at the start
        of the turn after its news (the append's), or from its timer's (a HW fallen due,
        the long poll's end: ``ended``), if its records are small and the connection takes
        the frame now: the request is over with no task; else a task sends what was
        chosen (``then``: the task's answer if none is due after all). Not in the append's
        own turn: what else that turn appends (the other Produce requests read with it)
        goes in the same answer."""
        self._answer_due = False
        if self.loop is None or self._over_due:
            return
        here = self.here
        assert here is not None
        replica = self.live[0].replica
        if replica.closed or replica.life.ending:
            self._wait_over()  # the leadership or the replica ended: a task answers
            return
        parked_s = self.loop.time() - self.start
        try:
            answers, unread = choose_answers(
                here.streams, self.live, here.slots, parked_s, here.budget, ended
            )
        except Exception as exc:  # (as the task would have raised it)
            self._finish(_raising(exc))
            return
        flags = RESPONSE_POLL_ENDED if ended else 0
        if not answers and not ended:
            if then is not None:
                self._finish(then)  # (as from the timer before: the task answers)
            else:
                self._wait_over()  # nothing due any more: it waits on
            return
        if sum(r.length for r in unread.values()) > ANSWER_HERE_MAX_BYTES:
            self._finish(_built(answers, unread, flags))
            return
        try:
            answers = read_all(answers, unread)
            sent = here.write(ReplicaFetchReply(answers, flags=flags))
        except Exception as exc:
            self._finish(_raising(exc))
            return
        self._finish(None if sent else _built(answers, {}, flags))

    def _over_soon(self) -> None:
        """:meth:`_wait_over` in a callback of its own (once), as a task's wake-up was."""
        if not self._over_due and self.loop is not None:
            self._over_due = True
            self.loop.call_soon(self._wait_over)

    def _wait_over(self) -> None:
        """The wait may be over (news, a wake, a timer): resume the request with its
        answer, or wait on (nothing due: a timer a little early)."""
        self._over_due = False
        loop = self.loop
        if loop is None:
            return
        parked_s = loop.time() - self.start
        then = self._then
        assert then is not None
        if self.woken or any(has_news(e, parked_s) for e in self.live):
            if self._lone():  # a HW fallen due: answered here
                self._answer_here(then=lambda: then(False, parked_s))
                return
            if hops.ENABLED and not self.woken:
                hops.mark("rf.woken")
            self._finish(lambda: then(False, parked_s))
        elif loop.time() + TIMER_SLACK_S >= self.end or self._waits >= MAX_NEWS_WAITS:
            if self._lone():  # the long poll's end: answered here
                self._answer_here(True)
                return
            self._finish(lambda: then(True, parked_s))
        else:
            self._arm(parked_s)

    def _lone(self) -> bool:
        """A lone partition's request, its replica on, that a callback may answer."""
        if self.here is None or len(self.live) != 1 or self.woken:
            return False
        replica = self.live[0].replica
        return not (replica.closed or replica.life.ending)

    def _finish(self, rest: Rest | None) -> None:
        """The wait is over: answered (``rest`` None) or ``rest`` gives the reply."""
        self._stop()
        held = self._held
        assert held is not None
        if rest is None:
            if self.ends is not None:
                self.ends.close(self, False)
            held.answered()
            return
        held.resume(lambda: self._closing(rest))

    async def _closing(self, rest: Rest) -> ReplicaFetchReply:
        """``rest``'s reply, the session's side of the request's end after it."""
        if hops.ENABLED:
            hops.mark("rf.wait")  # (a task step after the wait: counted as a wake-up)
        failed = True
        try:
            reply = await rest()
            failed = False
            return reply
        finally:
            if self.ends is not None:
                self.ends.close(self, failed)

    def _stop(self) -> None:
        self.loop = None
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        for e in self.live:
            e.replica.remove_news_waker(self)

    def _arm(self, parked_s: float) -> None:
        """Wait (again) until the long poll's end or a HW falling due, whichever first."""
        self._waits += 1
        loop = self.loop
        assert loop is not None
        at = self.end
        due = hw_due_s(self.live, parked_s)
        if due is not None:
            at = min(at, loop.time() + due)
        self._at(at)

    def _due_at(self) -> float:
        timer = self._timer
        return timer.when() if timer is not None else self.end

    def _at(self, at: float) -> None:
        loop = self.loop
        assert loop is not None
        if self._timer is not None:
            self._timer.cancel()
        self._timer = loop.call_at(at, self._over_soon)


@attrs.define(eq=False)
class OwnTask:
    """:class:`HeldFetch` for a request with no connection to hold it: its own task waits
    for the outcome (:meth:`outcome`)."""

    future: asyncio.Future[Rest | None]

    def hold(self, cancel: Callable[[], None]) -> None:
        pass

    def answered(self) -> None:
        if not self.future.done():
            self.future.set_result(None)

    def resume(self, rest: Rest) -> None:
        if not self.future.done():
            self.future.set_result(rest)

    async def outcome(self, parked: ParkedFetch) -> ReplicaFetchReply:
        """The reply once the wait of ``parked`` ended (cancelled: the wait too)."""
        try:
            rest = await self.future
        except BaseException:
            parked.cancel()
            raise
        return SENT if rest is None else await rest()


def hw_due_s(live: list[Slot], parked_s: float) -> float | None:
    """Seconds until the earliest HW news of ``live`` is due (None: none has any)."""
    due: float | None = None
    for e in live:
        d = e.replica.replica_hw_news_due_s(e.follower, parked_s)
        if d is not None and (due is None or d < due):
            due = d
    return due


def _built(answers: list[ReplicaFetchAnswer], unread: dict[int, ReadSlices], flags: int) -> Rest:
    """The reply of answers chosen in a callback, not written: their records read (or
    sent from their files) by a task, with the response's ``flags``."""
    built: Built = (answers, unread)
    return lambda: finish_reply(*built, flags)


def _raising(exc: Exception) -> Rest:
    """A rest that raises ``exc`` (choosing the answers in a callback raised it)."""

    async def raised() -> ReplicaFetchReply:
        raise exc

    return raised
