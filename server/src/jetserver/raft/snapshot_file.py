"""The bytes of the metadata Raft's snapshot file: its JSON document, zlib-compressed.

The snapshot (PySyncObj's full dump, ``snapshot.json``) is the whole metadata: every
partition's assignment, and the stream of each remembered CreateStream again. Written as
plain JSON it was 2.4 MiB at 10,000 partitions and 4.7 MiB at 20,000 (100 streams of 100
at replication factor 3), so that with the journal's 1 MiB bound the metadata Raft's
files passed the 5 MiB issue 34 allows them (8.0 MiB on a survivor of a 20,000-partition
failover). Its JSON is mostly the same keys and server ids over and over: zlib at level 1
takes it to a tenth or less, in a few ms of CPU (ISA-L's when installed, as for the CRCs;
both write the zlib format, RFC 1950).

A file that starts with ``{`` is read as the plain JSON snapshots were written before
(a zlib stream starts with ``0x78``): a server upgraded in place loads its old snapshot.
A snapshot sent by the leader to a lagging member is this file's bytes: members on either
side read both forms.

Thread safety: pure functions.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable
from typing import Any

import orjson

__all__ = ["COMPRESSION_LEVEL", "decode_snapshot", "encode_snapshot"]

COMPRESSION_LEVEL = 1
"""zlib level: the fastest (the Raft thread writes the snapshot holding the interpreter
lock for its Python part; level 6 made it half again as small for 3x the CPU)."""


def _compressor() -> Callable[[bytes, int], bytes]:
    try:
        from isal.isal_zlib import compress
    except ImportError:  # the optional accelerator is not installed
        return zlib.compress
    return compress


_compress = _compressor()


def encode_snapshot(doc: Any) -> bytes:
    """The snapshot file's bytes for ``doc`` (orjson, then zlib)."""
    return _compress(orjson.dumps(doc), COMPRESSION_LEVEL)


def decode_snapshot(data: bytes) -> Any:
    """The document of a snapshot file: zlib-compressed JSON, or plain JSON (a file written
    before 2026-11-30, or by hand).

    Raises:
        ValueError: neither (orjson's JSONDecodeError is one).
    """
    if data[:1] != b"{":
        try:
            data = zlib.decompress(data)
        except zlib.error as exc:
            raise ValueError(f"the snapshot is neither JSON nor zlib: {exc}") from exc
    return orjson.loads(data)
