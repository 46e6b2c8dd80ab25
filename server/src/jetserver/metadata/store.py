"""Single-server metadata persistence: the state machine's state in ``metadata.json``.

Each applied operation is followed by an atomic rewrite of the file (write a temporary file,
fsync it, rename it over the old one, fsync the directory), so a crash leaves either the old
or the new state, never a torn one. Issue 4 replaces this with a Raft log driving the same
:func:`~jetserver.metadata.ops.apply`.

Task safety: :class:`MetadataStore` serializes proposals with a lock; the file write runs in
a worker thread.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

import anyio
import attrs
import orjson

from jetserver.errors import JetServerError
from jetserver.logs import fields
from jetserver.metadata.model import MetadataState
from jetserver.metadata.ops import Op, OpResult, apply
from jetserver.storage.fatal import fsync_directory_or_die, fsync_or_die
from jetserver.storage.space import with_reserve

log = logging.getLogger(__name__)

METADATA_FILE = "metadata.json"


class MetadataCorrupt(JetServerError):
    """metadata.json exists but cannot be read as a metadata state."""


def write_atomic(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data`` atomically and durably (tmp + fsync + rename + dir fsync).

    A failed fsync stops the server (:mod:`jetserver.storage.fatal`): the new state may be visible
    in the page cache but not on disk, and nothing can make it durable now. A failed write
    (ENOSPC) removes the temporary file and raises.
    """
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        while view:
            written = os.write(fd, view)
            view = view[written:]
        fsync_or_die(fd, str(tmp))
    except OSError:
        tmp.unlink(missing_ok=True)  # its blocks go back at once (the fd closes below)
        raise
    finally:
        os.close(fd)
    os.replace(tmp, path)
    fsync_directory_or_die(path.parent, str(path.parent))


def load_state(path: Path) -> MetadataState:
    """Read the state from ``path`` (an empty state if the file does not exist).

    Raises:
        MetadataCorrupt: the file cannot be parsed.
    """
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return MetadataState()
    try:
        return MetadataState.from_dict(orjson.loads(raw))
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
        raise MetadataCorrupt(f"{path} is not a valid metadata file: {exc}") from exc


@attrs.define(eq=False)
class MetadataStore:
    """The metadata state of a single server, persisted after every operation."""

    path: Path
    """The metadata.json file."""
    state: MetadataState = attrs.field(factory=MetadataState)
    """The current state (replaced, never mutated)."""
    _lock: anyio.Lock = attrs.field(factory=anyio.Lock)

    @classmethod
    def open(cls, data_dir: Path) -> MetadataStore:
        """Load ``data_dir/metadata.json`` (creating ``data_dir`` if needed).

        Raises:
            MetadataCorrupt: the file exists but does not parse.
        """
        data_dir.mkdir(parents=True, exist_ok=True)
        path = data_dir / METADATA_FILE
        state = load_state(path)
        log.info(
            "metadata loaded",
            extra=fields(path=str(path), streams=len(state.streams), applied=state.applied),
        )
        return cls(path=path, state=state)

    async def propose(self, op: Op) -> OpResult:
        """Apply ``op`` and persist the new state before returning its result.

        A refused operation (error result) is not persisted. Raises OSError if the file
        cannot be written (the in-memory state then stays the old one).
        """
        async with self._lock:
            new_state, result = apply(self.state, op)
            changed = new_state.streams is not self.state.streams
            if result.ok and (changed or new_state.acls is not self.state.acls):
                data = orjson.dumps(new_state.to_dict(), option=orjson.OPT_INDENT_2)
                # On a full disk the space reserve is released for it: deleting a stream,
                # which frees space, must be possible (jetserver.storage.space).
                await anyio.to_thread.run_sync(
                    with_reserve, self.path, lambda: write_atomic(self.path, data)
                )
                self.state = new_state
            return result
