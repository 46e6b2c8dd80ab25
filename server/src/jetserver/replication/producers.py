"""Idempotent producers: recognise a retried message by (producer id, sequence).

Per partition, the leader remembers for each recent producer where its recent sequences
were stored, as runs ``(first_seq, first_offset, count, timestamp)`` (consecutive sequences
at consecutive offsets with one timestamp). A message whose (producer id, sequence) is
remembered is a retry: it is not stored again and is answered DUPLICATE_SEQUENCE with the
stored copy's offset and timestamp (spec/acks.md).

A sequence that is not remembered and lower than one already seen is stored: a late retry
whose run was forgotten. So the guarantee is "no duplicate while the leader remembers
the producer" (``MAX_RUNS_PER_PRODUCER`` runs, ``MAX_PRODUCERS`` producers, least recently
used first out); beyond that a late retry is stored twice, never lost. A sequence above
the next one expected (:meth:`ProducerTable.expected`) is refused on the direct Produce
path (``AppendBatch.out_of_order``, spec/protocol.md "Sequences"): that is what keeps a
producer's messages in order with several requests in flight.

Pure and single-threaded (the partition's sequencer owns its table).
"""

from __future__ import annotations

import collections
from collections.abc import Iterable

import attrs

from jetsdk.codec.record import Record

MAX_PRODUCERS = 1024
"""Producers remembered per partition."""
MAX_RUNS_PER_PRODUCER = 64
"""Runs of stored sequences remembered per producer."""
REBUILD_RECORDS = 10_000
"""Records at the end of the log scanned at start-up to rebuild the table."""
MSG_ID_HEADER = "nats-msg-id"
"""A plain message's id for deduplication (NATS's name; matched without regard to case)."""
MAX_MSG_IDS = 100_000
"""Message ids remembered per partition (the oldest are forgotten first)."""


@attrs.define
class _Run:
    first_seq: int
    first_offset: int
    count: int
    timestamp: int

    def find(self, seq: int) -> int | None:
        delta = seq - self.first_seq
        return self.first_offset + delta if 0 <= delta < self.count else None


@attrs.define(eq=False)
class ProducerTable:
    """Recent (producer id, sequence) -> (offset, timestamp) of one partition."""

    _producers: collections.OrderedDict[int, collections.deque[_Run]] = attrs.field(
        factory=collections.OrderedDict
    )
    _msg_ids: collections.OrderedDict[bytes, tuple[int, int]] = attrs.field(
        factory=collections.OrderedDict
    )
    """``Nats-Msg-Id`` -> (offset, timestamp), in offset order."""
    _tops: dict[int, int] = attrs.field(factory=dict)
    """Per remembered producer, a sequence above every one its runs hold: a sequence at
    or over it is new without a look at the runs (the usual case: a producer's sequences
    grow, and one request's messages each ask)."""

    def lookup_msg_id(self, msg_id: bytes, now_ns: int, window_ns: int) -> tuple[int, int] | None:
        """``(offset, timestamp)`` of the message stored with ``msg_id`` less than
        ``window_ns`` before ``now_ns``, or None (older ids are forgotten here)."""
        ids = self._msg_ids
        horizon = now_ns - window_ns
        while ids:
            oldest = next(iter(ids.values()))
            if oldest[1] >= horizon:
                break
            ids.popitem(last=False)
        found = ids.get(msg_id)
        return found if found is not None and found[1] >= horizon else None

    def record_msg_id(self, msg_id: bytes, offset: int, timestamp: int) -> None:
        """Remember that the message with ``msg_id`` is stored at ``offset``."""
        ids = self._msg_ids
        ids[msg_id] = (offset, timestamp)
        ids.move_to_end(msg_id)
        if len(ids) > MAX_MSG_IDS:
            ids.popitem(last=False)

    def __len__(self) -> int:
        return len(self._producers)

    def expected(self, producer_id: int) -> int | None:
        """The sequence after the highest one stored for ``producer_id``; None: not
        remembered."""
        return self._tops.get(producer_id)

    def lookup(self, producer_id: int, seq: int) -> tuple[int, int] | None:
        """``(offset, timestamp)`` of the stored copy, or None if not remembered."""
        runs = self._producers.get(producer_id)
        if runs is None or seq >= self._tops[producer_id]:
            return None
        for run in reversed(runs):
            offset = run.find(seq)
            if offset is not None:
                return offset, run.timestamp
        return None

    def record(self, producer_id: int, seq: int, offset: int, timestamp: int) -> None:
        """Remember that ``seq`` of ``producer_id`` is stored at ``offset``."""
        runs = self._producers.get(producer_id)
        if runs is None:
            runs = collections.deque(maxlen=MAX_RUNS_PER_PRODUCER)
            self._producers[producer_id] = runs
            self._tops[producer_id] = seq + 1
            if len(self._producers) > MAX_PRODUCERS:
                oldest, _runs = self._producers.popitem(last=False)
                del self._tops[oldest]
        else:
            self._producers.move_to_end(producer_id)
            if seq >= self._tops[producer_id]:
                self._tops[producer_id] = seq + 1
        if runs:
            last = runs[-1]
            if (
                seq == last.first_seq + last.count
                and offset == last.first_offset + last.count
                and timestamp == last.timestamp
            ):
                last.count += 1
                return
        runs.append(_Run(seq, offset, 1, timestamp))

    def record_run(
        self, producer_id: int, seq: int, offset: int, count: int, timestamp: int
    ) -> None:
        """:meth:`record` of ``count`` consecutive sequences from ``seq`` stored at
        consecutive offsets from ``offset`` with one timestamp (one request's messages),
        in one call: the same table as ``count`` calls."""
        if count < 1:
            return
        self.record(producer_id, seq, offset, timestamp)
        if count > 1:
            self._tops[producer_id] = max(self._tops[producer_id], seq + count)
            self._producers[producer_id][-1].count += count - 1

    def forget_from(self, offset: int) -> None:
        """The log was cut back to ``offset``: forget every sequence stored at or above it,
        so that a retry of one of them is stored again, not answered as a duplicate."""
        for producer_id in list(self._producers):
            runs = self._producers[producer_id]
            while runs and runs[-1].first_offset >= offset:
                runs.pop()
            if runs and runs[-1].first_offset + runs[-1].count > offset:
                runs[-1].count = offset - runs[-1].first_offset
            if not runs:
                del self._producers[producer_id], self._tops[producer_id]
            else:  # the next sequence expected is back after the highest one kept
                self._tops[producer_id] = max(r.first_seq + r.count for r in runs)
        ids = self._msg_ids
        while ids and next(reversed(ids.values()))[0] >= offset:
            ids.popitem(last=True)

    def rebuild(self, records: Iterable[Record]) -> None:
        """Remember the producers of ``records`` (in offset order)."""
        for r in records:
            if r.producer_id is not None:
                self.record(r.producer_id, r.producer_seq, r.offset, r.timestamp)
            for name, value in r.headers:
                if name.lower() == MSG_ID_HEADER:
                    self.record_msg_id(value, r.offset, r.timestamp)
