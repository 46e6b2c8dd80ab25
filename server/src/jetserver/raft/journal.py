"""A durable Raft journal for PySyncObj: checksummed records, fsync before acknowledging.

PySyncObj 0.3.17's own ``FileJournal`` writes through an mmap and never syncs: an entry a
follower has acknowledged can vanish in a power loss, which breaks Raft's safety (a
committed entry must survive on a majority). It also has no checksums, so a torn tail
would be read back as garbage. This module replaces it, keeping PySyncObj's journal
interface (``add``, ``clear``, ``deleteEntriesFrom``, ``deleteEntriesTo``, indexing, the
commit index, term and vote):

- ``journal.log``: an 8-byte magic, then records ``u32 length | u32 crc32 | u64 index |
  u64 term | command`` (big-endian; the CRC covers index, term and command). Every
  append is written and ``fdatasync``-ed before PySyncObj continues (and so before it
  acknowledges the entry). On open, a torn or corrupt tail is cut at the last good record
  and the number of bytes cut is logged.
- Truncating the tail (``deleteEntriesFrom``) is an ``ftruncate`` + sync; dropping the head
  after a snapshot (``deleteEntriesTo``) rewrites the kept records into a new file that is
  synced and renamed over the old one (never a half-rewritten journal).
- ``journal.log.meta.json``: ``{"term", "voted_for", "commit_index"}``, written atomically
  and durably; term and vote synchronously (Raft requires them durable before a vote is
  sent), the commit index at most once a second (it is only a hint for replay at start).

:func:`install` makes PySyncObj build this journal for any ``journalFile``.

Thread safety: a journal is used by the one PySyncObj thread that owns it.
"""

from __future__ import annotations

import logging
import os
import struct
import threading
import zlib
from pathlib import Path
from typing import Any

import orjson

from jetserver.errors import JetServerError
from jetserver.logs import fields
from jetserver.metadata.store import write_atomic
from jetserver.storage.fatal import fsync_directory_or_die, fsync_or_die
from jetserver.storage.files import write_all
from jetserver.storage.space import with_reserve

log = logging.getLogger(__name__)

MAGIC = b"JETRAFT1"
"""First bytes of a journal file."""
_RECORD_HEAD = struct.Struct(">II")
_ENTRY_HEAD = struct.Struct(">QQ")
MAX_RECORD_BYTES = 64 * 1024 * 1024
"""Largest record accepted when reading (a longer length field is corruption)."""

Entry = tuple[bytes, int, int]
"""PySyncObj's journal entry: (command, log index, term)."""


class JournalCorrupt(JetServerError):
    """The journal file cannot be used (bad magic, unreadable meta)."""


def _sync_dir(path: Path) -> None:
    fsync_directory_or_die(path, f"the Raft journal directory {path}")


def encode_record(command: bytes, index: int, term: int) -> bytes:
    """One journal record."""
    body = _ENTRY_HEAD.pack(index, term) + command
    return _RECORD_HEAD.pack(len(body), zlib.crc32(body)) + body


def scan_records(data: bytes) -> tuple[list[Entry], list[int], int]:
    """Parse records after the magic: ``(entries, record offsets, end of the last good one)``.

    Stops at the first short, oversized or checksum-failing record.
    """
    entries: list[Entry] = []
    offsets: list[int] = []
    pos = len(MAGIC)
    while pos + _RECORD_HEAD.size <= len(data):
        length, crc = _RECORD_HEAD.unpack_from(data, pos)
        start = pos + _RECORD_HEAD.size
        if length < _ENTRY_HEAD.size or length > MAX_RECORD_BYTES or start + length > len(data):
            break
        body = data[start : start + length]
        if zlib.crc32(body) != crc:
            break
        index, term = _ENTRY_HEAD.unpack_from(body)
        entries.append((bytes(body[_ENTRY_HEAD.size :]), index, term))
        offsets.append(pos)
        pos = start + length
    return entries, offsets, pos


class DurableJournal:
    """PySyncObj journal on a checksummed, synced file (see the module docstring).

    Args:
        path: the journal file (created with its directory if missing).
        fsync: sync every change before returning (False only for speed tests).

    Raises:
        JournalCorrupt: the file exists but is not a journal, or its meta is unreadable.
    """

    def __init__(self, path: Path, *, fsync: bool = True) -> None:
        self._path = path
        self._meta_path = path.with_name(path.name + ".meta.json")
        self._fsync = fsync
        path.parent.mkdir(parents=True, exist_ok=True)
        self._entries: list[Entry] = []
        self._offsets: list[int] = []
        self._fd = self._open()
        self._meta = self._load_meta()
        self._meta_dirty = False

    # -- file handling -------------------------------------------------------------------

    def _open(self) -> int:
        fd = os.open(self._path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            data = b""
            size = os.fstat(fd).st_size
            if size:
                data = os.pread(fd, size, 0)
            if size < len(MAGIC):
                if size and data != MAGIC[:size]:
                    raise JournalCorrupt(f"{self._path} is not a jet raft journal")
                os.ftruncate(fd, 0)
                os.pwrite(fd, MAGIC, 0)
                self._sync(fd)
                _sync_dir(self._path.parent)
                return fd
            if data[: len(MAGIC)] != MAGIC:
                raise JournalCorrupt(f"{self._path} is not a jet raft journal")
            self._entries, self._offsets, end = scan_records(data)
            if end < size:
                log.warning(
                    "raft journal: cut a torn or corrupt tail",
                    extra=fields(path=str(self._path), bytes_cut=size - end, kept=end),
                )
                os.ftruncate(fd, end)
                self._sync(fd)
            return fd
        except BaseException:
            os.close(fd)
            raise

    def _end(self) -> int:
        return os.fstat(self._fd).st_size

    def _sync(self, fd: int | None = None) -> None:
        # A failed sync stops the server: entries, votes and terms this server may have
        # acknowledged might not be on disk, and no later fsync can make them so.
        if self._fsync:
            fsync_or_die(
                self._fd if fd is None else fd, f"the Raft journal {self._path}", data_only=True
            )

    def _load_meta(self) -> dict[str, Any]:
        try:
            raw = self._meta_path.read_bytes()
        except FileNotFoundError:
            return {}
        try:
            meta = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            raise JournalCorrupt(f"{self._meta_path} is not valid JSON: {exc}") from exc
        if not isinstance(meta, dict):
            raise JournalCorrupt(f"{self._meta_path} is not a JSON object")
        return meta

    def _store_meta(self) -> None:
        data = orjson.dumps(self._meta)
        with_reserve(self._meta_path, lambda: write_atomic(self._meta_path, data))
        self._meta_dirty = False

    def _write_at(self, data: bytes, position: int) -> None:
        """Write ``data`` at ``position``; on a failure cut the file back to ``position``
        (no torn record stays behind a write that found the disk full)."""
        try:
            write_all(self._fd, data, position)
        except OSError:
            os.ftruncate(self._fd, position)
            raise

    # -- PySyncObj's journal interface (names are PySyncObj's) ---------------------------

    def add(self, command: bytes | str, idx: int, term: int) -> None:
        """Append an entry, durably."""
        data = command if isinstance(command, bytes) else command.encode()
        end = self._end()
        record = encode_record(data, idx, term)
        # A full disk releases the space reserve: a DeleteStream must get into the log.
        with_reserve(self._path, lambda: self._write_at(record, end))
        self._sync()
        self._entries.append((data, idx, term))
        self._offsets.append(end)

    def clear(self) -> None:
        """Remove every entry."""
        os.ftruncate(self._fd, len(MAGIC))
        self._sync()
        self._entries = []
        self._offsets = []

    def deleteEntriesFrom(self, entryFrom: int) -> None:
        """Drop the entries at list positions ``entryFrom`` and after."""
        if entryFrom >= len(self._entries):
            return
        os.ftruncate(self._fd, self._offsets[entryFrom])
        self._sync()
        del self._entries[entryFrom:]
        del self._offsets[entryFrom:]

    def deleteEntriesTo(self, entryTo: int) -> None:
        """Drop the entries before list position ``entryTo`` (after a snapshot)."""
        # The snapshot PySyncObj has just renamed into place must be durable before the
        # entries it replaces disappear.
        if self._fsync:
            _sync_dir(self._path.parent)
        kept = self._entries[entryTo:]
        tmp = self._path.with_name(self._path.name + ".tmp")
        offsets: list[int] = []
        buf = bytearray(MAGIC)
        for command, idx, term in kept:
            offsets.append(len(buf))
            buf += encode_record(command, idx, term)
        with_reserve(tmp, lambda: self._write_new(tmp, bytes(buf)))
        os.replace(tmp, self._path)
        if self._fsync:
            _sync_dir(self._path.parent)
        os.close(self._fd)
        self._fd = os.open(self._path, os.O_RDWR)
        self._entries = list(kept)
        self._offsets = offsets

    def _write_new(self, path: Path, data: bytes) -> None:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            write_all(fd, data, 0)
            self._sync(fd)
        except OSError:
            path.unlink(missing_ok=True)
            raise
        finally:
            os.close(fd)

    def __getitem__(self, item: Any) -> Any:
        return self._entries[item]

    def __len__(self) -> int:
        return len(self._entries)

    def _destroy(self) -> None:
        if self._meta_dirty:
            self._store_meta()
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def setRaftCommitIndex(self, raftCommitIndex: int) -> None:
        """Remember the commit index (stored at the next one-second timer)."""
        if self._meta.get("commit_index") != raftCommitIndex:
            self._meta["commit_index"] = raftCommitIndex
            self._meta_dirty = True

    def getRaftCommitIndex(self) -> int:
        """The stored commit index (1 if none)."""
        return int(self._meta.get("commit_index", 1))

    def setCurrentTerm(self, term: int, votedForNodeId: str | None) -> None:
        """Store term and vote durably before returning."""
        self._meta["term"] = term
        self._meta["voted_for"] = None if votedForNodeId is None else str(votedForNodeId)
        self._store_meta()

    def getCurrentTerm(self) -> int:
        """The stored term (0 if none)."""
        return int(self._meta.get("term", 0))

    def getVotedForNodeId(self) -> str | None:
        """The stored vote (None if none)."""
        voted = self._meta.get("voted_for")
        return None if voted is None else str(voted)

    def onOneSecondTimer(self) -> None:
        """Store the commit index if it changed."""
        if self._meta_dirty:
            self._store_meta()


_fsync_by_path: dict[str, bool] = {}
_install_lock = threading.Lock()
_installed = False


def install(path: Path, *, fsync: bool) -> str:
    """Make PySyncObj use :class:`DurableJournal` for ``path``; return the ``journalFile`` value.

    Replaces ``pysyncobj.syncobj.createJournal`` once per process (the only hook PySyncObj
    offers); journals of other paths keep PySyncObj's behaviour.

    Raises:
        RuntimeError: the installed PySyncObj has no ``createJournal`` to replace.
    """
    global _installed
    import pysyncobj.syncobj as syncobj_module

    key = str(path)
    with _install_lock:
        _fsync_by_path[key] = fsync
        if not _installed:
            original = getattr(syncobj_module, "createJournal", None)
            if original is None:
                raise RuntimeError("pysyncobj.syncobj.createJournal not found: unsupported version")

            def create_journal(journal_file: str | None = None) -> Any:
                if journal_file is not None and journal_file in _fsync_by_path:
                    return DurableJournal(Path(journal_file), fsync=_fsync_by_path[journal_file])
                return original(journal_file)

            syncobj_module.createJournal = create_journal
            _installed = True
    return key
