"""The result of a read: a byte range of a segment file holding whole stored records."""

from __future__ import annotations

import attrs

from jetserver.storage.files import FileLease, pread_exact

READ_INLINE_MAX_BYTES = 1024 * 1024
"""A read of up to this many bytes (a page-cache pread) runs on the event loop, cheaper than a
worker-thread hop; a bigger one in a worker thread (a consumer's ``fetch.io=read`` answer and a
follower's ReplicaFetch answer alike; bench fetch_io measures the line)."""


@attrs.frozen
class ReadSlice:
    """Stored records ``[first_offset, next_offset)`` as they lie in one segment file.

    The bytes are exactly the records' stored form (spec/storage.md, "Record"), so a server
    can send them with ``os.sendfile(sock, fileno, position, length)`` or :meth:`read_bytes`.
    The slice holds a reference to the file: the descriptor stays valid (even if compaction
    or retention unlinks the file) until :meth:`close` or the context manager's exit.

    Thread-safety: immutable; ``close`` may be called from any thread, once or many times.
    """

    fileno: int
    """File descriptor to read from; -1 for an empty slice or one with :attr:`data`."""
    position: int
    """Byte position of the first record in the file."""
    length: int
    """Number of bytes (whole records only); 0 for an empty slice."""
    first_offset: int
    """Offset of the first record in the slice (the offset asked for when empty)."""
    next_offset: int
    """Offset to read next: one past the last record, or past a gap known to hold nothing."""
    lease: FileLease | None = attrs.field(default=None, eq=False, repr=False)
    """Internal: the reference keeping ``fileno`` open."""
    data: bytes | None = attrs.field(default=None, eq=False, repr=False)
    """The bytes themselves, when the read found them in memory (the segment's last
    append, :meth:`~jetserver.storage.segment.Segment.tail_bytes`): ``fileno`` is -1
    and there is no lease then; send or use these instead."""

    @property
    def empty(self) -> bool:
        """True if the slice holds no record."""
        return self.length == 0

    def read_bytes(self) -> bytes:
        """The slice's bytes (``os.pread`` of the range). Raises OSError on I/O failure."""
        if self.data is not None:
            return self.data
        if self.length == 0:
            return b""
        return pread_exact(self.fileno, self.length, self.position)

    def close(self) -> None:
        """Release the file reference (idempotent)."""
        if self.lease is not None:
            self.lease.release()

    def __enter__(self) -> ReadSlice:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def empty_slice(offset: int, next_offset: int) -> ReadSlice:
    """A slice with no records."""
    return ReadSlice(fileno=-1, position=0, length=0, first_offset=offset, next_offset=next_offset)
