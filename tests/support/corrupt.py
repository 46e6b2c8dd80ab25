"""Damage files on purpose, as a disk would: bit rot in a segment."""

from __future__ import annotations

from pathlib import Path


def flip_bits(path: Path, at: int, mask: int) -> None:
    """XOR the byte at offset ``at`` of ``path`` with ``mask`` (in place)."""
    with open(path, "r+b") as f:
        f.seek(at)
        byte = f.read(1)
        f.seek(at)
        f.write(bytes([byte[0] ^ mask]))
