"""The leader-epoch cache: which leader epoch started at which offset (Kafka KIP-101).

Followers use :meth:`LeaderEpochCache.end_offset_for` on the leader to find where their log
diverges after a leader change, instead of truncating to the high watermark. Persisted in
``leader-epoch-checkpoint`` (see :mod:`jetserver.storage.checkpoint`).

A new epoch (:meth:`LeaderEpochCache.assign`) is written without fsync, as Kafka does: a
crash may leave the checkpoint without the newest epochs, and recovery extends it from the
epochs the records carry (spec/storage.md §6 and §9). Every new leader assigns one: with
the write, an fsync of the file and one of the directory, the 3,334 leaderships of a killed
server at 10,000 partitions queued 6,668 fsyncs before they served. A truncation (rare: a
follower whose log diverged) is still made durable before it returns.

A new leader's epoch may also be written later, off the event loop
(:meth:`LeaderEpochCache.assign` with ``deferred``; :mod:`jetserver.storage.epoch_writes`): the
entries change at once, the file when a worker thread calls
:meth:`LeaderEpochCache.write_pending`. Writes of one cache's file are serialized, and each
writes the entries as they are when it starts, so an older write never overtakes a later
change (a truncation's durable write included).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from pathlib import Path

import attrs

from jetserver.storage.checkpoint import LEADER_EPOCH_FILE, write_checkpoint
from jetserver.storage.errors import InvalidArgumentError

log = logging.getLogger(__name__)

UNDEFINED_EPOCH = -1
UNDEFINED_OFFSET = -1
MAX_EPOCH = 2**32 - 1


@attrs.frozen
class EpochEntry:
    """One epoch and the first offset appended in it."""

    epoch: int
    """Leader epoch."""
    start_offset: int
    """First offset appended under this epoch."""


class LeaderEpochCache:
    """Ordered ``(epoch, start_offset)`` entries, strictly increasing in both.

    Every change is written to the checkpoint file before the call returns (when the cache
    has a directory), but an ``assign`` with ``deferred``: then by :meth:`write_pending`.

    Thread-safety: all methods take an internal lock; mutations come from the log's writer;
    :meth:`write_pending` from any thread. File writes take a second lock, first (the
    entries' lock is never held while waiting for it).
    """

    def __init__(
        self,
        directory: Path | None,
        log_end_offset: Callable[[], int],
        entries: Sequence[EpochEntry] = (),
    ) -> None:
        self._directory = directory
        self._leo = log_end_offset
        self._entries: list[EpochEntry] = list(entries)
        self._lock = threading.Lock()
        self._write_lock = threading.Lock()
        """Held while the file is written: one write at a time, each of the entries as
        they are once it holds this lock."""
        self._pending = False
        """A deferred change is not written yet (guarded by ``_lock``): True from the
        change until a write of the entries as they were after it has returned."""
        self._changes = 0
        """Changes of the entries so far (guarded by ``_lock``): a write clears
        ``_pending`` only if none came after the entries it wrote."""

    @property
    def entries(self) -> tuple[EpochEntry, ...]:
        """A snapshot of the entries."""
        with self._lock:
            return tuple(self._entries)

    @property
    def latest_epoch(self) -> int:
        """The newest epoch, or -1 if none was assigned."""
        with self._lock:
            return self._entries[-1].epoch if self._entries else UNDEFINED_EPOCH

    def assign(
        self,
        epoch: int,
        start_offset: int,
        *,
        deferred: Callable[[LeaderEpochCache], None] | None = None,
    ) -> bool:
        """Record that ``epoch`` starts at ``start_offset``; True if the cache changed.

        Written to the checkpoint without fsync (module docstring), before this returns, or
        with ``deferred``, later: ``deferred(self)`` is called once the entries changed, and
        whoever it hands the cache to calls :meth:`write_pending` (any thread). The same
        epoch again is a no-op. Entries with a start offset >= ``start_offset`` (left over
        from a log that was not truncated) are dropped first.

        Raises:
            InvalidArgumentError: ``epoch`` is below the latest epoch or out of u32 range,
                or ``start_offset`` is negative.
        """
        if not 0 <= epoch <= MAX_EPOCH or start_offset < 0:
            raise InvalidArgumentError(f"bad epoch entry ({epoch}, {start_offset})")
        with self._lock:
            if self._entries:
                latest = self._entries[-1]
                if epoch == latest.epoch:
                    return False
                if epoch < latest.epoch:
                    raise InvalidArgumentError(
                        f"epoch {epoch} is below the latest epoch {latest.epoch}"
                    )
            while self._entries and self._entries[-1].start_offset >= start_offset:
                self._entries.pop()
            self._entries.append(EpochEntry(epoch, start_offset))
            self._pending = True
            self._changes += 1
        if deferred is not None:
            deferred(self)
        else:
            self._persist(sync=False)
        return True

    @property
    def pending(self) -> bool:
        """A deferred change is not written yet (:meth:`write_pending`)."""
        with self._lock:
            return self._pending

    def write_pending(self) -> bool:
        """Write the entries if a deferred change is not written yet (no fsync); True if it
        wrote. A directory that is gone (the partition was deleted) is not an error.

        Raises:
            OSError: the write failed (the change stays pending).
        """
        try:
            return self._persist(sync=False, only_pending=True)
        except FileNotFoundError:
            with self._lock:
                self._pending = False
            return False

    def drop_pending(self) -> None:
        """Forget a deferred change without writing it (the log was abandoned, as by a
        crash)."""
        with self._lock:
            self._pending = False

    def epoch_and_end_offset_for(self, epoch: int) -> tuple[int, int]:
        """``(largest epoch <= epoch, end offset of that epoch)`` as in Kafka KIP-279.

        The end offset of the latest epoch is the log end offset; of an older epoch, the
        start offset of the next one. ``(-1, -1)`` if ``epoch`` is newer than the latest
        epoch or the cache is empty; ``(epoch, start of the first epoch)`` if ``epoch`` is
        older than every entry.
        """
        with self._lock:
            if not self._entries or epoch == UNDEFINED_EPOCH:
                return UNDEFINED_EPOCH, UNDEFINED_OFFSET
            if epoch == self._entries[-1].epoch:
                return epoch, self._leo()
            floor: EpochEntry | None = None
            for entry in self._entries:
                if entry.epoch > epoch:
                    if floor is None:
                        return epoch, entry.start_offset
                    return floor.epoch, entry.start_offset
                floor = entry
            return UNDEFINED_EPOCH, UNDEFINED_OFFSET

    def end_offset_for(self, epoch: int) -> int:
        """The end offset of ``epoch`` (see :meth:`epoch_and_end_offset_for`); -1 if unknown."""
        return self.epoch_and_end_offset_for(epoch)[1]

    def epoch_for_offset(self, offset: int) -> int:
        """The epoch the record at ``offset`` was appended in, or -1 if before every entry."""
        with self._lock:
            found = UNDEFINED_EPOCH
            for entry in self._entries:
                if entry.start_offset > offset:
                    break
                found = entry.epoch
            return found

    def truncate_from_end(self, end_offset: int) -> bool:
        """Drop entries starting at or after ``end_offset`` (the log was truncated there)."""
        with self._lock:
            keep = [e for e in self._entries if e.start_offset < end_offset]
            if len(keep) == len(self._entries):
                return False
            self._entries = keep
        self._persist()
        return True

    def truncate_from_start(self, start_offset: int) -> bool:
        """Drop entries wholly before ``start_offset`` (retention moved the log start).

        The last epoch starting at or before ``start_offset`` is kept, moved to start there.
        """
        with self._lock:
            keep = [e for e in self._entries if e.start_offset > start_offset]
            before = [e for e in self._entries if e.start_offset <= start_offset]
            if before:
                keep.insert(0, EpochEntry(before[-1].epoch, start_offset))
            if keep == self._entries:
                return False
            self._entries = keep
        self._persist()
        return True

    def clear(self) -> None:
        """Remove every entry."""
        with self._lock:
            self._entries = []
        self._persist()

    def _persist(self, *, sync: bool = True, only_pending: bool = False) -> bool:
        """Write the entries as they are once no other write runs; with ``only_pending``,
        only if a deferred change is unwritten. True if it wrote."""
        if self._directory is None:
            with self._lock:
                self._pending = False
            return False
        with self._write_lock:
            with self._lock:
                if only_pending and not self._pending:
                    return False
                entries = [(e.epoch, e.start_offset) for e in self._entries]
                changes = self._changes
            # A failure leaves the change pending: the next write takes it.
            write_checkpoint(self._directory, LEADER_EPOCH_FILE, entries, sync=sync)
            with self._lock:
                if self._changes == changes:  # else a later change is still to write
                    self._pending = False
        return True
