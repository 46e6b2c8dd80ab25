"""Records as a replica stores them: decoded from segment files or Fetch bodies, with their
bytes kept for replica comparison."""

from __future__ import annotations

from pathlib import Path

from cluster.checkers import Stored, payload_id_of
from jetsdk.codec.errors import CodecError
from jetsdk.codec.record import HEADER_SIZE, decode_record, peek_header


def stored_from_raw(partition: int, data: bytes | memoryview) -> list[Stored]:
    """Decode whole records keeping their bytes; a trailing partial record is ignored.

    A whole record that fails its CRC or does not decode is kept with ``payload_id`` None
    and ``corrupt`` True (its bytes then differ from a healthy replica's); decoding stops
    at a header whose length is absurd (nothing after it can be framed).
    """
    out = []
    view = memoryview(data)
    pos = 0
    end = len(view)
    while end - pos >= HEADER_SIZE:
        try:
            offset, _ts, epoch, size = peek_header(view, pos)
        except CodecError:
            break
        if end - pos < size:
            break
        raw = bytes(view[pos : pos + size])
        try:
            rec, _ = decode_record(raw)
        except CodecError:
            out.append(Stored(partition, offset, None, None, 0, epoch, raw, corrupt=True))
        else:
            out.append(
                Stored(
                    partition,
                    rec.offset,
                    payload_id_of(rec.value),
                    rec.producer_id,
                    rec.producer_seq,
                    rec.leader_epoch,
                    raw,
                )
            )
        pos += size
    return out


def partition_dir(data_dir: Path, stream: str, partition: int) -> Path | None:
    """The partition's directory under a server's data dir, or None if it has none."""
    candidates = sorted(
        (data_dir / "streams").glob(f"{stream}-*/{partition}"), key=lambda p: p.stat().st_mtime
    )
    return candidates[-1] if candidates else None


def read_disk_log(data_dir: Path, stream: str, partition: int) -> list[Stored]:
    """Every whole record in a replica's segment files, in offset order (the process may be
    running: a partial last record is ignored)."""
    directory = partition_dir(data_dir, stream, partition)
    if directory is None:
        return []
    out: list[Stored] = []
    for segment in sorted(directory.glob("*.log")):
        out.extend(stored_from_raw(partition, segment.read_bytes()))
    return out
