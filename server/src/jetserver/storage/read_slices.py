"""Several :class:`~jetserver.storage.read_slice.ReadSlice` sent as one: the records of a
Fetch answer that spans segment files (spec/protocol.md, "Fetch")."""

from __future__ import annotations

import attrs

from jetserver.storage.read_slice import ReadSlice


@attrs.frozen
class ReadSlices:
    """Non-empty slices of consecutive offsets, in order; their bytes, concatenated, are
    whole stored records. Close once done (closes every slice).

    Thread-safety: as :class:`ReadSlice`.
    """

    parts: tuple[ReadSlice, ...]
    """The slices, each from one segment file, in offset order."""

    @property
    def length(self) -> int:
        """Bytes of all slices."""
        return sum(p.length for p in self.parts)

    @property
    def next_offset(self) -> int:
        """Offset to read next (past the last slice)."""
        return self.parts[-1].next_offset

    def read_bytes(self) -> bytes:
        """All slices' bytes (``os.pread``). Raises OSError on I/O failure."""
        return b"".join(p.read_bytes() for p in self.parts)

    def close(self) -> None:
        """Release every slice's file reference (idempotent)."""
        for p in self.parts:
            p.close()

    def __enter__(self) -> ReadSlices:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
