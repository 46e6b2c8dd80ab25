"""Records as a replica stores them: decoded from segment files or Fetch bodies, with their
bytes kept for replica comparison."""

from __future__ import annotations

from pathlib import Path

from cluster.checkers import Stored, payload_id_of
from jetsdk.codec.record import iter_records, peek_header


def stored_from_raw(partition: int, data: bytes | memoryview) -> list[Stored]:
    """Decode whole records (a trailing partial record is ignored) keeping their bytes."""
    out = []
    view = memoryview(data)
    pos = 0
    for rec in iter_records(view):
        size = peek_header(view, pos)[3]
        out.append(
            Stored(
                partition=partition,
                offset=rec.offset,
                payload_id=payload_id_of(rec.value),
                producer_id=rec.producer_id,
                producer_seq=rec.producer_seq,
                leader_epoch=rec.leader_epoch,
                raw=bytes(view[pos : pos + size]),
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
