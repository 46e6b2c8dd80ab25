"""The sparse offset index of a segment: ``.index`` files (spec/storage.md, "Offset index").

Each entry is 8 bytes, big-endian: ``relative_offset u32 | position u32``, where
``relative_offset = offset - base_offset`` of an indexed record and ``position`` is the byte
position of that record in the segment's ``.log``. A record gets an entry when it starts at
least ``index_interval_bytes`` after the previous indexed record (the segment start counts as
indexed, so the record at position 0 never has an entry). Entries strictly increase in both
fields.
"""

from __future__ import annotations

import struct
from array import array
from bisect import bisect_left, bisect_right
from collections.abc import Sequence
from itertools import chain

from jetserver.storage.errors import CorruptFileError

ENTRY = struct.Struct(">II")
"""relative_offset u32, position u32."""
ENTRY_SIZE = ENTRY.size  # 8
U32_MAX = 2**32 - 1

_TYPECODE = "I" if array("I").itemsize == 4 else "L"


def encode_entry(relative_offset: int, position: int) -> bytes:
    """The 8 bytes of one entry."""
    return ENTRY.pack(relative_offset, position)


def index_points(
    last_indexed_position: int, interval: int, starts: Sequence[int], count: int | None = None
) -> list[int]:
    """Indices ``i`` of the records (starting at ``starts[i]``, increasing) that get an entry.

    ``last_indexed_position`` is the position of the previous indexed record (0 if none);
    only the first ``count`` starts (default all) are records.
    """
    points: list[int] = []
    n = len(starts) if count is None else count
    i = 0
    last = last_indexed_position
    while True:
        i = bisect_left(starts, last + interval, i, n)
        if i >= n:
            return points
        points.append(i)
        last = starts[i]


class OffsetIndex:
    """In-memory copy of a segment's offset index.

    Thread-safety: one writer appends; readers pass the entry count they snapshotted
    (``n``) so a concurrent append is invisible to them. Truncation builds a new object.
    """

    __slots__ = ("positions", "relative_offsets")

    def __init__(
        self, relative_offsets: array[int] | None = None, positions: array[int] | None = None
    ) -> None:
        self.relative_offsets: array[int] = (
            relative_offsets if relative_offsets is not None else array(_TYPECODE)
        )
        self.positions: array[int] = positions if positions is not None else array(_TYPECODE)

    def __len__(self) -> int:
        return len(self.positions)

    def append(self, relative_offset: int, position: int) -> None:
        """Add an entry (the caller keeps entries increasing)."""
        self.relative_offsets.append(relative_offset)
        self.positions.append(position)

    def extend(self, relative_offsets: Sequence[int], positions: Sequence[int]) -> None:
        """Add entries (parallel sequences; the caller keeps entries increasing)."""
        self.relative_offsets.extend(relative_offsets)
        self.positions.extend(positions)

    def floor_for_offset(self, relative_offset: int, n: int) -> int:
        """Index of the last of the first ``n`` entries with offset <= the given one, or -1."""
        return bisect_right(self.relative_offsets, relative_offset, 0, n) - 1

    def floor_for_position(self, position: int, n: int) -> int:
        """Index of the last of the first ``n`` entries with position <= the given one, or -1."""
        return bisect_right(self.positions, position, 0, n) - 1

    def truncated(self, n: int) -> OffsetIndex:
        """A new index holding the first ``n`` entries."""
        return OffsetIndex(self.relative_offsets[:n], self.positions[:n])

    def to_bytes(self) -> bytes:
        """The ``.index`` file contents."""
        n = len(self.positions)
        return struct.pack(
            f">{2 * n}I", *chain.from_iterable(zip(self.relative_offsets, self.positions))
        )

    @classmethod
    def from_bytes(cls, data: bytes, *, path: str = "<index>") -> OffsetIndex:
        """Parse and validate ``.index`` file contents.

        Raises:
            CorruptFileError: size not a multiple of 8, or entries not strictly increasing,
                or an entry at position 0.
        """
        if len(data) % ENTRY_SIZE:
            raise CorruptFileError(path, f"size {len(data)} is not a multiple of {ENTRY_SIZE}")
        values = struct.unpack(f">{len(data) // 4}I", data)
        rel = array(_TYPECODE, values[0::2])
        pos = array(_TYPECODE, values[1::2])
        for i in range(1, len(pos)):
            if rel[i] <= rel[i - 1] or pos[i] <= pos[i - 1]:
                raise CorruptFileError(path, f"entry {i} does not increase")
        if pos and pos[0] == 0:
            raise CorruptFileError(path, "entry at position 0")
        return cls(rel, pos)
