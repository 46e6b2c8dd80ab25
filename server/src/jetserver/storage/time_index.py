"""The sparse time index of a segment: ``.timeindex`` files (spec/storage.md, "Time index").

Each entry is 12 bytes, big-endian: ``timestamp i64 | relative_offset u32``. There is one
entry for every offset-index entry, for the same record; ``timestamp`` is the largest
timestamp of the segment's records up to and including that record (equal to the record's
own timestamp, since timestamps are kept non-decreasing per partition). Timestamps are
non-decreasing and relative offsets strictly increasing.
"""

from __future__ import annotations

import struct
from array import array
from bisect import bisect_left
from collections.abc import Sequence
from itertools import chain

from jetserver.storage.errors import CorruptFileError

ENTRY = struct.Struct(">qI")
"""timestamp i64 (ns), relative_offset u32."""
ENTRY_SIZE = ENTRY.size  # 12

_U32 = "I" if array("I").itemsize == 4 else "L"


def encode_entry(timestamp: int, relative_offset: int) -> bytes:
    """The 12 bytes of one entry."""
    return ENTRY.pack(timestamp, relative_offset)


class TimeIndex:
    """In-memory copy of a segment's time index (same thread-safety as OffsetIndex)."""

    __slots__ = ("relative_offsets", "timestamps")

    def __init__(
        self, timestamps: array[int] | None = None, relative_offsets: array[int] | None = None
    ) -> None:
        self.timestamps: array[int] = timestamps if timestamps is not None else array("q")
        self.relative_offsets: array[int] = (
            relative_offsets if relative_offsets is not None else array(_U32)
        )

    def __len__(self) -> int:
        return len(self.timestamps)

    def append(self, timestamp: int, relative_offset: int) -> None:
        """Add an entry (the caller keeps entries ordered)."""
        self.timestamps.append(timestamp)
        self.relative_offsets.append(relative_offset)

    def extend(self, timestamps: Sequence[int], relative_offsets: Sequence[int]) -> None:
        """Add entries (parallel sequences; the caller keeps entries ordered)."""
        self.timestamps.extend(timestamps)
        self.relative_offsets.extend(relative_offsets)

    def last_before(self, timestamp: int, n: int) -> int:
        """Index of the last of the first ``n`` entries with timestamp < the given one, or -1."""
        return bisect_left(self.timestamps, timestamp, 0, n) - 1

    def truncated(self, n: int) -> TimeIndex:
        """A new index holding the first ``n`` entries."""
        return TimeIndex(self.timestamps[:n], self.relative_offsets[:n])

    def to_bytes(self) -> bytes:
        """The ``.timeindex`` file contents."""
        n = len(self.timestamps)
        return struct.pack(
            ">" + "qI" * n, *chain.from_iterable(zip(self.timestamps, self.relative_offsets))
        )

    @classmethod
    def from_bytes(cls, data: bytes, *, path: str = "<timeindex>") -> TimeIndex:
        """Parse and validate ``.timeindex`` file contents.

        Raises:
            CorruptFileError: size not a multiple of 12, timestamps decreasing or relative
                offsets not strictly increasing.
        """
        if len(data) % ENTRY_SIZE:
            raise CorruptFileError(path, f"size {len(data)} is not a multiple of {ENTRY_SIZE}")
        n = len(data) // ENTRY_SIZE
        values = struct.unpack(">" + "qI" * n, data)
        ts = array("q", values[0::2])
        rel = array(_U32, values[1::2])
        for i in range(1, n):
            if ts[i] < ts[i - 1] or rel[i] <= rel[i - 1]:
                raise CorruptFileError(path, f"entry {i} is out of order")
        return cls(ts, rel)
