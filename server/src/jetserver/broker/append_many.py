"""The append of one Produce request's many messages in the caller's step, with no await
(issue 34 item 4: a ProduceMany section, broker/produce_section.py).

:func:`append_records_now` is :meth:`Sequencer.append_one_now` for several messages: the
request's records, no header controls, appended as one batch to an idle sequencer, its
outcome returned (the offset of the first record and the batch's timestamp) rather than
settled on a completion per message. It skips what the general path
(:meth:`Intake.ingest_direct` -> :meth:`Sequencer.append_now` -> ``_append_batch`` ->
``_take_direct`` -> ``_append``) builds for messages that need no check of their own: the
typed batch, the completion, a tuple of who-is-acked and a duplicate and order check per
message, the acks settled one by one, the coroutine frames. What it leaves to that path
(None, before anything changed): a subject over the record limit, a message over the size
limit, a large write (from a worker thread), an idempotent producer's request that is not
its next sequences (a retry, a duplicate, one out of order: the general path answers each
message), an ALL ack without enough replicas in sync.

An idempotent producer's request (its records carry the producer id, sequences ``base``
to ``base + count - 1``) is taken when ``base`` is the next sequence the partition
expects of it, or over it in a request that starts its sequence (a table's writes: their
sequences run across partitions), or the producer is new to the partition and ``base``
is 0 or the request starts its sequence (spec/protocol.md "Sequences"): then none of its
sequences is stored and none skips one, as the general path's order and duplicate checks
would find message by message. Its sequences are recorded as one run
(:meth:`ProducerTable.record_run`).

An ALL-acked request's answer waits for its commit (issue 38's table puts, in a
ProduceMany: broker/produce_section.py): ``wait`` gets the pending ALL ack of its last
record, which the commit settles (or fails) as the general path's per-message acks.

The flush is left as ``append_now`` leaves it (``Sequencer._commit_in_task``): to the
request's :class:`~jetserver.broker.commit_group.FsyncGroup` if one is open (the fsync
and commit of the request's partitions in one thread job), else to the request's
after-work for a small one, else to the flusher; durability ``written`` commits in this
step, as the one-message path does.

Task safety: event loop thread only; the caller saw the sequencer idle in this step.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from jetsdk.codec.error_codes import AckPolicy, ErrorCode
from jetsdk.codec.transcode import DirectRecord
from jetserver.broker.acks import PartitionAck, PendingAck
from jetserver.broker.commit_group import IN_GROUP
from jetserver.broker.direct import NOT_LEADER, DirectAckTo, ProduceCompletion, Result, record_body
from jetserver.broker.ingest_side import Intake
from jetserver.broker.sequencer import DEFER_MAX_RECORDS
from jetserver.metadata.model import DURABILITY_FLUSHED
from jetserver.replication.core import ROLE_SINGLE
from jetserver.storage.clock import wall_ns
from jetserver.storage.framing import Body

__all__ = ["append_records_now"]

log = logging.getLogger(__name__)

_STORAGE_ERROR = int(ErrorCode.STORAGE_ERROR)
_ALL = AckPolicy.ALL


def append_records_now(
    intake: Intake,
    subjects: Sequence[str],
    records: Sequence[DirectRecord],
    starts: bool = False,
    wait: ProduceCompletion | None = None,
) -> Result | None:
    """Append ``records`` (on ``subjects``, the partition's subject where a message named
    none) to ``intake``'s partition in this step (module docstring): ``(0, first offset,
    timestamp)``, or an error for all of them (NOT_LEADER, STORAGE_ERROR); None, nothing
    done, for the general path. ``starts``: the request's sequence-start flag. ``wait``:
    the records are ALL-acked; its one result is settled by the commit of the last one
    (already if it is committed when this returns)."""
    sequencer = intake.sequencer
    base = sequencer.base
    core = base.core
    if not core.leading:
        return NOT_LEADER
    if wait is not None and not core.enough_replicas():
        return None  # refused, message by message, by the general path
    producer_id = records[0].producer_id if records else None
    seq = 0
    if producer_id is not None:
        seq = records[0].producer_seq
        expected = core.producers.expected(producer_id)
        if expected is None:
            fresh = seq == 0 or starts
        else:  # (at or over the next one expected: none is stored)
            fresh = seq == expected or (starts and seq > expected)
        if not fresh:
            return None  # a retry, a duplicate or out of order: checked one by one
    # The sequencer's own per-partition cache of the subject fields (no other user).
    cache = sequencer._fields_cache
    limit = sequencer.max_message_bytes
    bodies: list[Body] = []
    for subject, record in zip(subjects, records, strict=True):
        fields = cache.subjects(subject, "")
        if fields is None or record.size > limit:
            return None  # refused one by one by the general path
        bodies.append(record_body(record, fields))
    committer = sequencer.committer
    if committer.fsyncs.is_large(bodies):
        return None  # written from a worker thread by the general path
    count = len(bodies)
    sequencer._appending = True  # (as append_one_now: the single writer)
    try:
        try:
            epoch = sequencer._epoch_to_note()
            first, ts = base.log.append(bodies, wall_ns(), epoch)
        except Exception as exc:
            log.error("append failed", extra=base.fields(records=count, error=repr(exc)))
            sequencer.messages_rejected += count
            return (_STORAGE_ERROR, -1, -1)
        sequencer.messages_in += count
        intake.produce_direct += count
        intake.produce_inline += count
        cuts = committer.sync_failures
        sequencer.checks.appended(sequencer.leader_epoch, cuts, first, ts, bodies)
        if producer_id is not None:
            core.producers.record_run(producer_id, seq, first, count, ts)
        last = first + count - 1
        if wait is not None:  # (before a commit below can settle it)
            ack = PartitionAck(last, ts, "", _ALL, 0, "")
            core.add_pending(PendingAck(last, DirectAckTo(wait, 0), ack))
        committed = core.appended(first + count, base.log.high_watermark)
        if committed is not None:  # durability "written": committed once appended
            messages = committer.carry_out_now(committed)
            if messages or committed.leadership_ended:
                committer.carry_out_rest_soon(messages, committed.leadership_ended)
        if core.leader_state is not None:
            sequencer.wake_replicas()
    finally:
        sequencer._appending = False
        if not sequencer.idle or base.life.stopping:
            sequencer.wake()  # (as append_one_now: its run loop takes what came meanwhile)
    if core.role == ROLE_SINGLE and core.policy.durability == DURABILITY_FLUSHED:
        group = IN_GROUP.get()
        if (group is not None and group.join(committer)) or (
            count <= DEFER_MAX_RECORDS and wait is None  # (an ALL answer waits for it)
        ):
            committer.defer_flush()  # (the group's job, or the request's after-work)
            return (0, first, ts)
    committer.request_flush()
    return (0, first, ts)
