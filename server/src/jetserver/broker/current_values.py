"""The current values a refused compare-and-set carries back (spec/protocol.md §6,
"current values"; spec/storage.md §11.1).

A Produce request with the current-values flag gets, with each WRONG_EXPECTED_KEY_OFFSET
result, the value of the key's record at the offset the refusal names: the record the key
index found, read from the leader's log up to its end (committed or not), so that a writer
whose compare-and-set lost builds on the value that won and retries at once instead of
reading the key first. A value is left out (None, -1 on the wire) when the offset is -1,
the record cannot be read or is not that key's (an append that failed after the check), it
is stored compressed (its headers are not sent, so its bytes would mean nothing), or the
response's values would pass :data:`MAX_CURRENT_VALUE_BYTES`.

A request with the latest-values flag too gets, with each success result, the key's later
record if one was appended after it (:func:`latest_values`).

Only a leader that appended the request itself (the direct path) has the log at hand; a
request that went through NATS gets no values.

A request of one message with the flag whose compare-and-set is refused while its
partition's sequencer is idle is answered at once (:func:`refusal_answer`): the checks its
append would run before the precondition, then the precondition, in the step that answers
it, so nothing is appended in between; no batch, completion or copies place is made. A
table's racing writers send such a request per try, most of them refused.

Task safety: event loop thread only (reads the log as the key index does).
"""

from __future__ import annotations

from collections.abc import Sequence

from jetsdk.codec.compression import COMPRESSION_HEADER
from jetsdk.codec.error_codes import AckPolicy, ErrorCode
from jetsdk.codec.errors import CodecError
from jetsdk.codec.messages import ProduceHead
from jetsdk.codec.produce_values import encode_produce_result_values, lone_key_cas
from jetsdk.codec.record import iter_records
from jetsdk.codec.transcode import DirectRecord
from jetserver.broker.append_checks import Refusal
from jetserver.broker.direct import Result
from jetserver.broker.key_index import IndexBehind, IndexFull, KeyIndex
from jetserver.broker.nats_port import NatsPort
from jetserver.broker.produce_one import partition_subject_of
from jetserver.broker.sequencer import Sequencer
from jetserver.broker.streams import StreamManager
from jetserver.config.server import LimitsConfig
from jetserver.metadata.reserved import is_internal
from jetserver.storage import Log
from jetserver.storage.errors import StorageError

MAX_CURRENT_VALUE_BYTES = 1 << 20
"""Most value bytes one Produce response carries back (values past it are left out)."""

_ENVELOPE_SLACK = 256
"""Bytes a message's envelope may have beyond its request's body (the ack inbox,
correlation id, producer field, seal): :func:`lean_refusal` leaves a request nearer NATS's
max_payload than that to the general path, which builds the envelope and measures it."""
_REFUSED = int(ErrorCode.WRONG_EXPECTED_KEY_OFFSET)
_COMPRESSION = COMPRESSION_HEADER.lower()


def current_values(
    log_: Log | None,
    records: Sequence[DirectRecord | None] | None,
    results: Sequence[Result],
    budget: int = MAX_CURRENT_VALUE_BYTES,
    index: KeyIndex | None = None,
) -> list[bytes | None]:
    """One entry per result: for a WRONG_EXPECTED_KEY_OFFSET result with an offset, the
    value of the refused message's key at that offset in ``log_``; None otherwise or where
    it is left out (module docstring). ``records``: where each message lies in the request
    (None: the request did not go the direct path). ``index``: the partition's key index,
    whose values of the records it read last spare a read of the log (the usual case: the
    record that won was appended since the previous check)."""
    values: list[bytes | None] = [None] * len(results)
    if log_ is None or records is None:
        return values
    for i, (code, offset, _ts) in enumerate(results):
        if code != _REFUSED or offset < 0 or i >= len(records):
            continue
        record = records[i]
        key = None if record is None else key_of(record)
        if key is None:
            continue
        value = None if index is None else index.recent_value(key, offset)
        if value is None:
            value = value_at(log_, offset, key)
        if value is not None and len(value) <= budget:
            values[i] = value
            budget -= len(value)
    return values


def latest_values(
    sequencer: Sequencer,
    records: Sequence[DirectRecord | None] | None,
    results: Sequence[Result],
    budget: int = MAX_CURRENT_VALUE_BYTES,
) -> list[tuple[int, bytes | None]]:
    """One entry per result, for a request with the latest-values flag (spec/protocol.md
    §6): for a success result of a keyed message whose key has a later live record in the
    leader's log (committed or not: a racing writer's compare-and-set built on this one
    while its commit ran), that record's (offset, value); (-1, None) otherwise. The writer
    whose write won then starts its next compare-and-set of the key from there, instead of
    from its own value (refused: one request more per won update when writers race). The
    value is left out (None) as :func:`current_values` leaves one out."""
    out: list[tuple[int, bytes | None]] = [(-1, None)] * len(results)
    if records is None:
        return out
    checks = sequencer.checks
    log_ = sequencer.base.log
    for i, (code, offset, _ts) in enumerate(results):
        if code != 0 or offset < 0 or i >= len(records):
            continue
        record = records[i]
        key = None if record is None else key_of(record)
        if key is None:
            continue
        try:
            latest = checks.keys.offset_of(
                log_, sequencer.leader_epoch, key, [], sequencer.committer.sync_failures
            )
        except (IndexBehind, IndexFull, CodecError, StorageError, OSError):
            continue
        if latest <= offset:  # still this record, or deleted since (ABSENT)
            continue
        value = checks.keys.recent_value(key, latest)
        if value is None:
            value = value_at(log_, latest, key)
        if value is not None and len(value) <= budget:
            budget -= len(value)
        else:
            value = None
        out[i] = (latest, value)
    return out


def refusal_answer(
    sequencer: Sequencer,
    log_: Log,
    record: DirectRecord | None,
    policy: int,
) -> bytes | None:
    """The response body of a Produce request of one message, with the current-values
    flag, that lost its compare-and-set (:func:`refused_now`): its refusal and the key's
    current value, answered at once; None if it is not refused there and then (the caller
    serves it as always). A table's racing writers send one such request per try: this
    spares a lost one the batch, completion and copies place of an append."""
    refused = None if record is None else refused_now(sequencer, record, policy)
    if refused is None:
        return None
    result: Result = (int(refused[0]), refused[2], -1)
    values = current_values(log_, [record], [result], index=sequencer.checks.keys)
    return encode_produce_result_values([result], values)


def refused_now(sequencer: Sequencer, record: DirectRecord, policy: int) -> Refusal | None:
    """The WRONG_EXPECTED_KEY_OFFSET refusal of a lone direct message (a compare-and-set
    that lost a race) if writers race on the partition (``AppendChecks.contended``; else
    it likely passes, and is checked once, by its append), ``sequencer`` is idle and every
    check its append runs before the precondition (:meth:`Sequencer._take_direct`; the
    Produce service checked the subject) passes; None otherwise (nothing done: the message
    takes the general path, which settles it as always). Checked in one step with the
    caller's answer, nothing appended in between, so the refusal is the one the append
    would give."""
    controls = record.controls
    if (
        not sequencer.checks.contended  # (first: a lone writer's compare-and-set)
        or controls is None
        or controls.expected_key_offset is None
        or controls.expected_offset is not None
        or controls.error
        or controls.msg_id is not None
    ):
        return None
    key = key_of(record)
    if key is None or not _may_refuse_now(
        sequencer, policy, record.size, record.producer_id, record.producer_seq
    ):
        return None
    refused = key_check(sequencer, key, controls.expected_key_offset)
    return None if refused is None or refused is _PASSED else refused


def _may_refuse_now(
    sequencer: Sequencer, policy: int, size: int, producer_id: int | None, producer_seq: int
) -> bool:
    """True if nothing but its precondition settles a compare-and-set of ``size`` bytes
    from producer ``producer_id`` (None: none) at ``producer_seq`` with ack ``policy``
    before its append (:func:`refused_now`)."""
    if (
        not sequencer.checks.contended
        or policy == AckPolicy.NONE
        or not sequencer.idle
        or size > sequencer.max_message_bytes
    ):
        return False
    core = sequencer.base.core
    if policy == AckPolicy.ALL and not core.enough_replicas():
        return False
    # A retry of a stored message is answered as its duplicate.
    return producer_id is None or core.producers.lookup(producer_id, producer_seq) is None


_PASSED: Refusal = (ErrorCode.NONE, "", -1)


def key_check(sequencer: Sequencer, key: bytes, expected: int) -> Refusal | None:
    """The WRONG_EXPECTED_KEY_OFFSET refusal of a compare-and-set of ``key`` expecting
    ``expected`` now (counted); :data:`_PASSED` if it passes; None if another check
    answers (the append's gives the same answer)."""
    refused = sequencer.checks.key_refusal(
        sequencer.base.log,
        sequencer.leader_epoch,
        sequencer.compact,
        key,
        expected,
        [],
        sequencer.committer.sync_failures,
    )
    if refused is None:
        return _PASSED
    if refused[0] != ErrorCode.WRONG_EXPECTED_KEY_OFFSET:
        return None
    sequencer.messages_rejected += 1
    sequencer.checks.refused_at_once += 1
    return refused


def lean_refusal(
    streams: StreamManager,
    link: NatsPort,
    limits: LimitsConfig,
    body: bytes | bytearray | memoryview,
    head: ProduceHead,
) -> bytes | None:
    """:func:`refusal_answer` of a request whose one message is a plain compare-and-set
    (:func:`~jetsdk.codec.produce_values.lone_key_cas`) on a partition where writers race
    (``AppendChecks.contended``), from the request's head and that message alone: none of
    the envelope, record and checks objects the general path builds first
    (:meth:`~jetserver.broker.produce.ProduceService.produce_then`), whose checks it runs
    in the same order on what it read; empty if it passes its check there and then (its
    append checks it again, with nothing between: the general path need not check it
    before); None (nothing done, or an error the general path raises alike) for anything
    else, which the general path serves. A table's racing writers send one such request
    per try, most of them refused: about a third of the server's Python lines per
    refusal."""
    stream, partition, policy, _timeout, producer_id, seq, count, p = head
    if count != 1:
        return None
    replica = streams.local_replica(stream, partition)
    if replica is None or not replica.sequencer.checks.contended:
        return None  # (a lone writer's: one look-up, then the general path)
    found = lone_key_cas(body, p)
    if found is None or is_internal(stream) or not replica.takes_direct(policy):
        return None
    key, expected, size = found
    spec = streams.stream(stream).spec
    if not 0 <= partition < spec.partitions or streams.offline.reasons:
        return None
    if streams.pending.wanted:
        return None
    leader = streams.lookup.leader_replica(stream, partition)  # (raises as the general path)
    if (leader is not None and leader is not replica) or not replica.leading:
        return None
    psubj, wildcard = partition_subject_of(spec.subject, partition)
    if wildcard or not link.connected:
        return None
    max_payload = link.max_payload
    if size > (spec.max_message_bytes or limits.max_message_bytes) or (
        max_payload and len(body) + _ENVELOPE_SLACK > max_payload
    ):
        return None
    if replica.replication_factor > 1 and link.echo_needed((psubj,), replica):
        return None
    sequencer = replica.sequencer
    if not _may_refuse_now(sequencer, policy, size, producer_id, seq):
        return None
    refused = key_check(sequencer, key, expected)
    if refused is _PASSED:
        return b""
    if refused is None:
        return None
    sequencer.checks.refused_lean += 1
    return refusal_of(sequencer, key, refused[2])


def refusal_of(sequencer: Sequencer, key: bytes, offset: int) -> bytes:
    """The response of a lone compare-and-set of ``key`` refused now (the key is at
    ``offset``, -1: absent): its WRONG_EXPECTED_KEY_OFFSET result and the key's current
    value (left out as :func:`current_values` leaves one out)."""
    value = None if offset < 0 else sequencer.checks.keys.recent_value(key, offset)
    if value is None and offset >= 0:
        value = value_at(sequencer.base.log, offset, key)
    if value is not None and len(value) > MAX_CURRENT_VALUE_BYTES:
        value = None
    return encode_produce_result_values([(_REFUSED, offset, -1)], [value])


def value_at(log_: Log, offset: int, key: bytes) -> bytes | None:
    """The value of the live record of ``key`` at ``offset`` in ``log_`` (read up to the
    log end: it may not be committed), or None (not there, not that key's, a tombstone,
    stored compressed, unreadable)."""
    end = log_.log_end_offset
    if not log_.log_start_offset <= offset < end:
        return None
    try:
        with log_.read(offset, 1, end) as found:  # 1 byte: exactly the first record
            data = found.read_bytes()
        for record in iter_records(data):
            if record.offset != offset or record.key != key or not record.value:
                return None
            if any(name.lower() == _COMPRESSION for name, _v in record.headers):
                return None
            return record.value
    except (StorageError, CodecError, OSError):
        return None
    return None


def key_of(record: DirectRecord) -> bytes | None:
    """The message's key (``nbytes32`` at ``key_pos`` in its request bytes)."""
    request, start = record.request, record.key_pos
    if request[start : start + 4] == b"\xff\xff\xff\xff":
        return None  # no key (-1)
    return bytes(request[start + 4 : record.key_end])
