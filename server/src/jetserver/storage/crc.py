"""CRC-32 as spec/storage.md defines it (zlib's), from the fastest implementation present:
:mod:`jetsdk.codec.crc` (``isal`` when installed, which the server depends on; else zlib)."""

from __future__ import annotations

from jetsdk.codec.crc import IMPLEMENTATION, Crc32, crc32, crc32_combine

__all__ = ["IMPLEMENTATION", "Crc32", "crc32", "crc32_combine"]
