"""Test-only durability trace: what the storage engine made durable, for power-loss tests.

A ``kill -9`` loses no written byte (the page cache survives the process). A power loss
also loses every write that was not fsynced. To simulate it, a server started with the
environment variable ``JET_TEST_DURABLE_LOG=<trace file>`` appends one JSON line to the
trace file whenever the storage engine

* creates a file or truncates it on open (``create``: nothing of the new content is durable),
* fsyncs / fdatasyncs a file (``sync``: its size measured *before* the fsync, so a
  concurrent append is never counted as durable),
* fsyncs a directory (``dir``: the name -> inode map listed *before* the fsync).

Files are identified by ``(st_dev, st_ino)``, so renames are followed. After the process
has been killed, :func:`simulate_power_loss` truncates every file of a traced directory to
its last fsynced size, and deletes the files that were never fsynced or whose directory
entry was not made durable by a directory fsync (in a directory the engine fsyncs).

Not modelled: the old content of a file rewritten in place (its size is reset to 0 until
the next fsync, which is harsher than most file systems), a rename or unlink not yet made
durable (the new state is kept), and directories the engine never fsyncs (their entries
are kept). The Raft journal, its snapshot and meta files and the metadata file are traced
too: they sync through :mod:`jetserver.storage.fatal`, which uses this module's functions.

Cost when off: one module attribute test per fsync or file creation. Enable the trace from
the server's first start on an empty data directory (a file that existed before tracing
started counts as never fsynced). Linux only (paths come from ``/proc/self/fd``).

Thread-safety: :class:`DurabilityTrace` methods may be called from any thread.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

import attrs
import orjson

__all__ = [
    "ENV_VAR",
    "TRACE",
    "DurabilityTrace",
    "PowerLossReport",
    "disable",
    "enable",
    "simulate_power_loss",
]

ENV_VAR = "JET_TEST_DURABLE_LOG"
"""Environment variable naming the trace file (unset or empty: tracing off)."""


def _path_of(fd: int) -> str:
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return ""


class DurabilityTrace:
    """Appends durability events to a trace file (JSON lines, ``O_APPEND``)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        """The trace file."""
        path.parent.mkdir(parents=True, exist_ok=True)
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self._lock = threading.Lock()

    def _write(self, event: dict[str, object]) -> None:
        line = orjson.dumps(event) + b"\n"
        with self._lock:
            os.write(self._fd, line)

    def created(self, fd: int) -> None:
        """``fd`` was just created or truncated: none of its content is durable yet."""
        st = os.fstat(fd)
        self._write({"ev": "create", "dev": st.st_dev, "ino": st.st_ino, "path": _path_of(fd)})

    def synced(self, fd: int, size: int) -> None:
        """An fsync of ``fd`` returned; ``size`` was its size before the fsync started."""
        st = os.fstat(fd)
        self._write(
            {"ev": "sync", "dev": st.st_dev, "ino": st.st_ino, "size": size, "path": _path_of(fd)}
        )

    def dir_synced(self, directory: Path, entries: dict[str, int]) -> None:
        """An fsync of ``directory`` returned; ``entries`` (name -> inode) were listed before."""
        self._write({"ev": "dir", "path": os.path.realpath(directory), "entries": entries})

    def close(self) -> None:
        """Close the trace file."""
        with self._lock:
            if self._fd >= 0:
                os.close(self._fd)
                self._fd = -1


def list_entries(directory: Path) -> dict[str, int]:
    """Name -> inode of the regular files in ``directory``."""
    out: dict[str, int] = {}
    with os.scandir(directory) as it:
        for entry in it:
            if entry.is_file(follow_symlinks=False):
                out[entry.name] = entry.inode()
    return out


def _from_env() -> DurabilityTrace | None:
    value = os.environ.get(ENV_VAR, "")
    return DurabilityTrace(Path(value)) if value else None


TRACE: DurabilityTrace | None = _from_env()
"""The active trace, or None (the storage engine tests this before every hook call)."""


def enable(path: Path) -> DurabilityTrace:
    """Start tracing to ``path`` in this process (tests; servers use :data:`ENV_VAR`)."""
    global TRACE
    disable()
    TRACE = DurabilityTrace(path)
    return TRACE


def disable() -> None:
    """Stop tracing in this process."""
    global TRACE
    trace, TRACE = TRACE, None
    if trace is not None:
        trace.close()


@attrs.frozen
class PowerLossReport:
    """What :func:`simulate_power_loss` did."""

    truncated: dict[str, tuple[int, int]]
    """Path -> (size before, size after) of every file that lost bytes."""
    deleted: dict[str, str]
    """Path -> why, for every file removed."""
    kept: int
    """Files left whole."""


@attrs.define
class _FileState:
    durable: int = 0
    paths: set[str] = attrs.Factory(set)


def _load(trace_path: Path) -> tuple[dict[tuple[int, int], _FileState], dict[str, dict[str, int]]]:
    files: dict[tuple[int, int], _FileState] = {}
    listings: dict[str, dict[str, int]] = {}
    data = trace_path.read_bytes() if trace_path.exists() else b""
    for line in data.splitlines():
        try:
            ev = orjson.loads(line)
        except orjson.JSONDecodeError:
            continue  # a line torn by the kill: the event did not complete
        kind = ev.get("ev")
        if kind == "dir":
            listings[str(ev["path"])] = {str(k): int(v) for k, v in ev["entries"].items()}
            continue
        key = (int(ev["dev"]), int(ev["ino"]))
        if kind == "create":
            files[key] = _FileState(0, files[key].paths if key in files else set())
        elif kind == "sync":
            files.setdefault(key, _FileState()).durable = int(ev["size"])
        else:
            continue
        if ev.get("path"):
            files[key].paths.add(str(ev["path"]))
    return files, listings


def simulate_power_loss(trace_path: Path) -> PowerLossReport:
    """Cut every traced file back to what was durable when the process died.

    Call only while no process writes the traced directories (after ``kill -9``). In every
    directory that holds a traced file or was fsynced: a file never created or fsynced under
    the trace is deleted; in a fsynced directory, a file whose name -> inode is not in the
    last listing is deleted; every other file is truncated to its last fsynced size.
    """
    files, listings = _load(trace_path)
    directories = set(listings)
    for traced in files.values():
        directories.update(os.path.dirname(p.removesuffix(" (deleted)")) for p in traced.paths)
    truncated: dict[str, tuple[int, int]] = {}
    deleted: dict[str, str] = {}
    kept = 0
    for directory in sorted(directories):
        if not os.path.isdir(directory):
            continue
        listing = listings.get(directory)
        for name in sorted(list_entries(Path(directory))):
            path = os.path.join(directory, name)
            st = os.stat(path)
            state = files.get((st.st_dev, st.st_ino))
            if state is None:
                os.unlink(path)
                deleted[path] = "never fsynced"
            elif listing is not None and listing.get(name) != st.st_ino:
                os.unlink(path)
                deleted[path] = "directory entry never fsynced"
            elif st.st_size > state.durable:
                os.truncate(path, state.durable)
                truncated[path] = (st.st_size, state.durable)
            else:
                kept += 1
    return PowerLossReport(truncated, deleted, kept)
