"""The answers of a ReplicaFetch request at the leader (broker/replica_fetch.py serves the
request and its wait): which partitions a request answers once its wait ends, each one's
answer (its records up to the leader's LEO within the request's byte budget, its HW, noted
as sent), and the reply they make.

Task safety: event loop only.
"""

from __future__ import annotations

import anyio
import attrs

from jetsdk.codec.error_codes import ErrorCode
from jetsdk.codec.replica_fetch import ReplicaFetchAnswer
from jetserver.broker.fetch import read_records
from jetserver.broker.partition import PartitionReplica
from jetserver.broker.replica_sessions import Slot
from jetserver.broker.streams import StreamManager
from jetserver.errors import ApiError
from jetserver.infra import hops
from jetserver.storage import StorageError
from jetserver.storage.read_slice import READ_INLINE_MAX_BYTES
from jetserver.storage.read_slices import ReadSlices

Built = tuple[list[ReplicaFetchAnswer], dict[int, ReadSlices]]
"""Answers chosen, and the records of those with records, not read yet (by index)."""


def error_answer(index: int, exc: ApiError | StorageError) -> ReplicaFetchAnswer:
    code = exc.code
    message = exc.message if isinstance(exc, ApiError) else f"storage: {exc}"
    return ReplicaFetchAnswer(index, int(code), -1, -1, -1, message)


@attrs.frozen
class ReplicaFetchReply:
    """The answers to a ReplicaFetch, in index order, and the records of the last one if
    they are to be sent from their files (``os.sendfile``: neither read into this process
    nor joined into the frame); that answer's ``records`` is empty then."""

    answers: list[ReplicaFetchAnswer]
    last_records: ReadSlices | None = None
    flags: int = 0
    """The response's flags (``RESPONSE_POLL_ENDED``)."""
    sent: bool = False
    """The reply went already (written by the callback after the news of a parked request,
    broker/replica_fetch.py): nothing to send."""


SENT = ReplicaFetchReply([], sent=True)
HELD = ReplicaFetchReply([], sent=True)
"""The reply of a request whose wait goes on with no task: its connection holds it
(broker/replica_wait.py); nothing to send now."""


def due_slots(
    live: list[Slot], answers: list[ReplicaFetchAnswer], parked_s: float, ended: bool
) -> list[Slot]:
    """The partitions a request answers after its wait (by news, a wake, or at ``ended`` the
    long poll's end): those with something to say; if an answer goes out (news, an error
    in ``answers``, the end), a HW not due yet and a log start moved since it was last sent
    ride along (no round of their own), so other partitions' records never hold them back,
    and a purge reaches an idle follower within a long poll. The others have nothing new:
    they stay parked, their long polls go on."""
    due = [e for e in live if has_news(e, parked_s) or (ended and e.fresh)]
    if not (due or answers or ended):
        return due
    chosen = {e.index for e in due}
    return [e for e in live if e.index in chosen or _hw_news(e, parked_s) or _start_moved(e)]


def polls_ended(live: list[Slot]) -> None:
    """Parked fetches answered now: their followers were caught up until now (a live one
    asks again at once; one gone meanwhile is caught up no longer)."""
    for e in live:
        e.replica.replica_poll_ended(e.follower, e.replica.committer.now())


def choose_answers(
    streams: StreamManager,
    live: list[Slot],
    slots: dict[int, Slot],
    parked_s: float,
    budget: int,
    ended: bool = False,
) -> Built:
    """The answers of a request parked ``parked_s`` seconds whose news came, or whose long
    poll ``ended`` (as its task would choose them after its wait: :func:`_serve`)."""
    live = due_slots(live, [], parked_s, ended)
    polls_ended(live)
    return answer_each(streams, live, slots, [], budget)


def answer_each(
    streams: StreamManager,
    live: list[Slot],
    slots: dict[int, Slot],
    answers: list[ReplicaFetchAnswer],
    budget: int,
) -> Built:
    """``answers`` and those of ``live`` within ``budget`` (in index order), and their
    records, not read yet (by index); a partition answered with an error leaves
    ``slots``."""
    unread: dict[int, ReadSlices] = {}
    try:
        for e in live:
            try:
                answer = _answer(streams, e, budget, unread)
            except (ApiError, StorageError) as exc:
                answers.append(error_answer(e.index, exc))
                slots.pop(e.index, None)
                continue
            if answer is None:
                continue  # records that do not fit this answer: the next request gets them
            budget -= unread[e.index].length if e.index in unread else len(answer.records)
            if answer.error_code != ErrorCode.NONE:
                slots.pop(e.index, None)  # an error leaves the session on both sides
            e.fresh = False
            answers.append(answer)
        answers.sort(key=lambda a: a.index)
    except BaseException:
        for records in unread.values():
            records.close()
        raise
    return answers, unread


async def finish_reply(
    answers: list[ReplicaFetchAnswer], unread: dict[int, ReadSlices], flags: int
) -> ReplicaFetchReply:
    """The reply: the last answer's records end the frame and go from their files; the
    others' are read (they come before other answers' fields)."""
    last = unread.pop(answers[-1].index, None) if answers else None
    try:
        for i, answer in enumerate(answers):
            records = unread.pop(answer.index, None)
            if records is not None:
                answers[i] = attrs.evolve(answer, records=await _read(records))
    except BaseException:
        if last is not None:
            last.close()
        raise
    finally:
        for records in unread.values():
            records.close()
    return ReplicaFetchReply(answers, last, flags)


def read_all(
    answers: list[ReplicaFetchAnswer], unread: dict[int, ReadSlices]
) -> list[ReplicaFetchAnswer]:
    """``answers`` with their records read now (closed after)."""
    try:
        for i, answer in enumerate(answers):
            records = unread.pop(answer.index, None)
            if records is not None:
                answers[i] = attrs.evolve(answer, records=records.read_bytes())
                records.close()
    finally:
        for records in unread.values():
            records.close()
    return answers


async def _read(records: ReadSlices) -> bytes:
    """The bytes of ``records`` (closed after)."""
    try:
        if records.length <= READ_INLINE_MAX_BYTES:
            return records.read_bytes()
        return await anyio.to_thread.run_sync(records.read_bytes)
    finally:
        records.close()


def has_news(e: Slot, parked_s: float) -> bool:
    return e.replica.closed or e.replica.replica_has_news(e.follower, e.part.offset, parked_s)


def _start_moved(e: Slot) -> bool:
    """The log start moved since ``e``'s last answer (a purge, retention); a slot not
    answered yet is answered at the long poll's end anyway."""
    sent = e.log_start_sent
    return sent >= 0 and e.replica.log.log_start_offset != sent


def _hw_news(e: Slot, parked_s: float) -> bool:
    """The partition's follower has not been sent its HW (due or not)."""
    return e.replica.replica_hw_news_due_s(e.follower, parked_s) is not None


def _answer(
    streams: StreamManager, e: Slot, budget: int, unread: dict[int, ReadSlices]
) -> ReplicaFetchAnswer | None:
    """The answer for one partition after the wait (None: its records do not fit); its
    records, if any, go to ``unread`` (by index), not read yet."""
    replica = e.replica
    if replica.closed:
        replica = streams.replica(e.part.stream, e.part.partition)  # raises if deleted
    state = replica.check_leader(e.part.leader_epoch)  # still leading after the wait?
    log = replica.log
    offset = e.part.offset
    if offset < log.log_start_offset or offset > log.log_end_offset:
        return out_of_range(e.index, replica)
    end = log.log_end_offset
    has_records = offset < end
    if has_records and budget <= 0:
        return None
    hw = state.hw
    if has_records:
        # Before reading: a failed fsync's cut from now on knows these records went out.
        state.note_served(end)
        read = read_records(log, offset, min(e.part.max_bytes, budget), end)
        if read.error_code != ErrorCode.NONE:
            return out_of_range(e.index, replica)
        if read.records is not None:
            unread[e.index] = read.records
    state.note_hw_sent(e.follower, hw)
    e.log_start_sent = log.log_start_offset
    if hops.ENABLED:
        hops.mark(f"rf.ans.{e.follower}.{'r' if e.index in unread else 'h'}")
    return ReplicaFetchAnswer(
        e.index, ErrorCode.NONE, hw, log.log_start_offset, log.log_end_offset, ""
    )


def out_of_range(index: int, replica: PartitionReplica) -> ReplicaFetchAnswer:
    log = replica.log
    return ReplicaFetchAnswer(
        index,
        int(ErrorCode.OFFSET_OUT_OF_RANGE),
        log.high_watermark,
        log.log_start_offset,
        log.log_end_offset,
    )
