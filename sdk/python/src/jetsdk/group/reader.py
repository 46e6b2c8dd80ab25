"""Reading one group's log from the middle: bootstrapping from a checkpoint (spec/groups.md).

The group log keeps a limited history (retention), so a new reader cannot always replay it from
the group's first record. Instead it reads from some ``start`` offset, finds a checkpoint record
of its group whose ``as_of + 1 >= start``, restores that state and applies every later record
of the group. Every reader therefore reaches the same state as one that replayed everything.

Sans-I/O: the driver fetches from :attr:`GroupLogReader.next_offset`, feeds each record, and
calls :meth:`~GroupLogReader.caught_up` when a fetch returns nothing new (it has read all
below the high watermark). ``caught_up`` may move ``next_offset`` back (to read an earlier
range); the driver simply fetches from there.

Not thread-safe: one reader task owns it.
"""

from __future__ import annotations

from collections.abc import Mapping

import attrs

from jetsdk.group.assignors import BUILTIN_ASSIGNORS, Assignor
from jetsdk.group.changes import Change
from jetsdk.group.errors import InvalidGroupRecord, UnsupportedGroupVersion
from jetsdk.group.records import Checkpoint, GroupRecord, decode_record, record_group
from jetsdk.group.state import GroupState

__all__ = ["GroupLogReader"]


@attrs.define(eq=False)
class GroupLogReader:
    """Builds and then maintains one group's :class:`GroupState` from its log partition.

    Args:
        group: the group name.
        log_start: the partition's first stored offset when reading begins.
        start: where to begin (>= log_start; default log_start). A driver that knows the log
            is long starts near the end, e.g. at the offset for time now - 2 checkpoint
            intervals (ListOffsets by timestamp); the reader goes back if it must.
        assignors: assignors by name for the state.
    """

    group: str
    log_start: int = 0
    start: int | None = None
    assignors: Mapping[str, Assignor] = attrs.field(default=BUILTIN_ASSIGNORS, kw_only=True)
    next_offset: int = attrs.field(init=False)
    """The offset to fetch next."""
    skipped: int = attrs.field(default=0, init=False)
    """Records skipped so far: invalid ones, and other groups' records of a newer version
    (every reader skips the same ones)."""
    _state: GroupState | None = attrs.field(default=None, init=False)
    _from: int = attrs.field(init=False)
    _buffer: list[tuple[int, int, GroupRecord]] = attrs.field(factory=list, init=False)
    _scratch: GroupState | None = attrs.field(default=None, init=False)
    _retry_from: int | None = attrs.field(default=None, init=False)

    def __attrs_post_init__(self) -> None:
        start = self.log_start if self.start is None else self.start
        if start < self.log_start or self.log_start < 0:
            raise ValueError("start must be >= log_start >= 0")
        self._begin(start)

    def _begin(self, start: int) -> None:
        self._from = start
        self.next_offset = start
        self._buffer = []
        self._retry_from = None
        # Replaying from offset 0 sees the whole history: no checkpoint needed.
        if start == 0:
            self._state = GroupState(self.group, assignors=self.assignors)
        else:
            self._state = None
        self._scratch = (
            GroupState(self.group, assignors=self.assignors) if start == self.log_start else None
        )

    @property
    def state(self) -> GroupState | None:
        """The group state once bootstrapped (None before)."""
        return self._state

    @property
    def ready(self) -> bool:
        """True once :attr:`state` is available."""
        return self._state is not None

    def feed(self, offset: int, timestamp: int, value: bytes | memoryview) -> list[Change]:
        """Feed the group-log record at ``offset`` (any group's; others are skipped).

        Returns the state's changes (none while bootstrapping). Records below
        :attr:`next_offset` are ignored (re-fed after a retry).

        Raises:
            UnsupportedGroupVersion: a record of this group of a newer protocol version; stop
                reading (spec/groups.md §3.1). Another group's is skipped like an invalid one
                (§2: a reader ignores records of other groups, whatever their version).
            UnknownAssignor: see GroupState.apply.
        """
        if offset < self.next_offset:
            return []
        try:
            record = decode_record(value)
        except UnsupportedGroupVersion:
            if record_group(value) == self.group:
                raise
            self.next_offset = offset + 1
            self.skipped += 1
            return []
        except InvalidGroupRecord:
            self.next_offset = offset + 1
            self.skipped += 1
            return []
        return self.feed_record(offset, timestamp, record)

    def feed_record(self, offset: int, timestamp: int, record: GroupRecord) -> list[Change]:
        """Like :meth:`feed` for a record the caller already decoded."""
        if offset < self.next_offset:
            return []
        self.next_offset = offset + 1
        if record.group != self.group:
            return []
        if self._state is not None:
            return self._state.apply(record, offset=offset, timestamp=timestamp)
        if self._scratch is not None:
            self._scratch.apply(record, offset=offset, timestamp=timestamp)
        self._buffer.append((offset, timestamp, record))
        if isinstance(record, Checkpoint):
            self._try_checkpoint(record)
        return []

    def _try_checkpoint(self, cp: Checkpoint) -> None:
        if cp.as_of + 1 < self._from:
            # It needs records before where we started; remember where to go back to.
            if cp.as_of + 1 >= self.log_start:
                retry = cp.as_of + 1
                self._retry_from = (
                    retry if self._retry_from is None else min(self._retry_from, retry)
                )
            return
        try:
            state = GroupState.restore(cp.state, assignors=self.assignors)
        except InvalidGroupRecord:
            self.skipped += 1
            return
        if state.group != self.group or state.last_offset > cp.as_of:
            self.skipped += 1
            return
        for offset, timestamp, record in self._buffer:
            if offset > cp.as_of:
                state.apply(record, offset=offset, timestamp=timestamp)
        self._state = state
        self._buffer = []
        self._scratch = None

    def caught_up(self, hw: int) -> None:
        """Tell the reader it has read everything below ``hw`` (the high watermark).

        While bootstrapping without a usable checkpoint this either restarts the scan further
        back (``next_offset`` moves back) or, when the scan already began at the log start,
        accepts the replay from the log start: the group's older history is gone (like Kafka's
        offset retention) and every reader gets the same result.
        """
        if self._state is not None or self.next_offset < hw:
            return
        if self._retry_from is not None:
            self._begin(self._retry_from)
        elif self._from > self.log_start:
            self._begin(self.log_start)
        else:
            assert self._scratch is not None
            self._state = self._scratch
            self._scratch = None
            self._buffer = []

    def reset(self, log_start: int, start: int | None = None) -> None:
        """Start over (e.g. after OFFSET_OUT_OF_RANGE because retention passed our position)."""
        self.log_start = log_start
        start = log_start if start is None else start
        if start < log_start:
            raise ValueError("start must be >= log_start")
        self._begin(start)
