"""A table's compare-and-set in one function: a Produce request of one message with
``Jet-Expected-Key-Offset``, ack ALL, to a one-replica partition led here with durability
``flushed`` (the commit is the fsync), its sequencer idle.

:class:`CasProduce` checks the key (:class:`~jetserver.broker.append_checks.AppendChecks`)
and appends in one step (:meth:`Sequencer.append_one_now`; the producer's sequence noted
in that step), then fsyncs and commits in the request's own task (:meth:`Committer.
commit_deferred`) and answers from the commit: the general path's result, latest value
(spec/protocol.md §6) and NATS copy, without its per-request objects (completion, typed
batch, append batch, pending ALL ack, copies place). A refused one is answered at once
with the key's current value, as the general path answers it. Anything else, or anything
it is unsure of (a retry of a stored sequence, other header controls, a subject, a large
write), it leaves to the general path (None) before it changed anything. A table's lone
writer sends one such request per update; its racing writers one per try.

Task safety: event loop thread only.
"""

from __future__ import annotations

import time

import attrs

from jetsdk.codec.error_codes import AckPolicy, ErrorCode
from jetsdk.codec.errors import CodecError
from jetsdk.codec.key_cas_envelope import key_cas_envelope
from jetsdk.codec.messages import ProduceHead, produce_wants_latest_values
from jetsdk.codec.produce_values import encode_produce_result_values
from jetsdk.codec.stream_settings import DURABILITY_FLUSHED
from jetserver.broker.current_values import key_check, latest_values, refusal_of
from jetserver.broker.direct import SHUTTING_DOWN, TIMEOUT, Result
from jetserver.broker.direct_copies import After
from jetserver.broker.key_index import IndexBehind, IndexFull
from jetserver.broker.partition import PartitionReplica
from jetserver.broker.produce_one import OneProduce, partition_subject_of
from jetserver.broker.sequencer import Sequencer
from jetserver.metadata.reserved import is_internal
from jetserver.replication.core import ROLE_SINGLE
from jetserver.storage.errors import StorageError

__all__ = ["CasProduce"]

_ALL = int(AckPolicy.ALL)
_NONE = int(ErrorCode.NONE)
_CUT: Result = (int(ErrorCode.STORAGE_ERROR), -1, -1)
"""An fsync failed after the append: the cut may have taken it (retry; the general path's
pending ack fails so too, ``ReplicaCore.cut``)."""


@attrs.define(eq=False)
class CasProduce:
    """Serves a lone compare-and-set with an ALL ack in one step (module docstring)."""

    one: OneProduce
    """The one-step Produce of a plain message: its stream lookups, NATS link, limits,
    NATS copies and copy backlog are this one's too."""

    async def serve(
        self, body: bytes | bytearray | memoryview, head: ProduceHead, inbox: str, checked: bool
    ) -> tuple[bytes, After | None] | None:
        """As :meth:`ProduceService.produce_then` of a request in its own task (with
        ``hold_for_room``), for a lone compare-and-set with an ALL ack; None (nothing
        done) for the general path. ``inbox``: its ack inbox (its NATS copy's envelope
        carries it). ``checked``: its key passed its check in this step already
        (:func:`~jetserver.broker.current_values.lean_refusal`, nothing between)."""
        stream, partition, policy, timeout_ms, producer_id, seq, count, _p = head
        if count != 1 or policy != _ALL:
            return None
        replica = self._replica(stream, partition)
        if replica is None:
            return None
        core = replica.core
        if producer_id is not None and core.producers.lookup(producer_id, seq) is not None:
            return None  # a retry of a stored one: answered as its duplicate
        one = key_cas_envelope(body, head, inbox)
        if one is None:
            return None  # not a plain one (a subject, other headers): the general path's
        key, expected, size, record, payload = one
        spec = self.one.streams.stream(stream).spec
        max_payload = self.one.link.max_payload
        if size > (spec.max_message_bytes or self.one.limits.max_message_bytes) or (
            max_payload and len(payload) > max_payload
        ):
            return None
        sequencer = replica.sequencer
        if size > sequencer.max_message_bytes or not core.enough_replicas():
            return None
        if checked:
            pass
        elif sequencer.checks.contended:  # writers race: refused here, as refused_now
            refused = key_check(sequencer, key, expected)
            if refused is None:
                return None  # another check answers: the general path's
            if refused[0] != ErrorCode.NONE:
                return refusal_of(sequencer, key, refused[2]), None
        elif not _passes(sequencer, key, expected):
            return None  # a lone writer's first lost race: the general path refuses it
        psubj, _wildcard = partition_subject_of(spec.subject, partition)
        timeout_s = min(timeout_ms / 1000, self.one.limits.max_produce_timeout_s)
        deadline = time.monotonic() + timeout_s
        committer = replica.committer
        failures = replica.sync_failures
        copy = not spec.no_nats_copies
        turns = committer.copy_turns
        turn = turns.take() if copy else -1  # in append order (as CopiesPlace)
        ticket = self.one.backlog.enter(len(payload)) if copy else None
        result = None
        try:
            result = replica.intake.append_one(psubj, record)
            if result is not None and result[0] == _NONE and producer_id is not None:
                core.producers.record(producer_id, seq, result[1], result[2])
        finally:
            if ticket is not None and (result is None or result[0] != _NONE):
                self.one.backlog.leave(ticket)
                turns.finish(turn)
        if result is None:
            return None  # a large write: the general path's
        if result[0] != _NONE:
            return encode_produce_result_values([result], [None]), None
        sequencer.checks.appended_lean += 1
        end = result[1] + 1
        try:
            # The fsync its append left to it (to a thread if writers race, as
            # commit_here's: their retries are read and appended while the disk works).
            await committer.commit_deferred(sequencer.lost_race_since_commit)
            if committer.sync_failures != failures or replica.log.high_watermark < end:
                left = deadline - time.monotonic()
                if not await committer.wait_committed(end, failures, left):
                    result = _outcome(replica, failures)
        except BaseException:  # cancelled (its connection failed): no copy
            if ticket is not None:
                self.one.backlog.leave(ticket)
                self.one.backlog.dropped += 1
                turns.finish(turn)
            raise
        latest = None
        if produce_wants_latest_values(body):  # a won one's successor (§6)
            latest = latest_values(sequencer, [record], [result])
        response = encode_produce_result_values([result], [None], latest)
        if ticket is None:
            return response, None
        stored = result[0] == _NONE
        message = (psubj, payload) if stored else None
        where = (end if stored else 0, failures, timeout_s, turn, ticket, deadline)
        return response, await self.one.copies.after_room(replica, message, where)

    def _replica(self, stream: str, partition: int) -> PartitionReplica | None:
        """The replica here that takes such a request now: led here alone, durability
        ``flushed``, its sequencer idle with room; None otherwise."""
        streams = self.one.streams
        replica = streams.local_replica(stream, partition)
        if (
            replica is None
            or replica.replication_factor != 1
            or not replica.appends_at_once(_ALL)
            or is_internal(stream)
            or streams.offline.reasons
            or streams.pending.wanted
            or not self.one.link.connected
        ):
            return None
        core = replica.core
        if core.role != ROLE_SINGLE or core.policy.durability != DURABILITY_FLUSHED:
            return None
        spec = streams.stream(stream).spec
        if not 0 <= partition < spec.partitions:
            return None
        leader = streams.lookup.leader_replica(stream, partition)
        if (leader is not None and leader is not replica) or not replica.leading:
            return None
        _psubj, wildcard = partition_subject_of(spec.subject, partition)
        return None if wildcard else replica


def _passes(sequencer: Sequencer, key: bytes, expected: int) -> bool:
    """True if a compare-and-set of ``key`` expecting ``expected`` passes its check now;
    False if not, or if another check would answer (nothing counted or changed: the
    general path checks it again)."""
    if not sequencer.compact:
        return False
    try:
        current = sequencer.checks.keys.offset_of(
            sequencer.base.log, sequencer.leader_epoch, key, [], sequencer.committer.sync_failures
        )
    except (IndexBehind, IndexFull, CodecError, StorageError, OSError):
        return False
    return current == expected


def _outcome(replica: PartitionReplica, failures: int) -> Result:
    """The result of an appended record whose commit did not come: cut by a failed fsync
    (STORAGE_ERROR, retriable), the replica closed (SHUTTING_DOWN), else TIMEOUT."""
    if replica.sync_failures != failures:
        return _CUT
    if replica.closed:
        return SHUTTING_DOWN
    return TIMEOUT
