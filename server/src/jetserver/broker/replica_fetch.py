"""ReplicaFetch (api 13) at the leader: one long poll for many partitions of one follower
server (spec/cluster.md, "Fetch sessions").

This is the one way a follower fetches (a Fetch with ``replica_id >= 0`` is refused). For
each partition of the request: the checks (a replica here, leading in the follower's
``leader_epoch``, a known replica id, the offset in range), the follower's progress
recorded (which may move the HW and the ISR), records up to the leader's LEO (the
follower's fsync runs alongside the leader's; the HW counts both, and a failed fsync's cut
of records sent ends the leader's epoch), the HW sent noted. The wait and the answer:

- the request parks until **any** of its partitions has news (records the follower lacks,
  a HW it has not been sent once the request has been parked ``hw_news_delay_s``, an
  error, the leadership ended), the session is woken
  (:class:`SessionWakers`: a follower with new partitions to add ends its parked request
  with a wake request) or ``max_wait_ms`` passes; its task wakes only then (a partition's
  possible news is checked in the turn that made it: :meth:`_Parked.poke`). A request
  parked on one partition (a follower's session at light load) is answered from a plain
  callback first in the next turn, written by the connection at once; its task then only
  ends it;
- the request is incremental (:mod:`~jetserver.broker.replica_sessions`): it carries the
  partitions new to the follower's session or changed; the others stay parked in the
  session from the last request, and this request is their follower's fetch again (their
  checks run again, and their follower's progress is recorded again: a caught-up follower
  stays caught up while it fetches);
- after news or a wake it answers only the partitions with something to say (a HW not
  due yet and a log start moved since its last answer included, since an answer goes
  out anyway); after ``max_wait_ms`` the
  partitions with news and those not answered since they entered the session or changed,
  flagged ``POLL_ENDED`` (the others wait on in the session: an idle round is an empty
  answer); with ``max_wait_ms`` 0 every partition. A partition left out stays parked
  (its long poll goes on);
- the records of the whole answer are bounded by ``max_bytes`` (and the server's
  ``limits.max_fetch_bytes``); a partition with records that do not fit is left out, never
  answered without its records (an empty answer tells a follower it holds everything the
  leader has).

Task safety: event loop only.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable

import attrs

from jetsdk.codec.replica_fetch import (
    RESPONSE_POLL_ENDED,
    ReplicaFetchAnswer,
    ReplicaFetchRequest,
)
from jetserver.broker.fetch import check_holds_replica
from jetserver.broker.partition import PartitionReplica
from jetserver.broker.replica_answers import (
    SENT,
    Built,
    ReplicaFetchReply,
    answer_each,
    choose_answers,
    due_slots,
    error_answer,
    finish_reply,
    has_news,
    out_of_range,
    polls_ended,
    read_all,
)
from jetserver.broker.replica_sessions import LeaderSession, LeaderSessions, Slot
from jetserver.broker.streams import StreamManager
from jetserver.config.server import LimitsConfig
from jetserver.errors import ApiError
from jetserver.infra import hops
from jetserver.infra.lazy_event import LazyEvent
from jetserver.storage import StorageError

MAX_NEWS_WAITS = 64
"""Bound on one request's waits: each ends with news, a wake, the HW delay or the long poll's
end (a wait that ends with nothing due, a timer a little early, waits again)."""
MAX_EARLY_WAKES = 1024
"""Wakes remembered for sessions with no parked request (the oldest are forgotten)."""
ANSWER_HERE_MAX_BYTES = 64 * 1024
"""Most record bytes of an answer read and written by the callback after its news (a parked lone
partition's); a bigger one is sent by its request's task (``os.sendfile``)."""


@attrs.frozen
class AnswerHere:
    """What answering a parked request from the callback after its news takes
    (:meth:`_Parked.poke`)."""

    streams: StreamManager
    slots: dict[int, Slot]
    """The request's session's partitions (an answer with an error leaves them)."""
    budget: int
    """The request's byte budget."""
    write: Callable[[ReplicaFetchReply], bool]
    """Writes a whole reply (records in memory) now: False if the request's task must."""


@attrs.define(eq=False)
class SessionWakers:
    """The leader's parked ReplicaFetch request per follower session, to wake it.

    A wake that finds no parked request (it overtook the request it was meant for) is
    remembered: the session's next request then answers at once.
    """

    _parked: dict[int, _Parked] = attrs.field(factory=dict)
    _early: dict[int, float] = attrs.field(factory=dict)

    def park(self, session_id: int, parked: _Parked) -> None:
        """``parked`` is the session's request now being served: a wake ends it."""
        if self._early.pop(session_id, None) is not None:
            parked.wake()
        self._parked[session_id] = parked

    def unpark(self, session_id: int, parked: _Parked) -> None:
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


@attrs.define(eq=False)
class _Parked:
    """One ReplicaFetch request's wait: ``news`` is set by its partitions' news and by a
    session wake (which also sets ``woken``: it ends the wait even with no news).

    A partition's possible news (records appended, the HW moved, the leader's flush, the
    end of the leadership) reaches the request through :meth:`poke`, in the turn that made
    it: the request's task wakes only for news it answers now. A HW not due yet (it has
    been parked less than ``hw_news_delay_s``) brings the wait's end forward to when it
    is due instead (at light load, the leader's flush and the HW move of every message woke
    a follower's parked fetch that then parked again: two task wake-ups per message)."""

    news: LazyEvent = attrs.field(factory=LazyEvent)
    woken: bool = False
    live: list[Slot] = attrs.field(factory=list)
    """The request's partitions that passed the checks (set while it waits)."""
    start: float = 0.0
    """When the wait began (the loop's clock)."""
    loop: asyncio.AbstractEventLoop | None = None
    """The running loop while the request waits (None: it does not)."""
    deadline: float = math.inf
    """When the current wait ends by itself (the loop's clock)."""
    here: AnswerHere | None = None
    """How to answer a lone partition's request from the callback after its news (None: its task
    answers)."""
    built: Built | None = None
    """The answers chosen by that callback, not written yet: the task writes them."""
    sent: bool = False
    """The answer went from that callback: the task only ends the request."""
    failed: Exception | None = None
    """Choosing the answers in that callback raised: the task raises it."""
    _answer_due: bool = False
    """That callback is on its way."""
    _timer: asyncio.TimerHandle | None = None

    @property
    def answered(self) -> bool:
        """True if the request was answered (or failed) by the callback after its news."""
        return self.sent or self.built is not None or self.failed is not None

    def wake(self) -> None:
        self.woken = True
        self.news.set()

    def poke(self) -> None:
        """A partition of the request may have news: set ``news`` if one has news to answer
        now; else, if a HW it has not been sent falls due before the wait ends, end the wait
        then (no task wake-up until something is due)."""
        loop = self.loop
        if loop is None or self.news.is_set() or self.answered:
            return
        now = loop.time()
        parked_s = now - self.start
        if any(has_news(e, parked_s) for e in self.live):
            if self.here is not None and len(self.live) == 1 and not self.woken:
                if not self._answer_due:  # (the callback sets ``news``)
                    self._answer_due = True
                    loop.call_soon(self._answer_here)
                return
            self.news.set()
            return
        due = _hw_due_s(self.live, parked_s)
        if due is not None and now + due < self.deadline:
            self.end_at(now + due)

    def _answer_here(self) -> None:
        """Answer the parked request of a lone partition from a plain callback at the start
        of the turn after its news (the append's), not from its request's task (each
        follower's task woke in turn to build and write its answer), if its records are
        small and the connection takes the frame now; else the task sends what was chosen.
        Not in the append's own turn: what else that turn appends (the other Produce
        requests read with it) goes in the same answer, as from the task. A request parked
        on many partitions is answered by its task. Its task wakes after (``news``): the
        followers' answers all go before the first such wake-up."""
        try:
            self._answer_now()
        finally:
            self._answer_due = False
            self.news.set()

    def _answer_now(self) -> None:
        here, loop = self.here, self.loop
        assert here is not None
        replica = self.live[0].replica
        if loop is None or replica.closed or replica.life.ending:
            return  # the wait ended, or the leadership or the replica did: the task answers
        try:
            answers, unread = choose_answers(
                here.streams, self.live, here.slots, loop.time() - self.start, here.budget
            )
        except Exception as exc:  # (as the task would have raised it)
            self.failed = exc
            return
        if not answers:
            return  # nothing due any more: the task waits on
        if sum(r.length for r in unread.values()) > ANSWER_HERE_MAX_BYTES:
            self.built = (answers, unread)
            return
        try:
            answers = read_all(answers, unread)
            self.sent = here.write(ReplicaFetchReply(answers))
        except Exception as exc:
            self.failed = exc
            return
        if not self.sent:
            self.built = (answers, {})

    def end_at(self, at: float) -> None:
        """End the current wait at ``at`` (the loop's clock) unless news ends it first."""
        loop = self.loop
        assert loop is not None
        if self._timer is not None:
            self._timer.cancel()
        self.deadline = at
        self._timer = loop.call_at(at, self.news.set)

    def rearm(self) -> LazyEvent:
        """A fresh event to wait on again (the spent one stays set)."""
        self.cancel_timer()
        if self.news.is_set():
            self.news = LazyEvent()
        return self.news

    def cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None


async def replica_fetch(
    streams: StreamManager,
    limits: LimitsConfig,
    wakers: SessionWakers,
    sessions: LeaderSessions,
    req: ReplicaFetchRequest,
    write_now: Callable[[ReplicaFetchReply], bool] | None = None,
) -> ReplicaFetchReply:
    """Answer ``req`` (see the module docstring). The caller sends and closes
    ``last_records`` unless the reply is ``sent``: ``write_now`` (if given) wrote it from
    the turn that brought a parked lone partition's news (:meth:`_Parked.poke`).

    Raises:
        ApiError: FETCH_SESSION_LOST (the whole request).
    """
    if req.wake:
        wakers.wake(req.session_id)
        return ReplicaFetchReply([])
    session = sessions.open(req)
    parked = _Parked()  # set by a partition's news or by the session's wake
    if write_now is not None:
        budget = min(req.max_bytes, limits.max_fetch_bytes)
        parked.here = AnswerHere(streams, session.slots, budget, write_now)
    wakers.park(req.session_id, parked)  # before any await: a wake may follow at once
    try:
        return await _serve(streams, limits, parked, session, req)
    except BaseException:
        sessions.forget(session)  # the follower starts afresh after a failed request
        raise
    finally:
        wakers.unpark(req.session_id, parked)


async def _serve(
    streams: StreamManager,
    limits: LimitsConfig,
    parked: _Parked,
    session: LeaderSession,
    req: ReplicaFetchRequest,
) -> ReplicaFetchReply:
    answers: list[ReplicaFetchAnswer] = []
    slots = session.slots
    committed = False
    wait_ms = min(req.max_wait_ms, int(limits.max_fetch_wait_s * 1000))
    poll_s = max(wait_ms, 0) / 1000  # a fetch at the end is caught up while parked
    for index in req.forget:
        slots.pop(index, None)
    arrived: set[int] = set()
    for part in req.partitions:
        index = part.slot
        was = slots.pop(index, None)
        try:
            check_holds_replica(streams, part.stream, part.partition)
            replica = streams.replica(part.stream, part.partition)
            replica.check_leader(part.leader_epoch)
            slot = Slot(index, part, replica, replica.follower_name(part.replica_id))
            moved = await _report(slot, poll_s, arriving=True)
            committed = committed or moved
        except (ApiError, StorageError) as exc:
            answers.append(error_answer(index, exc))
            continue
        except _OutOfRange as exc:
            answers.append(out_of_range(index, exc.replica))
            continue
        slots[index] = slot
        if was is not None and was.replica is replica:
            slot.log_start_sent = was.log_start_sent  # what this follower was last told
        arrived.add(index)
    for slot in [e for e in slots.values() if e.index not in arrived]:
        # Parked from the last request: this request is its follower's fetch again.
        try:
            moved = await _fetched_again(streams, slot, poll_s)
            committed = committed or moved
        except (ApiError, StorageError) as exc:
            answers.append(error_answer(slot.index, exc))
            del slots[slot.index]
        except _OutOfRange as exc:
            answers.append(out_of_range(slot.index, exc.replica))
            del slots[slot.index]
    live = list(slots.values())
    answer_all = wait_ms <= 0
    ended = False
    parked_s = 0.0
    if not answers and live and not answer_all and not any(has_news(e, 0.0) for e in live):
        # It parks: the producers' answers that its report committed go meanwhile.
        ended, parked_s = await _wait_news(live, parked, wait_ms / 1000)
        if parked.failed is not None:
            raise parked.failed
        if parked.sent:
            return SENT
        if parked.built is not None:
            return await finish_reply(*parked.built, 0)
    elif committed:
        # This request committed records and is answered now: let the producers' answers,
        # ready now, go before this one (it carries the new HW). Measured: the commit's ack
        # left 0.1 ms after the HW moved instead of 0.6 ms (RF 3, 200 msg/s).
        await asyncio.sleep(0)
    if not answer_all:
        live = due_slots(live, answers, parked_s, ended)
    if parked_s > 0.0:
        polls_ended(live)
    budget = min(req.max_bytes, limits.max_fetch_bytes)
    answers, unread = answer_each(streams, live, slots, answers, budget)
    return await finish_reply(answers, unread, RESPONSE_POLL_ENDED if ended else 0)


class _OutOfRange(Exception):
    """A parked partition's position left the leader's log (its start moved past it)."""

    def __init__(self, replica: PartitionReplica) -> None:
        super().__init__("offset out of range")
        self.replica = replica


async def _fetched_again(streams: StreamManager, slot: Slot, poll_s: float) -> bool:
    """The checks and the progress report of a partition parked in the session, as its own
    fetch again would run them (a follower that stays at the leader's end stays caught
    up); True if the HW moved.

    Raises:
        ApiError: NOT_LEADER & co, as the partition's own fetch.
        StorageError: likewise.
        _OutOfRange: its offset is out of the leader's log.
    """
    part = slot.part
    replica = slot.replica
    if replica.closed:
        replica = slot.replica = streams.replica(part.stream, part.partition)
    replica.check_leader(part.leader_epoch)
    return await _report(slot, poll_s)


async def _report(slot: Slot, poll_s: float, *, arriving: bool = False) -> bool:
    """A checked partition's fetch (arriving in the request, or parked in the session):
    its offset in the leader's log, its follower's progress recorded; True if the HW moved.

    Raises:
        _OutOfRange: its offset is out of the leader's log.
    """
    part, replica = slot.part, slot.replica
    log = replica.log
    if part.offset < log.log_start_offset or part.offset > log.log_end_offset:
        raise _OutOfRange(replica)
    hw_was = log.high_watermark
    if hops.ENABLED and arriving:
        hops.mark(f"rf.ask.{slot.follower}")
    await replica.replica_fetched(slot.follower, part.offset, part.replica_flushed, poll_s)
    return log.high_watermark != hw_was


def _hw_due_s(live: list[Slot], parked_s: float) -> float | None:
    """Seconds until the earliest HW news of ``live`` is due (None: none has any)."""
    due: float | None = None
    for e in live:
        d = e.replica.replica_hw_news_due_s(e.follower, parked_s)
        if d is not None and (due is None or d < due):
            due = d
    return due


async def _wait_news(live: list[Slot], parked: _Parked, timeout_s: float) -> tuple[bool, float]:
    """Wait until a partition has news or the session is woken: (False, parked seconds),
    or (True, ...) after ``timeout_s`` (answer every partition). A partition's news or a
    wake sets ``parked.news`` with no task in between (:meth:`_Parked.poke`); a bare future
    with a timer, not an anyio scope. A HW alone (:meth:`LeaderState.fetch_has_news`) is
    answered once its delay is over, without a wake: the wait ends at the earlier of the
    delay and ``timeout_s``."""
    loop = live[0].replica.committer.running_loop()  # no getpid (Python 3.11)
    start = loop.time()
    parked.live, parked.start, parked.loop = live, start, loop
    parked_s = 0.0
    for e in live:
        e.replica.add_news_waker(parked)
    try:
        for _ in range(MAX_NEWS_WAITS):
            if parked.woken:
                return False, parked_s  # woken before it parked (an early wake) or while parked
            left = timeout_s - parked_s
            if left <= 0:
                return True, parked_s
            news = parked.rearm()
            parked.deadline = loop.time() + left
            due = _hw_due_s(live, parked_s)
            if due is not None and due < left:
                parked.end_at(loop.time() + due)
            woken = await news.wait_within(left, loop)
            if hops.ENABLED:
                hops.mark("rf.wait")
            parked_s = loop.time() - start
            if parked.answered:
                return False, parked_s  # by the callback after its news (_Parked.poke)
            if any(has_news(e, parked_s) for e in live):
                if hops.ENABLED and woken:
                    hops.mark("rf.woken")
                return False, parked_s
        return True, parked_s
    finally:
        parked.cancel_timer()
        parked.loop = None
        for e in live:
            e.replica.remove_news_waker(parked)
