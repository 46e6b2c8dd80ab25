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
  with a wake request) or ``max_wait_ms`` passes. Its task ends where it parks: the wait
  goes on in callbacks (broker/replica_wait.py; a partition's possible news is checked in
  the turn that made it: :meth:`ParkedFetch.poke`). A request parked on one partition (a
  follower's session at light load) is answered from a plain callback first in the next
  turn, written by the connection at once, with no task step; anything else resumes it
  in a task;
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
import functools
from collections.abc import Callable

from jetsdk.codec.replica_fetch import (
    RESPONSE_POLL_ENDED,
    ReplicaFetchAnswer,
    ReplicaFetchRequest,
)
from jetserver.broker.fetch import check_holds_replica
from jetserver.broker.partition import PartitionReplica
from jetserver.broker.replica_answers import (
    HELD,
    ReplicaFetchReply,
    answer_each,
    due_slots,
    error_answer,
    finish_reply,
    has_news,
    out_of_range,
    polls_ended,
)
from jetserver.broker.replica_sessions import LeaderSession, LeaderSessions, Slot
from jetserver.broker.replica_wait import (
    AnswerHere,
    HeldFetch,
    OwnTask,
    ParkedFetch,
    SessionEnd,
    SessionWakers,
)
from jetserver.broker.streams import StreamManager
from jetserver.config.server import LimitsConfig
from jetserver.errors import ApiError
from jetserver.infra import hops
from jetserver.storage import StorageError

__all__ = ["SessionWakers", "replica_fetch"]


async def replica_fetch(
    streams: StreamManager,
    limits: LimitsConfig,
    wakers: SessionWakers,
    sessions: LeaderSessions,
    req: ReplicaFetchRequest,
    write_now: Callable[[ReplicaFetchReply], bool] | None = None,
    held: HeldFetch | None = None,
) -> ReplicaFetchReply:
    """Answer ``req`` (see the module docstring). The caller sends and closes
    ``last_records`` unless the reply is ``sent``: ``write_now`` (if given) wrote it from
    the turn that brought a parked lone partition's news (:meth:`ParkedFetch.poke`), or
    (``held``) the request parked with no task: ``held`` answers it
    (broker/replica_wait.py).

    Raises:
        ApiError: FETCH_SESSION_LOST (the whole request).
    """
    if req.wake:
        wakers.wake(req.session_id)
        return ReplicaFetchReply([])
    session = sessions.open(req)
    parked = ParkedFetch(ends=SessionEnd(wakers, sessions, session))
    if write_now is not None:
        budget = min(req.max_bytes, limits.max_fetch_bytes)
        parked.here = AnswerHere(streams, session.slots, budget, write_now)
    wakers.park(req.session_id, parked)  # before any await: a wake may follow at once
    reply = None
    try:
        reply = await _serve(streams, limits, parked, session, req, held)
        return reply
    except BaseException:
        sessions.forget(session)  # the follower starts afresh after a failed request
        raise
    finally:
        if reply is not HELD:  # (held: its wait's end unparks it)
            wakers.unpark(req.session_id, parked)


async def _serve(
    streams: StreamManager,
    limits: LimitsConfig,
    parked: ParkedFetch,
    session: LeaderSession,
    req: ReplicaFetchRequest,
    held: HeldFetch | None,
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
    if not answers and live and not answer_all and not any(has_news(e, 0.0) for e in live):
        # It parks, its wait in callbacks: the producers' answers that its report
        # committed go meanwhile.
        then = functools.partial(_answer_after, streams, limits, req, live, slots, [])
        loop = live[0].replica.committer.running_loop()  # no getpid (Python 3.11)
        if held is not None:  # its task ends here
            held.hold(parked.cancel)
            parked.park(live, wait_ms / 1000, then, held, loop)
            if hops.ENABLED:
                hops.mark("rf.held")
            return HELD
        own = OwnTask(loop.create_future())
        parked.park(live, wait_ms / 1000, then, own, loop)
        return await own.outcome(parked)
    if committed:
        # This request committed records and is answered now: let the producers' answers,
        # ready now, go before this one (it carries the new HW). Measured: the commit's ack
        # left 0.1 ms after the HW moved instead of 0.6 ms (RF 3, 200 msg/s).
        await asyncio.sleep(0)
    return await _answer_after(streams, limits, req, live, slots, answers, False, 0.0, answer_all)


async def _answer_after(
    streams: StreamManager,
    limits: LimitsConfig,
    req: ReplicaFetchRequest,
    live: list[Slot],
    slots: dict[int, Slot],
    answers: list[ReplicaFetchAnswer],
    ended: bool,
    parked_s: float,
    answer_all: bool = False,
) -> ReplicaFetchReply:
    """The reply of a request after its wait (``parked_s`` seconds; ``ended``: by the long
    poll's end) or with no wait (``answers``: its errors; ``answer_all``: no long poll)."""
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
