"""Scrub: find the first damaged record of a follower's log before it replicates again.

Recovery (spec/storage.md §9) CRC-checks only the tail of a log after an unclean shutdown:
earlier segments were fsynced when rolled and are trusted. A bit flipped on disk in such a
segment (or an unreadable range recovery fenced off) would stay in a follower's log for
good, and the follower would count as holding records it cannot serve. So a follower that
restarts after an unclean shutdown reads its whole log once, CRC-checking every record,
and truncates at the first damaged one: it then fetches everything after that point from
the leader again (re-replication), and until it has, it does not report its leader silent
(it cannot be elected with data missing).

The check runs in a worker thread; the cost is one sequential read of the log.
"""

from __future__ import annotations

import logging

import anyio

from jetsdk.codec.errors import CodecError
from jetsdk.codec.record import HEADER_SIZE, check_crc, peek_header
from jetserver.logs import fields
from jetserver.storage import CorruptRangeError, Log, OffsetOutOfRange, StorageError

log = logging.getLogger(__name__)

SCRUB_CHUNK_BYTES = 1 << 20
"""Bytes read per step."""


def first_damaged_offset(log: Log, chunk_bytes: int = SCRUB_CHUNK_BYTES) -> int | None:
    """The offset to truncate to so that only verified records remain, or None if every
    record below the LEO is sound.

    Blocking (file reads): call from a worker thread.
    """
    for start, _end in log.recovery.unreadable_ranges:
        return max(start, log.log_start_offset)
    offset = log.log_start_offset
    end = log.log_end_offset
    while offset < end:
        try:
            with log.read(offset, chunk_bytes, end) as records:
                data = records.read_bytes()
                next_offset = records.next_offset
        except CorruptRangeError:
            return offset
        except OffsetOutOfRange:
            return None  # truncated or retained meanwhile: nothing left to check here
        view = memoryview(data)
        pos = 0
        while len(view) - pos >= HEADER_SIZE:
            try:
                record_offset, _ts, _epoch, size = peek_header(view, pos)
                if len(view) - pos < size:
                    break
                check_crc(view, pos)
            except CodecError:
                return offset
            if record_offset < offset:
                return offset  # an offset out of order: the header is damaged
            offset = record_offset + 1
            pos += size
        if pos == 0:
            if next_offset <= offset:
                return offset  # no progress: a record larger than what read returns
            offset = next_offset  # a compaction gap
    return None


def checkpointed_hw(log_: Log) -> int:
    """The HW checkpoint as written when the log was opened (not clamped to what recovery
    kept); 0 if missing or unreadable.

    A follower whose log lost records below it (a damaged disk) must not count as holding
    every committed record until it has fetched them again.
    """
    return log_.recovery.hw_checkpoint or 0  # read by recovery, in the opening thread


async def scrub_and_truncate(log_: Log, stream: str, partition: int) -> bool:
    """CRC-check ``log_`` (worker threads) and truncate it, and its epoch cache, at the
    first damaged record; True if damage was found or the scrub itself failed (the replica
    then counts as damaged)."""
    try:
        damaged = await anyio.to_thread.run_sync(first_damaged_offset, log_)
        if damaged is None:
            return False
        log.warning(
            "damaged records found: truncating there to fetch them again from the leader",
            extra=fields(
                stream=stream, partition=partition, offset=damaged, leo=log_.log_end_offset
            ),
        )
        await anyio.to_thread.run_sync(log_.truncate_to, damaged)
        await anyio.to_thread.run_sync(log_.epochs.truncate_from_end, damaged)
    except (StorageError, OSError) as exc:
        log.error(
            "the scrub at open failed",
            extra=fields(stream=stream, partition=partition, error=repr(exc)),
        )
    return True
