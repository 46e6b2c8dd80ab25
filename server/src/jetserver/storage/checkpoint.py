"""Checkpoint files of a partition directory (spec/storage.md, "Checkpoint files").

Format (ASCII, every line ends with ``\\n``, no other whitespace than one space between the
fields of an entry)::

    <version>            always 0 in v1
    <count>              number of entry lines that follow
    <field> <field> ...  one line per entry, non-negative decimal integers without leading zeros

Files, all in the partition directory:

* ``high-watermark-checkpoint``: one entry ``<hw>``.
* ``log-start-offset-checkpoint``: one entry ``<log_start_offset>``.
* ``leader-epoch-checkpoint``: one entry ``<epoch> <start_offset>`` per epoch, in order.
* ``clean-shutdown``: one entry ``<active_base_offset> <active_log_bytes>``, written last by
  ``Log.close`` and removed by ``Log.open``.

Files are replaced atomically: write ``<name>.tmp``, fsync, rename over ``<name>``, fsync
the directory.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from pathlib import Path

from jetserver.storage.errors import CorruptFileError
from jetserver.storage.files import (
    FileTooLarge,
    fsync_directory,
    read_file_if_exists,
    write_file_atomically,
)

CHECKPOINT_VERSION = 0
HIGH_WATERMARK_FILE = "high-watermark-checkpoint"
LOG_START_OFFSET_FILE = "log-start-offset-checkpoint"
LEADER_EPOCH_FILE = "leader-epoch-checkpoint"
CLEAN_SHUTDOWN_FILE = "clean-shutdown"
CHECKPOINT_FILES = (HIGH_WATERMARK_FILE, LOG_START_OFFSET_FILE, LEADER_EPOCH_FILE)
MAX_CHECKPOINT_BYTES = 16 * 1024 * 1024
"""A bigger checkpoint file is treated as corrupt rather than read into memory."""

_NUMBER = re.compile(rb"^(0|[1-9][0-9]{0,19})$")
_ONE_ENTRY = re.compile(rb"0\n1\n(0|[1-9][0-9]{0,19})(?: (0|[1-9][0-9]{0,19}))?\n")
"""A version-0 file of one entry of one or two fields: most checkpoints (HW, log start,
the clean-shutdown marker), parsed in one match (a restart parses thousands)."""


def format_checkpoint(entries: Sequence[Sequence[int]]) -> bytes:
    """The bytes of a checkpoint file holding ``entries``."""
    lines = [str(CHECKPOINT_VERSION), str(len(entries))]
    for entry in entries:
        for value in entry:
            if value < 0:
                raise ValueError(f"checkpoint values are non-negative, got {value}")
        lines.append(" ".join(str(v) for v in entry))
    return ("\n".join(lines) + "\n").encode("ascii")


def _number(raw: bytes, path: str) -> int:
    if not _NUMBER.match(raw):
        raise CorruptFileError(path, f"bad number {raw[:40]!r}")
    return int(raw)


def parse_checkpoint(
    data: bytes, fields: int, *, path: str = "<checkpoint>"
) -> list[tuple[int, ...]]:
    """Parse checkpoint file bytes whose entries have ``fields`` numbers each.

    Raises:
        CorruptFileError: anything but the exact format (wrong version, count, field count,
            a missing final newline, stray whitespace).
    """
    one = _ONE_ENTRY.fullmatch(data)
    if one is not None and (one[2] is None) == (fields == 1) and fields <= 2:
        return [(int(one[1]),) if one[2] is None else (int(one[1]), int(one[2]))]
    if not data.endswith(b"\n"):
        raise CorruptFileError(path, "does not end with a newline")
    lines = data[:-1].split(b"\n")
    if len(lines) < 2:
        raise CorruptFileError(path, "missing version or count line")
    if _number(lines[0], path) != CHECKPOINT_VERSION:
        raise CorruptFileError(path, f"unknown version {lines[0]!r}")
    count = _number(lines[1], path)
    if count != len(lines) - 2:
        raise CorruptFileError(path, f"count {count} but {len(lines) - 2} entries")
    entries: list[tuple[int, ...]] = []
    for line in lines[2:]:
        parts = line.split(b" ")
        if len(parts) != fields:
            raise CorruptFileError(path, f"entry {line[:60]!r} does not have {fields} fields")
        entries.append(tuple(_number(p, path) for p in parts))
    return entries


def write_checkpoint(
    directory: Path, name: str, entries: Sequence[Sequence[int]], *, sync: bool = True
) -> None:
    """Atomically replace ``directory/name`` with a checkpoint of ``entries`` (without
    ``sync``: not durable until the caller syncs the file system)."""
    write_file_atomically(f"{directory}/{name}", format_checkpoint(entries), sync=sync)


def read_checkpoint(directory: Path, name: str, fields: int) -> list[tuple[int, ...]] | None:
    """Entries of ``directory/name``, or None if the file does not exist.

    Raises:
        CorruptFileError: the file exists but does not parse (or is absurdly large).
        OSError: the file exists but cannot be read.
    """
    path = f"{directory}/{name}"  # a str: a restart reads thousands (pathlib: 3x the CPU)
    try:
        data = read_file_if_exists(path, MAX_CHECKPOINT_BYTES)
    except FileTooLarge as exc:
        too_large = f"{exc.size} bytes is too large for a checkpoint"
        raise CorruptFileError(str(path), too_large) from exc
    if data is None:
        return None
    return parse_checkpoint(data, fields, path=str(path))


def read_single_value(directory: Path, name: str) -> int | None:
    """The value of a one-entry, one-field checkpoint; None if missing.

    Raises:
        CorruptFileError: the file does not hold exactly one one-field entry.
    """
    entries = read_checkpoint(directory, name, 1)
    if entries is None:
        return None
    if len(entries) != 1:
        raise CorruptFileError(str(directory / name), f"{len(entries)} entries, expected 1")
    return entries[0][0]


def remove_file(directory: Path, name: str) -> bool:
    """Delete ``directory/name`` if present and fsync the directory; True if it existed."""
    try:
        os.unlink(directory / name)
    except FileNotFoundError:
        return False
    fsync_directory(directory)
    return True
